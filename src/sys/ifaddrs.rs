//! The IP addresses of the network interfaces the calling thread sees
//! (`getifaddrs(3)`), and the interface its default route goes out of
//! (`/proc/thread-self/net/route`, then `ipv6_route`): what the templates'
//! `sockaddr` reads, in the network namespace of the thread that asks.
//!
//! Both are read from the calling thread's namespace: `getifaddrs` asks
//! over a netlink socket the thread opens, and `/proc/thread-self/net` is
//! that thread's view (`/proc/self/net` would be the process leader's).

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The most addresses [`interface_addrs`] reads: a host with more is
/// refused rather than listed in part. Real hosts have tens.
pub const MAX_INTERFACE_ADDRS: usize = 65_536;

/// The longest route table [`default_interface`] reads, in bytes.
pub const MAX_ROUTE_TABLE: u64 = 16 << 20;

/// One IP address of one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddr {
    pub name: String,
    /// The interface's index (`if_nametoindex`), 0 if it went away.
    pub index: u32,
    /// The interface's `IFF_*` flags.
    pub flags: u32,
    pub addr: IpAddr,
    /// The netmask's length in bits.
    pub prefix: u8,
}

/// Every IPv4 and IPv6 address of every interface, ordered by interface
/// index (as Go's `net.Interfaces` lists them), each interface's in the
/// kernel's order.
pub fn interface_addrs() -> io::Result<Vec<InterfaceAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocated to `head`, which is a
    // valid place for a pointer; the list is freed below, once.
    super::cvt(unsafe { libc::getifaddrs(&mut head) })?;
    let list = IfaddrsList(head);
    let mut out = Vec::new();
    let mut node = list.0;
    while !node.is_null() {
        // SAFETY: `node` is an element of the list getifaddrs returned,
        // alive until `list` is dropped at the end of this function.
        let entry = unsafe { &*node };
        node = entry.ifa_next;
        let Some((addr, prefix)) = entry_addr(entry) else {
            continue;
        };
        // SAFETY: getifaddrs gives every entry a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(entry.ifa_name) };
        // SAFETY: `name` is NUL-terminated; if_nametoindex only reads it.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        push_bounded(
            &mut out,
            InterfaceAddr {
                name: name.to_string_lossy().into_owned(),
                index,
                flags: entry.ifa_flags,
                addr,
                prefix,
            },
        )?;
    }
    order::sort_by_key(&mut out, |a| a.index);
    Ok(out)
}

/// Adds `addr` to `out` unless `out` holds [`MAX_INTERFACE_ADDRS`].
fn push_bounded(out: &mut Vec<InterfaceAddr>, addr: InterfaceAddr) -> io::Result<()> {
    if out.len() == MAX_INTERFACE_ADDRS {
        return Err(io::Error::other(format!(
            "more than MAX_INTERFACE_ADDRS ({MAX_INTERFACE_ADDRS}) interface addresses"
        )));
    }
    out.push(addr);
    Ok(())
}

/// Frees the list of `getifaddrs` when dropped.
struct IfaddrsList(*mut libc::ifaddrs);

impl Drop for IfaddrsList {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the pointer came from getifaddrs and is freed once.
            unsafe { libc::freeifaddrs(self.0) }
        }
    }
}

/// The address and prefix length of an `AF_INET` or `AF_INET6` entry.
fn entry_addr(entry: &libc::ifaddrs) -> Option<(IpAddr, u8)> {
    if entry.ifa_addr.is_null() {
        return None;
    }
    // SAFETY: a non-null ifa_addr points at a sockaddr at least as long as
    // its family's, and the family field is at the same offset in all.
    let family = i32::from(unsafe { (*entry.ifa_addr).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: the family says the address is a sockaddr_in.
            let sin = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in) };
            let addr = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            let prefix = if entry.ifa_netmask.is_null() {
                32
            } else {
                // SAFETY: the netmask of an AF_INET entry is a sockaddr_in.
                let mask = unsafe { &*(entry.ifa_netmask as *const libc::sockaddr_in) };
                u32::from_be(mask.sin_addr.s_addr).count_ones() as u8
            };
            Some((IpAddr::V4(addr), prefix))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the address is a sockaddr_in6.
            let sin6 = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in6) };
            let addr = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let prefix = if entry.ifa_netmask.is_null() {
                128
            } else {
                // SAFETY: the netmask of an AF_INET6 entry is a sockaddr_in6.
                let mask = unsafe { &*(entry.ifa_netmask as *const libc::sockaddr_in6) };
                u128::from_be_bytes(mask.sin6_addr.s6_addr).count_ones() as u8
            };
            Some((IpAddr::V6(addr), prefix))
        }
        _ => None,
    }
}

