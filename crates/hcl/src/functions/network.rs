//! IP network functions, as Nomad's (go-cty-funcs' `cidr`, over Go's
//! `net.ParseCIDR`): `cidrhost`, `cidrnetmask`, `cidrsubnet` and
//! `cidrsubnets`, for IPv4 and IPv6 prefixes. Addresses are written as Go
//! writes them: IPv4 dotted, IPv6 in the shortest form of RFC 5952.

use super::{Args, Function};
use crate::value::Value;

/// The network functions, by name, with how many arguments each takes (at
/// least, at most).
pub(super) const FUNCTIONS: &[(&str, usize, usize, Function)] = &[
    ("cidrhost", 2, 2, cidrhost),
    ("cidrnetmask", 1, 1, |a| {
        let net = prefix(a)?;
        Ok(Value::String(net.format(net.mask())))
    }),
    ("cidrsubnet", 3, 3, cidrsubnet),
    ("cidrsubnets", 1, usize::MAX, cidrsubnets),
];

/// A prefix: its network address (host bits cleared), its length, and
/// whether it is IPv4.
struct Net {
    addr: u128,
    len: u32,
    v4: bool,
}

impl Net {
    /// How many bits an address has.
    fn bits(&self) -> u32 {
        if self.v4 {
            32
        } else {
            128
        }
    }

    /// The mask of the prefix, as an address.
    fn mask(&self) -> u128 {
        mask(self.len, self.bits())
    }

    /// `addr` written as Go writes an address of this family.
    fn format(&self, addr: u128) -> String {
        if self.v4 {
            format_v4(addr as u32)
        } else {
            format_v6(addr)
        }
    }
}

/// The mask of `len` leading ones in an address of `bits` bits.
fn mask(len: u32, bits: u32) -> u128 {
    if len == 0 {
        return 0;
    }
    let ones = u128::MAX << (128 - len);
    ones >> (128 - bits)
}

/// The first argument read as a CIDR prefix, as `net.ParseCIDR` reads it.
fn prefix(a: &Args<'_>) -> Result<Net, String> {
    let text = a.string(0)?;
    parse_cidr(&text).ok_or_else(|| {
        format!(
            "{}: invalid CIDR expression {text:?}: expected an address and a prefix length, as 10.0.0.0/16 or fd00::/64",
            a.name
        )
    })
}

fn parse_cidr(text: &str) -> Option<Net> {
    let (addr, len) = text.split_once('/')?;
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: u32 = len.parse().ok()?;
    let (addr, v4) = match parse_v4(addr) {
        Some(v4) => (u128::from(v4), true),
        None => (parse_v6(addr)?, false),
    };
    let bits = if v4 { 32 } else { 128 };
    if len > bits {
        return None;
    }
    Some(Net {
        addr: addr & mask(len, bits),
        len,
        v4,
    })
}

/// A dotted IPv4 address: four decimal octets without leading zeros.
fn parse_v4(text: &str) -> Option<u32> {
    let mut value: u32 = 0;
    let mut count = 0;
    for part in text.split('.') {
        let valid = !part.is_empty()
            && part.len() <= 3
            && part.bytes().all(|b| b.is_ascii_digit())
            && (part.len() == 1 || !part.starts_with('0'));
        let octet: u8 = part.parse().ok().filter(|_| valid)?;
        value = (value << 8) | u32::from(octet);
        count += 1;
    }
    (count == 4).then_some(value)
}

/// An IPv6 address: eight groups of hex, one `::` for a run of zero groups,
/// and an IPv4 address in the last 32 bits if written so.
fn parse_v6(text: &str) -> Option<u128> {
    let (head, tail) = match text.split_once("::") {
        Some((head, tail)) => (head, Some(tail)),
        None => (text, None),
    };
    let groups = |part: &str| -> Option<Vec<u16>> {
        if part.is_empty() {
            return Some(Vec::new());
        }
        let mut out = Vec::new();
        let pieces: Vec<&str> = part.split(':').collect();
        for (i, piece) in pieces.iter().enumerate() {
            if i + 1 == pieces.len() && piece.contains('.') {
                let v4 = parse_v4(piece)?;
                out.push((v4 >> 16) as u16);
                out.push(v4 as u16);
            } else if piece.is_empty() || piece.len() > 4 {
                return None;
            } else {
                out.push(u16::from_str_radix(piece, 16).ok()?);
            }
        }
        Some(out)
    };
    let head_groups = groups(head)?;
    let all = match tail {
        None if head_groups.len() == 8 => head_groups,
        None => return None,
        Some(tail) => {
            if tail.contains("::") {
                return None;
            }
            let tail_groups = groups(tail)?;
            let used = head_groups.len() + tail_groups.len();
            if used > 7 {
                return None;
            }
            let mut all = head_groups;
            all.extend(std::iter::repeat(0).take(8 - used));
            all.extend(tail_groups);
            all
        }
    };
    Some(
        all.iter()
            .fold(0u128, |acc, g| (acc << 16) | u128::from(*g)),
    )
}

fn format_v4(addr: u32) -> String {
    let [a, b, c, d] = addr.to_be_bytes();
    format!("{a}.{b}.{c}.{d}")
}

