//! consul-template's functions over Nomad's service registry:
//! `nomadService` and `nomadServices`, answered from the snapshot of
//! csi-agent's registry the template renders with ([`Context::services`]).
//!
//! `nomadService "[tag.]name[?ns=namespace][@region]"` lists the instances
//! of one service (those with the tag, if one is given), sorted by name
//! and then by ID; `nomadService N "key" "name"` picks at most `N` of them
//! by rendezvous hashing on `key`, so that templates with the same key
//! pick the same instances while they last, and a lost one moves only the
//! picks it had. `nomadServices "[?ns=namespace][@region]"` lists each
//! service name once with the union of its instances' tags. The
//! namespace is `default` unless given (`*` lists every one, for
//! `nomadServices`); csi-agent has one region, so `@region` is accepted
//! and reads the same registry.
//!
//! An instance is a map with consul-template's fields: `ID`, `Name`,
//! `Namespace`, `Node` (and `NodeID`), `Datacenter`, `Address`, `Port`,
//! `Tags`, `JobID`, `AllocID`.

use std::collections::{BTreeMap, BTreeSet};

use template::{Args, Value, MAX_ITEMS};

use super::{Context, NomadService};

/// The longest query string a template may give (`[tag.]name?ns=..@..`),
/// past any real one: a service name is at most 63 characters.
pub const MAX_QUERY: usize = 1024;

/// `nomadService "QUERY"`, or `nomadService COUNT "KEY" "QUERY"`: the
/// instances of one service.
pub(super) fn service(a: &mut Args<'_>, registry: &Context<'_>) -> Result<Value, String> {
    let (query, choose) = match a.values.len() {
        1 => (a.string(0)?, None),
        3 => {
            let count = a.int(0)?;
            if count < 0 {
                return Err(format!("expected a count of at least 0, got {count}"));
            }
            (a.string(2)?, Some((count as usize, a.string(1)?)))
        }
        n => {
            return Err(format!(
                "expected arguments <service> or <count> <key> <service>, got {n}"
            ))
        }
    };
    let query = ServiceQuery::parse(&query)?;
    let mut found: Vec<&NomadService> = registry
        .services
        .iter()
        .filter(|s| query.matches(s))
        .collect();
    order::sort_by(&mut found, |x, y| (&x.name, &x.id).cmp(&(&y.name, &y.id)));
    if let Some((count, key)) = choose {
        found = choose_by_key(found, count, &key);
    }
    found.truncate(MAX_ITEMS);
    Ok(Value::List(found.into_iter().map(instance).collect()))
}

/// `nomadServices ["QUERY"...]`: each service's name once, with the union
/// of its instances' tags.
pub(super) fn services(a: &mut Args<'_>, registry: &Context<'_>) -> Result<Value, String> {
    // consul-template joins its arguments into one query.
    let mut query = String::new();
    for i in 0..a.values.len() {
        query.push_str(&a.string(i)?);
        if query.len() > MAX_QUERY {
            return Err(too_long(&query));
        }
    }
    let namespace = parse_listing(&query)?;
    let mut names: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for s in registry.services {
        if namespace != "*" && s.namespace != namespace {
            continue;
        }
        let tags = names.entry((&s.name, &s.namespace)).or_default();
        tags.extend(s.tags.iter().map(String::as_str));
    }
    Ok(Value::List(
        names
            .into_iter()
            .take(MAX_ITEMS)
            .map(|((name, namespace), tags)| {
                Value::Map(BTreeMap::from([
                    ("Name".to_string(), Value::Str(name.to_string())),
                    ("Namespace".to_string(), Value::Str(namespace.to_string())),
                    ("Tags".to_string(), strings(tags)),
                ]))
            })
            .collect(),
    ))
}

/// What `nomadService`'s string asks for.
#[derive(Debug, PartialEq, Eq)]
struct ServiceQuery {
    tag: Option<String>,
    name: String,
    namespace: String,
}

impl ServiceQuery {
    /// Parses `[tag.]name[?ns=namespace][@region]`, as consul-template's
    /// pattern reads it: the name is word characters and dashes after the
    /// last dot.
    fn parse(text: &str) -> Result<ServiceQuery, String> {
        if text.len() > MAX_QUERY {
            return Err(too_long(text));
        }
        let invalid = || format!("nomad.service: invalid format: {text:?}");
        let (rest, region) = split_region(text);
        if region.is_some_and(|r| !r.chars().all(|c| word(c) || c == '.')) {
            return Err(invalid());
        }
        let (rest, namespace) = match rest.split_once("?ns=") {
            Some((rest, ns)) if !ns.is_empty() && ns.chars().all(word) => (rest, ns),
            Some(_) => return Err(invalid()),
            None => (rest, "default"),
        };
        let (tag, name) = match rest.rsplit_once('.') {
            Some((tag, name)) => (Some(tag), name),
            None => (None, rest),
        };
        if name.is_empty() || !name.chars().all(word) {
            return Err(invalid());
        }
        if let Some(tag) = tag {
            let ok = !tag.is_empty() && tag.chars().all(|c| word(c) || "=:.".contains(c));
            if !ok {
                return Err(invalid());
            }
        }
        Ok(ServiceQuery {
            tag: tag.map(str::to_string),
            name: name.to_string(),
            namespace: namespace.to_string(),
        })
    }

    fn matches(&self, s: &NomadService) -> bool {
        s.name == self.name
            && s.namespace == self.namespace
            && self.tag.as_ref().map_or(true, |t| s.tags.contains(t))
    }
}

