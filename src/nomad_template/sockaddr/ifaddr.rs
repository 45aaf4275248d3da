//! go-sockaddr's interface addresses and what its templates do with a
//! list of them: filter (`include`, `exclude`), order (`sort`), drop
//! duplicates (`unique`), shift (`math`) and print (`attr`, `join`). Pure
//! functions over [`IfAddr`]s; the host's are read in `mod.rs`.

use std::cmp::Ordering;
use std::net::{IpAddr, Ipv4Addr};

use super::network::{all_ones, bits, from_bits, mask, width, Network};
use super::rfc;
use regex::Regex;

/// Go's `net.Flags`, in the order its `String` prints them.
const FLAG_NAMES: &[(u32, &str)] = &[
    (libc::IFF_UP as u32, "up"),
    (libc::IFF_BROADCAST as u32, "broadcast"),
    (libc::IFF_LOOPBACK as u32, "loopback"),
    (libc::IFF_POINTOPOINT as u32, "pointtopoint"),
    (libc::IFF_MULTICAST as u32, "multicast"),
    (libc::IFF_RUNNING as u32, "running"),
];

const UP: u32 = libc::IFF_UP as u32;

/// One address of one interface, as go-sockaddr's `IfAddr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    pub name: String,
    /// The interface's `IFF_*` flags, those of [`FLAG_NAMES`].
    pub flags: u32,
    pub addr: IpAddr,
    pub prefix: u8,
}

impl IfAddr {
    fn width(&self) -> u8 {
        width(self.addr)
    }

    fn mask(&self) -> u128 {
        mask(self.width(), self.prefix)
    }

    fn network(&self) -> u128 {
        bits(self.addr) & self.mask()
    }

    fn last(&self) -> u128 {
        self.network() | (all_ones(self.width()) & !self.mask())
    }

    /// go-sockaddr's `type`: `IPv4` or `IPv6`.
    pub fn kind(&self) -> &'static str {
        match self.addr {
            IpAddr::V4(_) => "IPv4",
            IpAddr::V6(_) => "IPv6",
        }
    }

    /// Go's `net.Flags.String`: the set flags joined by `|`, `0` if none.
    pub fn flags_text(&self) -> String {
        let names: Vec<&str> = FLAG_NAMES
            .iter()
            .filter(|(bit, _)| self.flags & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        if names.is_empty() {
            "0".into()
        } else {
            names.join("|")
        }
    }

    /// The flags of a text [`flags_text`](Self::flags_text) printed.
    pub fn parse_flags(text: &str) -> u32 {
        text.split('|')
            .filter_map(|name| FLAG_NAMES.iter().find(|(_, n)| *n == name))
            .fold(0, |flags, (bit, _)| flags | bit)
    }

    /// The address as go-sockaddr's `String` prints it: with its prefix
    /// unless that covers the whole address.
    pub fn string(&self) -> String {
        if self.prefix == self.width() {
            self.addr.to_string()
        } else {
            format!("{}/{}", self.addr, self.prefix)
        }
    }

    /// The attribute `name` (case-insensitive), as `attr` and `join` print
    /// it; empty if it does not apply to this address's type.
    pub fn attr(&self, name: &str) -> Result<String, String> {
        let width = self.width();
        let v4 = width == 32;
        Ok(match name.to_ascii_lowercase().as_str() {
            "address" | "host" => self.addr.to_string(),
            "name" => self.name.clone(),
            "flags" => self.flags_text(),
            "type" => self.kind().into(),
            "string" => self.string(),
            "port" => "0".into(),
            "network" => from_bits(width, self.network()).to_string(),
            "mask_bits" => self.prefix.to_string(),
            "netmask" if v4 => from_bits(32, self.mask()).to_string(),
            "netmask" => format!("{:032x}", self.mask()),
            "size" => match 1u128.checked_shl(u32::from(width - self.prefix)) {
                Some(n) => n.to_string(),
                None => "340282366920938463463374607431768211456".into(),
            },
            "broadcast" if v4 => from_bits(32, self.last()).to_string(),
            "first_usable" if v4 && self.prefix < 31 => {
                from_bits(32, self.network() + 1).to_string()
            }
            "first_usable" => from_bits(width, self.network()).to_string(),
            "last_usable" if v4 && self.prefix < 31 => from_bits(32, self.last() - 1).to_string(),
            "last_usable" => from_bits(width, self.last()).to_string(),
            "octets" => match self.addr {
                IpAddr::V4(a) => join_octets(&a.octets()),
                IpAddr::V6(a) => join_octets(&a.octets()),
            },
            "hex" if v4 => format!("{:08x}", bits(self.addr)),
            "hex" => format!("{:032x}", bits(self.addr)),
            "binary" if v4 => format!("{:032b}", bits(self.addr)),
            "binary" => format!("{:0128b}", bits(self.addr)),
            "uint32" if v4 => bits(self.addr).to_string(),
            "uint128" if !v4 => bits(self.addr).to_string(),
            "broadcast" | "uint32" | "uint128" => String::new(),
            other => return Err(format!("unsupported attribute name {other:?}")),
        })
    }
}

