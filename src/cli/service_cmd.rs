//! `csi-agent service list` and `service info NAME`: the instances that
//! `service { provider = "nomad" }` blocks registered (every host's, in a
//! cluster), as Nomad's `service list` and `service info` show them, and
//! with `-json` in the shape of Nomad's API answers.

use std::collections::{BTreeMap, BTreeSet};

use super::args::{self, switch, value, Flag, UsageError};
use super::plugin_cmd::columns;
use super::{out, CliError};
use crate::api::client::{resolve_address, AgentClient};
use crate::proto::agent as api;
use json::Value as Json;

pub const USAGE: &str = "\
usage: csi-agent service list [-json] [-address ADDR]
       csi-agent service info [-json] [-address ADDR] NAME

  list    each registered service's name and the tags of its instances
  info    the instances of service NAME: job, address, tags, node, alloc

Services are registered by `service { provider = \"nomad\" }` blocks while
their task (a group's: its alloc) runs; in a cluster, every host's.";

const FLAGS: &[Flag] = &[switch("json"), value("address")];

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let (verb, rest) = argv
        .split_first()
        .ok_or_else(|| UsageError::new("missing the service command (list, info)"))?;
    let args = args::parse(FLAGS, rest)?;
    let name = match verb.as_str() {
        "list" => {
            args.at_most(0)?;
            ""
        }
        "info" => {
            args.at_most(1)?;
            args.positional(0, "the service NAME")?
        }
        other => return Err(UsageError::new(format!("unknown service command {other:?}")).into()),
    };
    let socket = resolve_address(args.value("address"))?;
    let resp = AgentClient::connect(&socket)?.service_list(name)?;
    let json = args.switch("json");
    let text = match (verb.as_str(), json) {
        ("list", true) => listing_json(&resp.services).pretty() + "\n",
        ("list", false) => listing(&resp.services),
        (_, true) => Json::array(resp.services.iter().map(registration_json)).pretty() + "\n",
        (_, false) => instances(&resp.services),
    };
    out::out!("{text}");
    Ok(())
}

/// Each name once, with its instances' tags, by namespace.
fn names(services: &[api::ServiceRegistration]) -> BTreeMap<(&str, &str), BTreeSet<&str>> {
    let mut names: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for s in services {
        names
            .entry((s.namespace.as_str(), s.name.as_str()))
            .or_default()
            .extend(s.tags.iter().map(String::as_str));
    }
    names
}

fn tags<'a>(tags: impl IntoIterator<Item = &'a str>) -> String {
    format!("[{}]", tags.into_iter().collect::<Vec<_>>().join(","))
}

fn listing(services: &[api::ServiceRegistration]) -> String {
    if services.is_empty() {
        return "No service registrations found\n".into();
    }
    let mut rows = vec![vec!["Service Name".to_string(), "Tags".to_string()]];
    for ((_, name), t) in names(services) {
        rows.push(vec![name.to_string(), tags(t)]);
    }
    columns(&rows)
}

/// Nomad's `[{"Namespace": .., "Services": [{"ServiceName", "Tags"}]}]`.
fn listing_json(services: &[api::ServiceRegistration]) -> Json {
    let mut by_namespace: BTreeMap<&str, Vec<Json>> = BTreeMap::new();
    for ((namespace, name), t) in names(services) {
        by_namespace
            .entry(namespace)
            .or_default()
            .push(Json::object([
                ("ServiceName", Json::String(name.to_string())),
                ("Tags", Json::strings(t)),
            ]));
    }
    Json::array(by_namespace.into_iter().map(|(namespace, list)| {
        Json::object([
            ("Namespace", Json::String(namespace.to_string())),
            ("Services", Json::array(list)),
        ])
    }))
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

fn instances(services: &[api::ServiceRegistration]) -> String {
    let mut rows = vec![["Job ID", "Address", "Tags", "Node ID", "Alloc ID"]
        .map(str::to_string)
        .to_vec()];
    for s in services {
        rows.push(vec![
            s.job_id.clone(),
            address(s),
            tags(s.tags.iter().map(String::as_str)),
            short(&s.node_id).to_string(),
            short(&s.alloc_id).to_string(),
        ]);
    }
    columns(&rows)
}

fn address(s: &api::ServiceRegistration) -> String {
    match s.address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(ip)) => format!("[{ip}]:{}", s.port),
        _ => format!("{}:{}", s.address, s.port),
    }
}

/// Nomad's `ServiceRegistration`, with csi-agent's `Task` and `Meta`.
fn registration_json(s: &api::ServiceRegistration) -> Json {
    let text = |v: &str| Json::String(v.to_string());
    let meta: BTreeMap<&String, &String> = order::map(s.meta.iter());
    Json::object([
        ("ID", text(&s.id)),
        ("ServiceName", text(&s.name)),
        ("Namespace", text(&s.namespace)),
        ("NodeID", text(&s.node_id)),
        ("Datacenter", text(&s.datacenter)),
        ("JobID", text(&s.job_id)),
        ("AllocID", text(&s.alloc_id)),
        ("Task", text(&s.task)),
        ("Tags", Json::strings(&s.tags)),
        ("Address", text(&s.address)),
        ("Port", Json::Number(s.port.to_string())),
        (
            "Meta",
            Json::object(meta.into_iter().map(|(k, v)| (k.clone(), text(v)))),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(name: &str, alloc: &str, tags: &[&str]) -> api::ServiceRegistration {
        api::ServiceRegistration {
            id: format!("_nomad-task-{alloc}-group-g-{name}-http"),
            name: name.into(),
            namespace: "default".into(),
            node_id: "0123456789abcdef".into(),
            job_id: "web".into(),
            alloc_id: alloc.into(),
            address: "10.0.0.7".into(),
            port: 8080,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_list_shows_each_name_once_with_every_instance_s_tags() {
        let services = [
            instance("web", "aaaaaaaa-1", &["b"]),
            instance("web", "bbbbbbbb-2", &["a"]),
            instance("db", "cccccccc-3", &[]),
        ];
        assert_eq!(
            listing(&services),
            "Service Name  Tags\ndb            []\nweb           [a,b]\n"
        );
        let json = json::to_string(&listing_json(&services));
        assert!(
            json.starts_with("[{\"Namespace\":\"default\",\"Services\":[{\"ServiceName\":\"db\""),
            "{json}"
        );
        assert_eq!(listing(&[]), "No service registrations found\n");
    }

    #[test]
    fn info_shows_each_instance_with_its_address_and_short_ids() {
        let text = instances(&[instance("web", "aaaaaaaa-1234", &["x"])]);
        assert_eq!(
            text,
            "Job ID  Address        Tags  Node ID   Alloc ID\nweb     10.0.0.7:8080  [x]   01234567  aaaaaaaa\n"
        );
    }
}
