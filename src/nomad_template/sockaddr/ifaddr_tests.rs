use super::*;

const UP_BROADCAST: u32 = (libc::IFF_UP | libc::IFF_BROADCAST | libc::IFF_RUNNING) as u32;

fn addr(name: &str, cidr: &str, flags: u32) -> IfAddr {
    let net = Network::parse(cidr).unwrap();
    IfAddr {
        name: name.into(),
        flags,
        addr: net.addr,
        prefix: net.prefix,
    }
}

/// A host: loopback, a private and a public address on two interfaces,
/// a link-local IPv6 address, and an interface that is down.
fn host() -> Vec<IfAddr> {
    let lo = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as u32;
    vec![
        addr("lo", "127.0.0.1/8", lo),
        addr("eth0", "10.1.2.3/24", UP_BROADCAST),
        addr("eth0", "fe80::1/64", UP_BROADCAST),
        addr("eth1", "81.2.69.160/28", UP_BROADCAST),
        addr("eth1", "10.9.0.1/16", UP_BROADCAST),
        addr("eth2", "192.168.5.5/24", libc::IFF_BROADCAST as u32),
    ]
}

fn names_and_addrs(addrs: &[IfAddr]) -> Vec<String> {
    addrs
        .iter()
        .map(|a| format!("{} {}", a.name, a.string()))
        .collect()
}

#[test]
fn include_type_flags_and_exclude_name_as_the_usual_pipeline() {
    let v4 = filter(host(), "type", "IPv4", true).unwrap();
    let up = filter(v4, "flags", "up", true).unwrap();
    let not_lo = filter(up, "name", "lo", false).unwrap();
    assert_eq!(
        names_and_addrs(&not_lo),
        [
            "eth0 10.1.2.3/24",
            "eth1 81.2.69.160/28",
            "eth1 10.9.0.1/16"
        ]
    );
}

#[test]
fn down_is_an_interface_that_is_not_up() {
    let down = filter(host(), "flags", "down", true).unwrap();
    assert_eq!(names_and_addrs(&down), ["eth2 192.168.5.5/24"]);
}

#[test]
fn flags_filter_is_inclusive_across_names() {
    let kept = filter(host(), "flags", "loopback|link-local unicast", true).unwrap();
    assert_eq!(
        names_and_addrs(&kept),
        ["lo 127.0.0.1/8", "eth0 fe80::1/64"]
    );
}

#[test]
fn forwardable_drops_loopback_and_link_local() {
    let kept = filter(host(), "flags", "forwardable", true).unwrap();
    assert!(kept.iter().all(|a| a.name != "lo" && !a.addr.is_loopback()));
    assert!(!names_and_addrs(&kept).contains(&"eth0 fe80::1/64".to_string()));
}

#[test]
fn rfc_network_and_size_filters() {
    let private = filter(host(), "rfc", "1918", true).unwrap();
    assert_eq!(private.len(), 3);
    let public = filter(host(), "rfc", "6890", false).unwrap();
    assert_eq!(names_and_addrs(&public), ["eth1 81.2.69.160/28"]);
    let in_net = filter(host(), "network", "10.0.0.0/8|192.168.0.0/16", true).unwrap();
    assert_eq!(in_net.len(), 3);
    let slash16 = filter(host(), "size", "16", true).unwrap();
    assert_eq!(names_and_addrs(&slash16), ["eth1 10.9.0.1/16"]);
    let by_address = filter(host(), "address", "^10\\.", true).unwrap();
    assert_eq!(by_address.len(), 2);
}

#[test]
fn bad_filter_arguments_are_errors_naming_them() {
    let err = |selector, param| filter(host(), selector, param, true).unwrap_err();
    assert_eq!(err("colour", "x"), "invalid include selector \"colour\"");
    assert_eq!(err("type", "ipv5"), "unsupported type \"ipv5\" in \"ipv5\"");
    assert_eq!(
        err("flags", "sideways"),
        "unknown interface flag \"sideways\""
    );
    assert_eq!(err("rfc", "1234"), "unsupported RFC 1234");
    assert!(err("name", "(").starts_with("unable to compile name regexp \"(\""));
    assert!(err("network", "10.0.0.0/33").contains("invalid prefix length"));
}

