//! The network, regex and path functions, with the results Nomad's
//! (go-cty's and go-cty-funcs') give.

use super::functions::value;

#[test]
fn cidrhost_counts_from_either_end() {
    assert_eq!(
        value(r#"cidrhost("192.168.1.0/24", 5)"#),
        r#""192.168.1.5""#
    );
    assert_eq!(
        value(r#"cidrhost("192.168.1.0/24", -5)"#),
        r#""192.168.1.251""#
    );
    assert_eq!(
        value(r#"cidrhost("192.168.1.0/24", -256)"#),
        r#""192.168.1.0""#
    );
    assert_eq!(
        value(r#"cidrhost("10.12.112.0/20", 16)"#),
        r#""10.12.112.16""#
    );
    assert_eq!(
        value(r#"cidrhost("10.12.112.0/20", 268)"#),
        r#""10.12.113.12""#
    );
    assert_eq!(
        value(r#"cidrhost("fd00:fd12:3456:7890:00a2::/72", 34)"#),
        r#""fd00:fd12:3456:7890::22""#
    );
    assert_eq!(
        value(r#"cidrhost("192.168.1.0/30", 255)"#),
        "error: cidrhost: prefix of 30 does not accommodate a host numbered 255"
    );
    assert_eq!(
        value(r#"cidrhost("192.168.1.0/30", -255)"#),
        "error: cidrhost: prefix of 30 does not accommodate a host numbered -255"
    );
    for bad in ["not-a-cidr", "10.256.0.0/8", "10.0.0.0/33", "10.0.0.01/8"] {
        assert!(
            value(&format!("cidrhost({bad:?}, 6)")).contains("invalid CIDR expression"),
            "{bad}"
        );
    }
}

#[test]
fn cidrnetmask_writes_the_mask_as_an_address() {
    assert_eq!(value(r#"cidrnetmask("172.16.0.0/12")"#), r#""255.240.0.0""#);
    assert_eq!(
        value(r#"cidrnetmask("10.1.2.3/32")"#),
        r#""255.255.255.255""#
    );
    assert_eq!(value(r#"cidrnetmask("0.0.0.0/0")"#), r#""0.0.0.0""#);
    assert_eq!(
        value(r#"cidrnetmask("fd00::/64")"#),
        r#""ffff:ffff:ffff:ffff::""#
    );
}

#[test]
fn cidrsubnet_extends_the_prefix() {
    assert_eq!(
        value(r#"cidrsubnet("172.16.0.0/12", 4, 2)"#),
        r#""172.18.0.0/16""#
    );
    assert_eq!(
        value(r#"cidrsubnet("10.1.2.0/24", 4, 15)"#),
        r#""10.1.2.240/28""#
    );
    assert_eq!(
        value(r#"cidrsubnet("10.1.2.5/24", 0, 0)"#),
        r#""10.1.2.0/24""#
    );
    assert_eq!(
        value(r#"cidrsubnet("fd00:fd12:3456:7890::/56", 16, 162)"#),
        r#""fd00:fd12:3456:7800:a200::/72""#
    );
    assert_eq!(
        value(r#"cidrsubnet("10.1.2.0/24", 4, 16)"#),
        "error: cidrsubnet: prefix extension of 4 does not accommodate a subnet numbered 16"
    );
    assert_eq!(
        value(r#"cidrsubnet("10.1.2.0/24", 9, 0)"#),
        "error: cidrsubnet: insufficient address space to extend prefix of 24 by 9"
    );
    assert_eq!(
        value(r#"cidrsubnet("fd00::/16", 33, 0)"#),
        "error: cidrsubnet: may not extend prefix by more than 32 bits"
    );
}

#[test]
fn cidrsubnets_allots_consecutive_aligned_subnets() {
    assert_eq!(
        value(r#"cidrsubnets("10.1.0.0/16", 4, 4, 8, 4)"#),
        r#"["10.1.0.0/20", "10.1.16.0/20", "10.1.32.0/24", "10.1.48.0/20"]"#
    );
    assert_eq!(
        value(r#"cidrsubnets("fd00:fd12:3456:7890::/56", 16, 16, 16, 32)"#),
        r#"["fd00:fd12:3456:7800::/72", "fd00:fd12:3456:7800:100::/72", "fd00:fd12:3456:7800:200::/72", "fd00:fd12:3456:7800:300::/88"]"#
    );
    assert!(value(r#"cidrsubnets("10.0.0.0/30", 1, 1, 1)"#)
        .contains("not enough remaining address space"));
}

#[test]
fn regex_returns_the_match_the_groups_or_the_named_groups() {
    assert_eq!(
        value(r#"regex("[a-z]+", "53453453.345345aaabbbccc23454")"#),
        r#""aaabbbccc""#
    );
    assert_eq!(
        value(r#"regex("(\\d\\d\\d\\d)-(\\d\\d)-(\\d\\d)", "2019-02-01")"#),
        r#"["2019", "02", "01"]"#
    );
    assert_eq!(
        value(
            r#"regex("^(?:(?P<scheme>[^:/?#]+):)?(?://(?P<authority>[^/?#]*))?", "https://terraform.io/docs/")"#
        ),
        r#"{ "authority" = "terraform.io", "scheme" = "https" }"#
    );
    assert_eq!(value(r#"regex("(a)|(b)", "b")"#), r#"[null, "b"]"#);
    assert_eq!(
        value(r#"regex("[a-z]+", "123")"#),
        "error: regex: the pattern did not match any part of the given string"
    );
    assert_eq!(
        value(r#"regex("(?P<a>x)(y)", "xy")"#),
        "error: regex: invalid pattern: cannot mix both named and unnamed capture groups"
    );
    assert_eq!(
        value(r#"regex("a(b", "ab")"#),
        "error: regex: invalid pattern \"a(b\" at character 2: the group opened here is not closed: missing ')'"
    );
}

#[test]
fn regexall_lists_every_match() {
    assert_eq!(
        value(r#"regexall("[a-z]+", "1234abcd5678efgh9")"#),
        r#"["abcd", "efgh"]"#
    );
    assert_eq!(value(r#"length(regexall("[a-z]+", "123"))"#), "0");
    assert_eq!(
        value(r#"regexall("(\\w)=(\\d)", "a=1 b=2")"#),
        r#"[["a", "1"], ["b", "2"]]"#
    );
}

#[test]
fn regex_replace_expands_groups_and_replace_stays_literal() {
    assert_eq!(
        value(r#"regex_replace("hello world", "(\\w+) (\\w+)", "$2 ${1}!")"#),
        r#""world hello!""#
    );
    assert_eq!(value(r#"regex_replace("a1b22", "\\d+", "-")"#), r#""a-b-""#);
    // As in Nomad, a pattern between slashes means nothing to `replace`.
    assert_eq!(
        value(r#"replace("/tmp/x", "/tmp/", "/data/")"#),
        r#""/data/x""#
    );
}

#[test]
fn pathexpand_replaces_a_leading_tilde_by_home() {
    let home = std::env::var("HOME").unwrap_or_default();
    if home.is_empty() {
        return;
    }
    let home = home.trim_end_matches('/');
    assert_eq!(
        value(r#"pathexpand("~/.ssh/id")"#),
        format!("{:?}", format!("{home}/.ssh/id"))
    );
    assert_eq!(value(r#"pathexpand("/etc/hosts")"#), r#""/etc/hosts""#);
    assert_eq!(
        value(r#"pathexpand("~bob/x")"#),
        "error: pathexpand: cannot expand user-specific home dir"
    );
}

#[test]
fn regexall_past_its_step_limit_is_an_error_at_the_call() {
    let a = super::expressions::text(&"a".repeat(20_000));
    let err = super::expressions::evaluation_error(
        "x = length(regexall(\"a(.*z)?\", var.t))\n",
        &[("t", a)],
    );
    assert!(
        err.starts_with("test.hcl:1:12: regexall: finding every match would take more than "),
        "{err}"
    );
}