/// As Go's `net.IP.String`: an IPv4-mapped address dotted, else the
/// longest run of two or more zero groups (the first of equal ones) as
/// `::`, groups in lowercase hex without leading zeros.
fn format_v6(addr: u128) -> String {
    if addr >> 32 == 0xffff {
        return format_v4(addr as u32);
    }
    let groups: Vec<u16> = (0..8).rev().map(|i| (addr >> (16 * i)) as u16).collect();
    let (mut best, mut best_len) = (8, 0);
    let mut i = 0;
    while i < 8 {
        let run = groups[i..].iter().take_while(|g| **g == 0).count();
        if run > best_len && run >= 2 {
            (best, best_len) = (i, run);
        }
        i += run.max(1);
    }
    let hex = |gs: &[u16]| {
        gs.iter()
            .map(|g| format!("{g:x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    if best_len == 0 {
        return hex(&groups);
    }
    format!(
        "{}::{}",
        hex(&groups[..best]),
        hex(&groups[best + best_len..])
    )
}

/// A whole-number argument.
fn integer(a: &Args<'_>, i: usize) -> Result<i128, String> {
    let n = a.number(i)?;
    if n.fract() != 0.0 || n.abs() > 1e30 {
        return Err(format!(
            "{}: argument {} must be a whole number, not {n}",
            a.name,
            i + 1
        ));
    }
    Ok(n as i128)
}

/// `cidrhost(prefix, hostnum)`: the address numbered `hostnum` in the
/// prefix, counted from its end when negative (-1 the last).
fn cidrhost(a: &Args<'_>) -> Result<Value, String> {
    let net = prefix(a)?;
    let num = integer(a, 1)?;
    let host_bits = net.bits() - net.len;
    // How many addresses the prefix holds, saturating for a /0 of IPv6.
    let size: u128 = 1u128.checked_shl(host_bits).unwrap_or(0);
    let fits = |n: u128| size == 0 || n < size;
    let offset = if num >= 0 {
        let n = num as u128;
        fits(n).then_some(n)
    } else {
        let back = num.unsigned_abs();
        (size == 0 || back <= size).then(|| size.wrapping_sub(back))
    };
    let Some(offset) = offset else {
        return Err(format!(
            "cidrhost: prefix of {} does not accommodate a host numbered {num}",
            net.len
        ));
    };
    Ok(Value::String(net.format(net.addr | offset)))
}

/// `cidrsubnet(prefix, newbits, netnum)`: the subnet numbered `netnum`
/// of the prefix made `newbits` longer.
fn cidrsubnet(a: &Args<'_>) -> Result<Value, String> {
    let net = prefix(a)?;
    let newbits = integer(a, 1)?;
    let netnum = integer(a, 2)?;
    subnet(&net, newbits, netnum).map(Value::String)
}

fn subnet(net: &Net, newbits: i128, netnum: i128) -> Result<String, String> {
    if newbits > 32 {
        return Err("cidrsubnet: may not extend prefix by more than 32 bits".to_string());
    }
    if newbits < 0 {
        return Err("cidrsubnet: newbits must not be negative".to_string());
    }
    let newbits = newbits as u32;
    let len = net.len + newbits;
    if len > net.bits() {
        return Err(format!(
            "cidrsubnet: insufficient address space to extend prefix of {} by {newbits}",
            net.len
        ));
    }
    if netnum < 0 || (netnum as u128) >> newbits != 0 {
        return Err(format!(
            "cidrsubnet: prefix extension of {newbits} does not accommodate a subnet numbered {netnum}"
        ));
    }
    let shift = net.bits() - len;
    let addr = net.addr | ((netnum as u128).checked_shl(shift).unwrap_or(0));
    Ok(format!("{}/{len}", net.format(addr)))
}

/// `cidrsubnets(prefix, newbits...)`: consecutive subnets of the given
/// sizes, each aligned to its own size after the one before.
fn cidrsubnets(a: &Args<'_>) -> Result<Value, String> {
    let net = prefix(a)?;
    let mut out = Vec::new();
    // The first address not yet allotted, as an offset in the prefix.
    let mut next: u128 = 0;
    let total = net.bits() - net.len;
    for i in 1..a.values.len() {
        let newbits = integer(a, i)?;
        if newbits < 1 || newbits > i128::from(total) {
            return Err(format!(
                "cidrsubnets: argument {} must extend the prefix by 1 to {total} bits, not {newbits}",
                i + 1
            ));
        }
        let shift = total - newbits as u32;
        let size = 1u128 << shift;
        let start = next.div_ceil(size).checked_mul(size);
        let netnum = start.map(|start| start >> shift);
        let Some((start, netnum)) = start.zip(netnum).filter(|(_, n)| n >> newbits == 0) else {
            return Err(format!(
                "cidrsubnets: not enough remaining address space for a subnet with a prefix of {} bits after {}",
                net.len + newbits as u32,
                out.last()
                    .and_then(Value::as_text)
                    .unwrap_or_else(|| "the start".to_string())
            ));
        };
        out.push(Value::String(subnet(&net, newbits, netnum as i128)?));
        next = start.saturating_add(size);
    }
    Ok(Value::List(out))
}
