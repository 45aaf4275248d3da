//! `nomadService` and `nomadServices` over a registry's snapshot.

use std::collections::BTreeMap;
use std::time::SystemTime;

use template::{Error, Options};

use super::*;

fn service(id: &str, name: &str, address: &str, port: u16, tags: &[&str]) -> NomadService {
    NomadService {
        id: id.into(),
        name: name.into(),
        namespace: "default".into(),
        node_id: "node-1".into(),
        datacenter: "dc1".into(),
        address: address.into(),
        port,
        tags: tags.iter().map(|t| t.to_string()).collect(),
        job_id: "job".into(),
        alloc_id: format!("alloc-{id}"),
    }
}

fn registry() -> Vec<NomadService> {
    vec![
        service("3", "web", "10.0.0.3", 8080, &["v2"]),
        service("1", "nfs", "10.0.0.1", 2049, &[]),
        service("2", "web", "10.0.0.2", 8080, &["v1", "canary"]),
        NomadService {
            namespace: "team".into(),
            ..service("4", "web", "10.0.0.4", 9090, &["t"])
        },
    ]
}

fn render(text: &str) -> Result<String, Error> {
    let env = BTreeMap::new();
    let services = registry();
    let ctx = Context {
        env: &env,
        task_dir: None,
        services: &services,
    };
    let options = Options {
        error_on_missing_key: false,
        now: SystemTime::UNIX_EPOCH,
    };
    parse(text, "", "")?.render(&ctx, &options)
}

#[test]
fn the_nfs_demo_s_template_finds_the_server_s_address() {
    // The text of Nomad's demo/csi/nfs plugin jobs, as they have it.
    let text = "NFS_ADDRESS={{- range nomadService `nfs` }}{{ .Address }}{{ end -}}";
    assert_eq!(render(text).unwrap(), "NFS_ADDRESS=10.0.0.1");
}

#[test]
fn an_instance_has_consul_template_s_fields() {
    let out = render(
        "{{ range nomadService \"nfs\" }}{{ .ID }} {{ .Name }} {{ .Namespace }} {{ .Node }} {{ .NodeID }} {{ .Datacenter }} {{ .Address }}:{{ .Port }} {{ .Tags }} {{ .JobID }} {{ .AllocID }}{{ end }}",
    )
    .unwrap();
    assert_eq!(
        out,
        "1 nfs default node-1 node-1 dc1 10.0.0.1:2049 [] job alloc-1"
    );
}

#[test]
fn instances_are_sorted_and_filtered_by_tag_and_namespace() {
    let each = |q: &str| {
        render(&format!(
            "{{{{ range nomadService \"{q}\" }}}}{{{{ .Address }}}} {{{{ .Tags }}}};{{{{ end }}}}"
        ))
        .unwrap()
    };
    assert_eq!(each("web"), "10.0.0.2 [canary v1];10.0.0.3 [v2];");
    assert_eq!(each("v1.web"), "10.0.0.2 [canary v1];");
    assert_eq!(each("web?ns=team"), "10.0.0.4 [t];");
    assert_eq!(each("web@global"), each("web"));
    assert_eq!(each("missing"), "");
    let err = render("{{ nomadService \"not a name\" }}").unwrap_err();
    assert!(err.message.contains("invalid format"), "{err}");
}

#[test]
fn the_sharded_form_picks_count_instances_by_key() {
    let text = "{{ range nomadService 1 \"client-a\" \"web\" }}{{ .ID }}{{ end }}";
    let one = render(text).unwrap();
    assert!(one == "2" || one == "3", "{one}");
    assert_eq!(render(text).unwrap(), one);
    let both = render("{{ len (nomadService 5 \"k\" \"web\") }}").unwrap();
    assert_eq!(both, "2");
    let err = render("{{ nomadService 1 \"web\" }}").unwrap_err();
    assert!(err.message.contains("<count> <key> <service>"), "{err}");
}

#[test]
fn nomad_services_lists_each_name_with_its_tags() {
    let out = render("{{ range nomadServices }}{{ .Name }} {{ .Tags }};{{ end }}").unwrap();
    assert_eq!(out, "nfs [];web [canary v1 v2];");
    let all = render("{{ range nomadServices \"?ns=*\" }}{{ .Namespace }}/{{ .Name }};{{ end }}")
        .unwrap();
    assert_eq!(all, "default/nfs;default/web;team/web;");
}
