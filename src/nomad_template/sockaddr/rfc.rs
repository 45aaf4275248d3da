//! The address blocks of the RFCs go-sockaddr knows, for its `rfc`
//! filter, its "private" (RFC 6890's special-purpose registries) and
//! "forwardable" (not in the blocks RFC 6890 marks not forwardable).

use std::net::IpAddr;

use super::network::Network;

/// The number go-sockaddr gives its list of blocks a router does not
/// forward (not an RFC).
pub const FORWARDING_BLACKLIST: u32 = 4_294_967_295;

/// Each RFC's blocks, as CIDR text.
const RFCS: &[(u32, &[&str])] = &[
    (919, &["255.255.255.255/32"]),
    (1112, &["224.0.0.0/4"]),
    (1122, &["0.0.0.0/8", "127.0.0.0/8"]),
    (1918, &["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]),
    (2544, &["198.18.0.0/15"]),
    (2765, &["::ffff:0:0/96"]),
    (2928, &["2001::/16"]),
    (3056, &["2002::/16"]),
    (3068, &["192.88.99.0/24", "2002:c058:6301::/120"]),
    (3171, &["224.0.0.0/4"]),
    (
        3330,
        &[
            "0.0.0.0/8",
            "10.0.0.0/8",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "172.16.0.0/12",
            "192.0.2.0/24",
            "192.88.99.0/24",
            "192.168.0.0/16",
            "198.18.0.0/15",
            "224.0.0.0/4",
            "240.0.0.0/4",
        ],
    ),
    (3849, &["2001:db8::/32"]),
    (3927, &["169.254.0.0/16"]),
    (4038, &["::ffff:0:0/96"]),
    (4193, &["fc00::/7"]),
    (
        4291,
        &[
            "::/128",
            "::1/128",
            "::/96",
            "::ffff:0:0/96",
            "fe80::/10",
            "fec0::/10",
            "ff00::/8",
        ],
    ),
    (4380, &["2001::/32"]),
    (4773, &["2001::/23"]),
    (4843, &["2001:10::/28"]),
    (5180, &["2001:200::/48"]),
    (
        5735,
        &[
            "192.0.2.0/24",
            "198.51.100.0/24",
            "203.0.113.0/24",
            "198.18.0.0/15",
        ],
    ),
    (5737, &["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"]),
    (6052, &["64:ff9b::/96"]),
    (6333, &["192.0.0.0/29"]),
    (6598, &["100.64.0.0/10"]),
    (6666, &["100::/64"]),
    (
        6890,
        &[
            "0.0.0.0/8",
            "10.0.0.0/8",
            "100.64.0.0/10",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "172.16.0.0/12",
            "192.0.0.0/24",
            "192.0.0.0/29",
            "192.0.2.0/24",
            "192.88.99.0/24",
            "192.168.0.0/16",
            "198.18.0.0/15",
            "198.51.100.0/24",
            "203.0.113.0/24",
            "240.0.0.0/4",
            "255.255.255.255/32",
            "::1/128",
            "::/128",
            "64:ff9b::/96",
            "::ffff:0:0/96",
            "100::/64",
            "2001::/16",
            "2002::/16",
            "fc00::/7",
            "fe80::/10",
        ],
    ),
    (7335, &["192.0.0.0/29"]),
    (
        FORWARDING_BLACKLIST,
        &[
            "0.0.0.0/8",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "192.0.0.0/24",
            "192.0.2.0/24",
            "198.51.100.0/24",
            "203.0.113.0/24",
            "240.0.0.0/4",
            "255.255.255.255/32",
            "::1/128",
            "::/128",
            "::ffff:0:0/96",
            "2001:db8::/32",
            "2001:10::/28",
            "fe80::/10",
        ],
    ),
];

/// Whether `addr` is in a block of `rfc`; an RFC go-sockaddr does not know
/// is an error naming it.
pub fn contains(rfc: u32, addr: IpAddr) -> Result<bool, String> {
    let (_, blocks) = RFCS
        .iter()
        .find(|(n, _)| *n == rfc)
        .ok_or_else(|| format!("unsupported RFC {rfc}"))?;
    Ok(blocks.iter().any(|block| {
        Network::parse(block)
            .expect("the RFC table holds valid CIDR blocks")
            .contains(addr)
    }))
}

/// In RFC 6890's special-purpose registries: go-sockaddr's "private".
pub fn is_private(addr: IpAddr) -> bool {
    contains(6890, addr).unwrap_or(false)
}

/// Not in a block RFC 6890 marks not forwardable.
pub fn is_forwardable(addr: IpAddr) -> bool {
    !contains(FORWARDING_BLACKLIST, addr).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_block_of_the_table_parses() {
        for (rfc, blocks) in RFCS {
            for block in *blocks {
                assert!(Network::parse(block).is_ok(), "RFC {rfc}: {block}");
            }
        }
    }

    #[test]
    fn private_is_rfc_6890_not_only_rfc_1918() {
        for private in [
            "10.1.2.3",
            "172.31.255.1",
            "192.168.1.1",
            "100.64.0.1",
            "fd00::1",
        ] {
            assert!(is_private(ip(private)), "{private}");
        }
        for public in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2a00:1450::1",
            "81.2.69.160",
        ] {
            assert!(!is_private(ip(public)), "{public}");
        }
    }

    #[test]
    fn loopback_link_local_and_documentation_are_not_forwardable() {
        for not in [
            "127.0.0.1",
            "169.254.1.1",
            "203.0.113.5",
            "::1",
            "fe80::1",
            "2001:db8::1",
        ] {
            assert!(!is_forwardable(ip(not)), "{not}");
        }
        for yes in ["10.0.0.1", "8.8.8.8", "fd00::1", "2a00:1450::1"] {
            assert!(is_forwardable(ip(yes)), "{yes}");
        }
    }

    #[test]
    fn an_unknown_rfc_is_an_error_naming_it() {
        assert_eq!(
            contains(1234, ip("10.0.0.1")).unwrap_err(),
            "unsupported RFC 1234"
        );
        assert!(contains(1918, ip("10.0.0.1")).unwrap());
        assert!(!contains(1918, ip("100.64.0.1")).unwrap());
    }
}