/// `nomadServices`' query, `[?ns=namespace][@region]`: the namespace.
fn parse_listing(text: &str) -> Result<String, String> {
    let invalid = || format!("nomad.services: invalid format: {text:?}");
    let (rest, region) = split_region(text);
    if region.is_some_and(|r| !r.chars().all(|c| word(c) || c == '.')) {
        return Err(invalid());
    }
    match rest.strip_prefix("?ns=") {
        None if rest.is_empty() => Ok("default".to_string()),
        Some("*") => Ok("*".to_string()),
        Some(ns) if !ns.is_empty() && ns.chars().all(word) => Ok(ns.to_string()),
        _ => Err(invalid()),
    }
}

fn split_region(text: &str) -> (&str, Option<&str>) {
    match text.rsplit_once('@') {
        Some((rest, region)) if !region.is_empty() => (rest, Some(region)),
        _ => (text, None),
    }
}

/// Go's `[[:word:]]` and the dash.
fn word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn too_long(text: &str) -> String {
    format!(
        "a service query of {} bytes is longer than the limit of {MAX_QUERY} (MAX_QUERY)",
        text.len()
    )
}

/// At most `count` of `found`, those whose hash with `key` scores highest
/// (rendezvous hashing), in their order.
fn choose_by_key<'s>(
    found: Vec<&'s NomadService>,
    count: usize,
    key: &str,
) -> Vec<&'s NomadService> {
    if found.len() <= count {
        return found;
    }
    let mut scored: Vec<(u64, usize)> = found
        .iter()
        .enumerate()
        .map(|(i, s)| (fnv1a(&[key.as_bytes(), b"\0", s.id.as_bytes()]), i))
        .collect();
    order::sort_by(&mut scored, |a, b| b.cmp(a));
    let mut picked: Vec<usize> = scored.into_iter().take(count).map(|(_, i)| i).collect();
    order::sort(&mut picked);
    picked.into_iter().map(|i| found[i]).collect()
}

/// FNV-1a, 64 bits, over the parts in order.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.iter().flat_map(|p| p.iter()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn strings<'a>(items: impl IntoIterator<Item = &'a str>) -> Value {
    Value::List(
        items
            .into_iter()
            .map(|s| Value::Str(s.to_string()))
            .collect(),
    )
}

/// An instance as consul-template's `NomadService`: its tags sorted.
fn instance(s: &NomadService) -> Value {
    let text = |v: &str| Value::Str(v.to_string());
    let mut tags: Vec<&str> = s.tags.iter().map(String::as_str).collect();
    order::sort(&mut tags);
    Value::Map(BTreeMap::from([
        ("ID".to_string(), text(&s.id)),
        ("Name".to_string(), text(&s.name)),
        ("Namespace".to_string(), text(&s.namespace)),
        ("Node".to_string(), text(&s.node_id)),
        ("NodeID".to_string(), text(&s.node_id)),
        ("Datacenter".to_string(), text(&s.datacenter)),
        ("Address".to_string(), text(&s.address)),
        ("Port".to_string(), Value::Int(i64::from(s.port))),
        ("Tags".to_string(), strings(tags)),
        ("JobID".to_string(), text(&s.job_id)),
        ("AllocID".to_string(), text(&s.alloc_id)),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_read_as_consul_template_reads_them() {
        let q = ServiceQuery::parse("nfs").unwrap();
        assert_eq!(
            (q.tag, q.name.as_str(), q.namespace.as_str()),
            (None, "nfs", "default")
        );
        let q = ServiceQuery::parse("v1.2.web-api?ns=team_a@eu-west").unwrap();
        assert_eq!(q.tag.as_deref(), Some("v1.2"));
        assert_eq!(
            (q.name.as_str(), q.namespace.as_str()),
            ("web-api", "team_a")
        );
        for bad in ["", "a b", ".web", "web?ns=", "web?ns=a b", "web@bad/region"] {
            assert!(ServiceQuery::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_listing("").unwrap(), "default");
        assert_eq!(parse_listing("?ns=*").unwrap(), "*");
        assert_eq!(parse_listing("@global").unwrap(), "default");
        assert!(parse_listing("web").is_err());
    }

    #[test]
    fn a_query_longer_than_max_query_is_refused_naming_the_limit() {
        let long = "a".repeat(MAX_QUERY + 1);
        assert!(ServiceQuery::parse(&long)
            .unwrap_err()
            .contains("MAX_QUERY"));
        assert!(ServiceQuery::parse(&"a".repeat(MAX_QUERY)).is_ok());
    }

    #[test]
    fn choosing_by_key_keeps_the_picks_that_remain() {
        let services: Vec<NomadService> = (0..10)
            .map(|i| NomadService {
                id: format!("id-{i}"),
                name: "db".into(),
                ..NomadService::default()
            })
            .collect();
        let all: Vec<&NomadService> = services.iter().collect();
        let picked = choose_by_key(all.clone(), 3, "client-a");
        assert_eq!(picked.len(), 3);
        assert_eq!(picked, choose_by_key(all.clone(), 3, "client-a"));
        // Losing an instance that was not picked changes nothing.
        let lost = all.iter().position(|s| !picked.contains(s)).unwrap();
        let mut fewer = all.clone();
        fewer.remove(lost);
        assert_eq!(choose_by_key(fewer, 3, "client-a"), picked);
        assert_eq!(choose_by_key(all.clone(), 20, "k").len(), 10);
    }
}