/// The interface of the calling thread's default route: the IPv4 one
/// with the lowest metric, else the IPv6 one; `None` without either.
pub fn default_interface() -> io::Result<Option<String>> {
    let v4 = read_table("/proc/thread-self/net/route")?;
    if let Some(name) = default_v4(&v4) {
        return Ok(Some(name));
    }
    // A kernel without IPv6 has no such file: no IPv6 default route.
    let v6 = match read_table("/proc/thread-self/net/ipv6_route") {
        Ok(text) => text,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    Ok(default_v6(&v6))
}

fn read_table(path: &str) -> io::Result<String> {
    let mut text = String::new();
    let file = std::fs::File::open(path)?;
    io::Read::read_to_string(&mut io::Read::take(file, MAX_ROUTE_TABLE + 1), &mut text)?;
    if text.len() as u64 > MAX_ROUTE_TABLE {
        return Err(io::Error::other(format!(
            "{path} is longer than MAX_ROUTE_TABLE ({MAX_ROUTE_TABLE} bytes)"
        )));
    }
    Ok(text)
}

/// A route that is up (`RTF_UP`).
const RTF_UP: u32 = 0x1;
/// A route that refuses its packets (`RTF_REJECT`): the kernel's
/// unreachable defaults on `lo` are such routes.
const RTF_REJECT: u32 = 0x200;

/// The default route's interface in `/proc/net/route`'s text: columns
/// `Iface Destination Gateway Flags RefCnt Use Metric Mask ...`, in hex.
pub fn default_v4(table: &str) -> Option<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (iface, dest, flags, metric, mask) = (
                cols.first()?,
                cols.get(1)?,
                cols.get(3)?,
                cols.get(6)?,
                cols.get(7)?,
            );
            let flags = u32::from_str_radix(flags, 16).ok()?;
            let metric = u32::from_str_radix(metric, 16).ok()?;
            let default = u32::from_str_radix(dest, 16).ok()? == 0
                && u32::from_str_radix(mask, 16).ok()? == 0;
            (default && flags & RTF_UP != 0 && flags & RTF_REJECT == 0)
                .then(|| (metric, iface.to_string()))
        })
        .min_by_key(|(metric, _)| *metric)
        .map(|(_, iface)| iface)
}

/// The default route's interface in `/proc/net/ipv6_route`'s text:
/// columns `dest dest_len src src_len next_hop metric refcnt use flags
/// iface`, in hex.
pub fn default_v6(table: &str) -> Option<String> {
    table
        .lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() < 10 {
                return None;
            }
            let default = u128::from_str_radix(cols[0], 16).ok()? == 0
                && u8::from_str_radix(cols[1], 16).ok()? == 0;
            let metric = u32::from_str_radix(cols[5], 16).ok()?;
            let flags = u32::from_str_radix(cols[8], 16).ok()?;
            (default && flags & RTF_UP != 0 && flags & RTF_REJECT == 0 && cols[9] != "lo")
                .then(|| (metric, cols[9].to_string()))
        })
        .min_by_key(|(metric, _)| *metric)
        .map(|(_, iface)| iface)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_v4_route_with_the_lowest_metric_wins() {
        let table =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth1\t00000000\t0102A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0\n\
            eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
            eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(default_v4(table).as_deref(), Some("eth0"));
    }

    #[test]
    fn a_route_that_is_down_or_not_default_is_no_default() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n\
            eth0\t00000000\t0101A8C0\t0002\t0\t0\t100\t00000000\n\
            eth1\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\n";
        assert_eq!(default_v4(table), None);
    }

    #[test]
    fn the_kernels_unreachable_v6_default_on_lo_is_no_default() {
        let zero = "00000000000000000000000000000000";
        let table = format!(
            "{zero} 00 {zero} 00 {zero} ffffffff 00000001 00000000 00200200       lo\n\
             {zero} 00 {zero} 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth2\n"
        );
        assert_eq!(default_v6(&table).as_deref(), Some("eth2"));
    }

    #[test]
    fn more_addresses_than_max_interface_addrs_are_refused() {
        let addr = InterfaceAddr {
            name: "eth0".into(),
            index: 2,
            flags: 0,
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            prefix: 8,
        };
        let mut out = vec![addr.clone(); MAX_INTERFACE_ADDRS - 1];
        push_bounded(&mut out, addr.clone()).unwrap();
        let err = push_bounded(&mut out, addr).unwrap_err();
        assert_eq!(
            err.to_string(),
            "more than MAX_INTERFACE_ADDRS (65536) interface addresses"
        );
    }

    #[test]
    fn a_route_table_longer_than_max_route_table_is_refused() {
        let path = std::env::temp_dir().join(format!("route-{}", std::process::id()));
        let line = "eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\n";
        let mut text = line.repeat(MAX_ROUTE_TABLE as usize / line.len());
        text.push_str(&"x".repeat(MAX_ROUTE_TABLE as usize - text.len()));
        std::fs::write(&path, &text).unwrap();
        assert_eq!(
            read_table(path.to_str().unwrap()).unwrap().len(),
            text.len()
        );
        text.push('\n');
        std::fs::write(&path, &text).unwrap();
        let err = read_table(path.to_str().unwrap()).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(
            err.to_string()
                .ends_with("is longer than MAX_ROUTE_TABLE (16777216 bytes)"),
            "{err}"
        );
    }

    #[test]
    fn the_loopback_address_is_listed() {
        let addrs = interface_addrs().unwrap();
        let lo = addrs
            .iter()
            .find(|a| a.addr == IpAddr::V4(Ipv4Addr::LOCALHOST))
            .expect("127.0.0.1 on some interface");
        assert_eq!(lo.prefix, 8);
        assert_eq!(
            lo.flags & libc::IFF_LOOPBACK as u32,
            libc::IFF_LOOPBACK as u32
        );
        assert!(lo.index > 0);
    }
}
