//! `sockaddr` through the template engine, over this host's interfaces:
//! what needs no particular network (the loopback interface, errors,
//! bounds). The chosen addresses of a made-up network are checked in the
//! integration tests' network namespaces.

use std::collections::BTreeMap;
use std::time::SystemTime;

use template::Options;

use crate::nomad_template::{parse, Context, MAX_SOCKADDR_TEXT};

fn render(text: &str) -> Result<String, String> {
    let env = BTreeMap::new();
    let ctx = Context {
        env: &env,
        task_dir: None,
        services: &[],
    };
    let options = Options {
        error_on_missing_key: false,
        now: SystemTime::now(),
    };
    parse(text, "", "")
        .map_err(|e| e.to_string())?
        .render(&ctx, &options)
        .map_err(|e| e.to_string())
}

#[test]
fn interface_ips_of_the_loopback_interface() {
    let out = render(r#"{{ sockaddr "GetInterfaceIPs \"^lo$\"" }}"#).unwrap();
    assert!(out.split(' ').any(|ip| ip == "127.0.0.1"), "{out}");
    // Loopback is not forwardable: GetInterfaceIP skips it.
    assert_eq!(
        render(r#"{{ sockaddr "GetInterfaceIP \"^lo$\"" }}"#).unwrap(),
        ""
    );
}

#[test]
fn a_pipeline_over_all_interfaces_and_its_dot() {
    let text = r#"{{ sockaddr "GetAllInterfaces | include \"name\" \"^lo$\" | include \"type\" \"IPv4\" | attr \"string\"" }}"#;
    assert_eq!(render(text).unwrap(), "127.0.0.1/8");
    let dot = r#"{{ sockaddr ". | include \"flags\" \"loopback\" | include \"type\" \"ipv4\" | join \"name\" \",\"" }}"#;
    assert_eq!(render(dot).unwrap(), "lo");
}

#[test]
fn range_and_attr_over_the_addresses_as_the_ceph_demo_does() {
    let text = r#"{{ sockaddr "with $a := GetAllInterfaces | include \"name\" \"^lo$\" | include \"type\" \"IPv4\" | limit 1 -}}{{- range $a -}}{{ attr \"address\" . }}{{ end }}{{ end " }}"#;
    assert_eq!(render(text).unwrap(), "127.0.0.1");
}

#[test]
fn the_arguments_are_joined_by_spaces() {
    let text = r#"{{ sockaddr "GetInterfaceIPs" "\"^lo$\"" | split " " | len }}"#;
    assert!(render(text).unwrap().parse::<usize>().unwrap() >= 1);
}

#[test]
fn errors_name_sockaddr_and_its_text() {
    let err = render(r#"{{ sockaddr "GetAllInterfaces | sort \"colour\"" }}"#).unwrap_err();
    assert!(err.contains("error calling sockaddr"), "{err}");
    assert!(
        err.contains(r#""GetAllInterfaces | sort \"colour\"""#),
        "{err}"
    );
    assert!(err.contains("unknown sort type \"colour\""), "{err}");
    let err =
        render(r#"{{ sockaddr "GetAllInterfaces | include \"rfc\" \"99999\"" }}"#).unwrap_err();
    assert!(err.contains("unsupported RFC 99999"), "{err}");
}

#[test]
fn consul_template_functions_are_not_in_sockaddrs_text() {
    let err = render(r#"{{ sockaddr "env \"HOME\"" }}"#).unwrap_err();
    assert!(
        err.contains("function \"env\" not defined in sockaddr's templates"),
        "{err}"
    );
    let err = render(r#"{{ sockaddr "sockaddr \"GetPrivateIP\"" }}"#).unwrap_err();
    assert!(err.contains("function \"sockaddr\" not defined"), "{err}");
}

#[test]
fn the_text_is_bounded_by_max_sockaddr_text() {
    let long = format!("GetPrivateIP {}", " ".repeat(MAX_SOCKADDR_TEXT));
    let err = render(&format!("{{{{ sockaddr {long:?} }}}}")).unwrap_err();
    assert!(
        err.contains("longer than MAX_SOCKADDR_TEXT (4096)"),
        "{err}"
    );
    let fits = format!(
        "GetAllInterfaces | len{}",
        " ".repeat(MAX_SOCKADDR_TEXT - 30)
    );
    assert!(render(&format!("{{{{ sockaddr {fits:?} }}}}")).is_ok());
}

#[test]
fn sockaddr_is_parsed_with_the_block_it_is_in() {
    // A go-sockaddr name is unknown outside sockaddr's text.
    let err = parse("{{ GetPrivateIP }}", "", "").unwrap_err();
    assert!(
        err.to_string()
            .contains("function \"GetPrivateIP\" not defined"),
        "{err}"
    );
}
