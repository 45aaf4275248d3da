//! Address blocks (`10.0.0.0/8`) and the bit arithmetic of addresses
//! that go-sockaddr's filters, attributes and RFC tables share: an address
//! as a number as wide as its family, masks and prefixes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address block: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Network {
    /// `addr/prefix`, or a bare address (a block of one).
    pub fn parse(text: &str) -> Result<Network, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not an IP address or network"))?;
        let width = width(addr);
        let prefix = match prefix {
            None => width,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= width)
                .ok_or_else(|| format!("{text:?} has an invalid prefix length"))?,
        };
        Ok(Network { addr, prefix })
    }

    /// Whether `addr` is in the block: same family, same leading bits.
    pub fn contains(&self, addr: IpAddr) -> bool {
        if width(addr) != width(self.addr) {
            return false;
        }
        let mask = mask(width(addr), self.prefix);
        bits(addr) & mask == bits(self.addr) & mask
    }
}

/// 32 for IPv4, 128 for IPv6.
pub fn width(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

pub fn bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

pub fn from_bits(width: u8, bits: u128) -> IpAddr {
    if width == 32 {
        IpAddr::V4(Ipv4Addr::from(bits as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(bits))
    }
}

/// The netmask of `prefix` bits in an address `width` bits wide.
pub fn mask(width: u8, prefix: u8) -> u128 {
    let all = all_ones(width);
    all & !all.checked_shr(u32::from(prefix)).unwrap_or(0)
}

pub fn all_ones(width: u8) -> u128 {
    if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    }
}