#[test]
fn sort_by_default_then_type_then_size() {
    let sorted = sort(host(), "default,type,size", Some("eth1")).unwrap();
    assert_eq!(
        names_and_addrs(&sorted),
        [
            "eth1 10.9.0.1/16",
            "eth1 81.2.69.160/28",
            "lo 127.0.0.1/8",
            "eth0 10.1.2.3/24",
            "eth2 192.168.5.5/24",
            "eth0 fe80::1/64",
        ]
    );
}

#[test]
fn sort_descending_address_and_private_first() {
    let v4 = filter(host(), "type", "ipv4", true).unwrap();
    let by_address = sort(v4.clone(), "-address", None).unwrap();
    assert_eq!(by_address[0].string(), "192.168.5.5/24");
    assert_eq!(by_address.last().unwrap().string(), "10.1.2.3/24");
    let public_last = sort(v4, "private,name", None).unwrap();
    assert_eq!(public_last.last().unwrap().string(), "81.2.69.160/28");
    assert_eq!(
        sort(host(), "address,bogus", None).unwrap_err(),
        "unknown sort type \"bogus\""
    );
}

#[test]
fn unique_limit_and_offset() {
    let by_name = sort(host(), "name", None).unwrap();
    let one_each = unique(by_name, "name").unwrap();
    assert_eq!(one_each.len(), 4);
    let last_two = offset(host(), -2).unwrap();
    assert_eq!(
        names_and_addrs(&last_two),
        ["eth1 10.9.0.1/16", "eth2 192.168.5.5/24"]
    );
    assert_eq!(offset(host(), 5).unwrap().len(), 1);
    assert!(offset(host(), 7)
        .unwrap_err()
        .contains("exceeds the number of interfaces (6)"));
}

#[test]
fn attributes_as_go_sockaddr_prints_them() {
    let a = addr("eth0", "10.1.2.3/24", UP_BROADCAST);
    let attr = |name: &str| a.attr(name).unwrap();
    assert_eq!(attr("address"), "10.1.2.3");
    assert_eq!(attr("string"), "10.1.2.3/24");
    assert_eq!(attr("network"), "10.1.2.0");
    assert_eq!(attr("broadcast"), "10.1.2.255");
    assert_eq!(attr("netmask"), "255.255.255.0");
    assert_eq!(attr("Mask_Bits"), "24");
    assert_eq!(attr("size"), "256");
    assert_eq!(attr("first_usable"), "10.1.2.1");
    assert_eq!(attr("last_usable"), "10.1.2.254");
    assert_eq!(attr("flags"), "up|broadcast|running");
    assert_eq!(attr("type"), "IPv4");
    assert_eq!(attr("hex"), "0a010203");
    assert_eq!(attr("uint32"), "167838211");
    assert_eq!(attr("uint128"), "");
    assert_eq!(
        a.attr("colour").unwrap_err(),
        "unsupported attribute name \"colour\""
    );
    let v6 = addr("eth0", "fd00::1/64", UP_BROADCAST);
    assert_eq!(v6.attr("network").unwrap(), "fd00::");
    assert_eq!(v6.attr("size").unwrap(), "18446744073709551616");
    assert_eq!(v6.attr("type").unwrap(), "IPv6");
    assert_eq!(IfAddr::parse_flags("up|broadcast|running"), UP_BROADCAST);
}

#[test]
fn math_on_addresses_networks_and_masks() {
    let a = vec![addr("eth0", "10.1.2.3/24", UP_BROADCAST)];
    let shifted = |op, v| math(a.clone(), op, v).unwrap()[0].string();
    assert_eq!(shifted("address", "+256"), "10.1.3.3/24");
    assert_eq!(shifted("address", "-4"), "10.1.1.255/24");
    assert_eq!(shifted("network", "+2"), "10.1.2.2/24");
    assert_eq!(shifted("network", "-1"), "10.1.2.255/24");
    assert_eq!(shifted("mask", "16"), "10.1.0.0/16");
    assert_eq!(shifted("mask", "28"), "10.1.2.0/24");
    assert!(math(a.clone(), "address", "256")
        .unwrap_err()
        .contains("sign (+/-) is required"));
    assert!(math(a, "divide", "+1")
        .unwrap_err()
        .contains("unsupported math operation"));
    let wrap = vec![addr("x", "255.255.255.255/32", 0)];
    assert_eq!(math(wrap, "address", "+1").unwrap()[0].string(), "0.0.0.0");
}