fn join_octets(octets: &[u8]) -> String {
    octets
        .iter()
        .map(u8::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Go's `net.IP` tests that the `flags` filter offers.
fn is_link_local_unicast(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_multicast(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => a.segments()[0] & 0xff0f == 0xff02,
    }
}

fn is_interface_local_multicast(addr: IpAddr) -> bool {
    matches!(addr, IpAddr::V6(a) if a.segments()[0] & 0xff0f == 0xff01)
}

fn is_global_unicast(addr: IpAddr) -> bool {
    let broadcast = addr == IpAddr::V4(Ipv4Addr::BROADCAST);
    !(broadcast
        || addr.is_unspecified()
        || addr.is_loopback()
        || addr.is_multicast()
        || is_link_local_unicast(addr))
}

/// Whether a filter matches an address.
type Test = Box<dyn Fn(&IfAddr) -> bool>;

/// Which addresses a filter keeps: the `include` list, or with `exclude`
/// the others. `selector` and `param` are go-sockaddr's: `address` and
/// `name` (regular expressions), `flag`/`flags`, `network`, `port`,
/// `rfc`/`rfcs`, `size`, `type`.
pub fn filter(
    addrs: Vec<IfAddr>,
    selector: &str,
    param: &str,
    include: bool,
) -> Result<Vec<IfAddr>, String> {
    let test: Test = match selector.to_ascii_lowercase().as_str() {
        "address" => {
            let re = regex(param, "address")?;
            Box::new(move |a| re.is_match(&a.string()))
        }
        "name" => {
            let re = regex(param, "name")?;
            Box::new(move |a| re.is_match(&a.name))
        }
        "port" => {
            let re = regex(param, "port")?;
            Box::new(move |_| re.is_match("0"))
        }
        "flag" | "flags" => flags_test(param)?,
        "network" => {
            let nets = param
                .split('|')
                .map(Network::parse)
                .collect::<Result<Vec<_>, _>>()?;
            Box::new(move |a| nets.iter().any(|n| n.contains(a.addr)))
        }
        "rfc" | "rfcs" => {
            let rfcs = param
                .split('|')
                .map(|n| {
                    let n: u32 = n
                        .trim()
                        .parse()
                        .map_err(|_| format!("unable to parse RFC number {n:?}"))?;
                    rfc::contains(n, IpAddr::V4(Ipv4Addr::UNSPECIFIED)).map(|_| n)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Box::new(move |a| {
                rfcs.iter()
                    .any(|n| rfc::contains(*n, a.addr).unwrap_or(false))
            })
        }
        "size" => {
            let size: u8 = param
                .trim()
                .parse()
                .map_err(|_| format!("invalid size argument {param:?}"))?;
            if size > 128 {
                return Err(format!("mask size out of bounds: {size}"));
            }
            Box::new(move |a| a.prefix == size)
        }
        "type" => {
            let kinds: Vec<String> = param.split('|').map(str::to_ascii_lowercase).collect();
            for kind in &kinds {
                if !matches!(kind.as_str(), "ip" | "ipv4" | "ipv6" | "unix") {
                    return Err(format!("unsupported type {kind:?} in {param:?}"));
                }
            }
            Box::new(move |a| {
                kinds
                    .iter()
                    .any(|k| k == "ip" || k.as_str() == a.kind().to_ascii_lowercase().as_str())
            })
        }
        other => {
            let verb = if include { "include" } else { "exclude" };
            return Err(format!("invalid {verb} selector {other:?}"));
        }
    };
    Ok(addrs.into_iter().filter(|a| test(a) == include).collect())
}

fn regex(pattern: &str, what: &str) -> Result<Regex, String> {
    Regex::new(pattern).map_err(|e| format!("unable to compile {what} regexp {pattern:?}: {e}"))
}

/// The `flags` filter: an address passes if its interface has every
/// interface flag named, or if its address has any address property
/// named (go-sockaddr's inclusive reading of `a|b`). `down` is an
/// interface that is not up.
fn flags_test(param: &str) -> Result<Test, String> {
    let mut want = 0u32;
    let mut check_flags = false;
    let mut tests: Vec<fn(&IfAddr) -> bool> = Vec::new();
    for name in param.to_ascii_lowercase().split('|') {
        let flag = |bit: i32| bit as u32;
        match name {
            "up" => want |= flag(libc::IFF_UP),
            "broadcast" => want |= flag(libc::IFF_BROADCAST),
            "point-to-point" => want |= flag(libc::IFF_POINTOPOINT),
            "loopback" => {
                want |= flag(libc::IFF_LOOPBACK);
                tests.push(|a| a.addr.is_loopback());
            }
            "multicast" => {
                want |= flag(libc::IFF_MULTICAST);
                tests.push(|a| a.addr.is_multicast());
            }
            "down" => tests.push(|a| a.flags & UP == 0),
            "forwardable" => tests.push(|a| rfc::is_forwardable(a.addr)),
            "global unicast" => tests.push(|a| is_global_unicast(a.addr)),
            "interface-local multicast" => tests.push(|a| is_interface_local_multicast(a.addr)),
            "link-local multicast" => tests.push(|a| is_link_local_multicast(a.addr)),
            "link-local unicast" => tests.push(|a| is_link_local_unicast(a.addr)),
            "unspecified" => tests.push(|a| a.addr.is_unspecified()),
            other => return Err(format!("unknown interface flag {other:?}")),
        }
        if !matches!(
            name,
            "down"
                | "forwardable"
                | "global unicast"
                | "interface-local multicast"
                | "link-local multicast"
                | "link-local unicast"
                | "unspecified"
        ) {
            check_flags = true;
        }
    }
    Ok(Box::new(move |a| {
        (check_flags && a.flags & want == want) || tests.iter().any(|t| t(a))
    }))
}

/// One key of `sort`.
type Compare = Box<dyn Fn(&IfAddr, &IfAddr) -> Ordering>;

/// `sort`: by each comma-separated key in turn (`address`, `default`,
/// `name`, `port`, `private`, `size`, `type`, each `+` or `-`), keeping the
/// order of addresses no key tells apart. `default` puts the addresses of
/// `default_interface` first.
pub fn sort(
    mut addrs: Vec<IfAddr>,
    keys: &str,
    default_interface: Option<&str>,
) -> Result<Vec<IfAddr>, String> {
    let compares = keys
        .split(',')
        .map(|key| sort_key(key, default_interface.map(str::to_owned)))
        .collect::<Result<Vec<Compare>, String>>()?;
    order::sort_by(&mut addrs, |a, b| {
        compares
            .iter()
            .map(|c| c(a, b))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    });
    Ok(addrs)
}

/// Whether `keys` names the `default` key, which needs the default route.
pub fn sorts_by_default(keys: &str) -> bool {
    keys.split(',').any(|k| {
        k.trim()
            .trim_start_matches(['+', '-'])
            .eq_ignore_ascii_case("default")
    })
}

fn sort_key(key: &str, default: Option<String>) -> Result<Compare, String> {
    let trimmed = key.trim().to_ascii_lowercase();
    let (descending, name) = match trimmed.strip_prefix('-') {
        Some(name) => (true, name.to_string()),
        None => (false, trimmed.trim_start_matches('+').to_string()),
    };
    let ascending: Compare = match name.as_str() {
        "address" => Box::new(|a, b| {
            same_type(a, b).map_or(Ordering::Equal, |_| bits(a.addr).cmp(&bits(b.addr)))
        }),
        "default" => Box::new(move |a, b| {
            let Some(default) = &default else {
                return Ordering::Equal;
            };
            (b.name == *default).cmp(&(a.name == *default))
        }),
        "name" => Box::new(|a, b| a.name.cmp(&b.name)),
        "port" => Box::new(|_, _| Ordering::Equal),
        "private" => Box::new(|a, b| rfc::is_private(b.addr).cmp(&rfc::is_private(a.addr))),
        "size" => {
            Box::new(|a, b| same_type(a, b).map_or(Ordering::Equal, |_| a.prefix.cmp(&b.prefix)))
        }
        "type" => Box::new(|a, b| a.width().cmp(&b.width())),
        _ => return Err(format!("unknown sort type {key:?}")),
    };
    Ok(if descending {
        Box::new(move |a, b| ascending(a, b).reverse())
    } else {
        ascending
    })
}

fn same_type(a: &IfAddr, b: &IfAddr) -> Option<()> {
    (a.width() == b.width()).then_some(())
}

/// `unique`: drops each address whose `address` or `name` equals that of
/// the one before it (the list is meant to be sorted).
pub fn unique(addrs: Vec<IfAddr>, selector: &str) -> Result<Vec<IfAddr>, String> {
    let key: fn(&IfAddr) -> String = match selector.to_ascii_lowercase().as_str() {
        "address" => |a| a.string(),
        "name" => |a| a.name.clone(),
        _ => return Err(format!("unsupported unique constraint {selector:?}")),
    };
    let mut out: Vec<IfAddr> = Vec::new();
    for addr in addrs {
        if out.last().map(key) != Some(key(&addr)) {
            out.push(addr);
        }
    }
    Ok(out)
}

/// `offset`: the addresses from `offset` on, or with a negative one the
/// last `-offset`.
pub fn offset(addrs: Vec<IfAddr>, offset: i64) -> Result<Vec<IfAddr>, String> {
    let n = usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX);
    if n > addrs.len() {
        return Err(format!(
            "unable to seek past the end of the interface array: offset ({offset}) exceeds the number of interfaces ({})",
            addrs.len()
        ));
    }
    let from = if offset < 0 { addrs.len() - n } else { n };
    Ok(addrs.into_iter().skip(from).collect())
}

/// `math`: `address` adds a signed number to each address (wrapping
/// within the family), `network` counts from the network address (a
/// negative number back from its last address), `mask` applies a netmask
/// of that many bits, keeping the wider of it and the address's own.
pub fn math(addrs: Vec<IfAddr>, operation: &str, value: &str) -> Result<Vec<IfAddr>, String> {
    let op = operation.to_ascii_lowercase();
    addrs
        .into_iter()
        .map(|a| {
            let width = a.width();
            let all = all_ones(width);
            let signed = || -> Result<i128, String> {
                let v = value.trim();
                if !v.starts_with(['+', '-']) {
                    return Err(format!("sign (+/-) is required for operation {operation:?}"));
                }
                v.parse::<i128>()
                    .map_err(|_| format!("unable to convert {value:?} to int for operation {operation:?}"))
            };
            let addr = match op.as_str() {
                "address" => bits(a.addr).wrapping_add(signed()? as u128) & all,
                "network" => {
                    let n = signed()?;
                    let host = !a.mask() & all;
                    if n >= 0 {
                        a.network() | (n as u128 & host)
                    } else {
                        a.last() - ((n.unsigned_abs() - 1) & host)
                    }
                }
                "mask" => {
                    let bits_: u8 = value
                        .trim()
                        .parse()
                        .ok()
                        .filter(|b| *b <= width)
                        .ok_or_else(|| {
                            format!("parameter for operation {operation:?} must be between 0 and {width}")
                        })?;
                    let masked = bits(a.addr) & mask(width, bits_);
                    return Ok(IfAddr {
                        addr: from_bits(width, masked),
                        prefix: a.prefix.min(bits_),
                        ..a
                    });
                }
                _ => return Err(format!("unsupported math operation {operation:?}")),
            };
            Ok(IfAddr {
                addr: from_bits(width, addr),
                ..a
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "ifaddr_tests.rs"]
mod tests;
