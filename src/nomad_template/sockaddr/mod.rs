//! consul-template's `sockaddr`, which Nomad's templates use to find the
//! host's addresses (`{{ sockaddr "GetPrivateIP" }}`), and the
//! go-sockaddr functions its text may call.
//!
//! As in consul-template, `sockaddr`'s arguments are joined by spaces and
//! wrapped in `{{ }}`, and that text is a template of its own: Go's
//! language and built-ins, parsed and rendered with every bound a
//! `template` block has, over go-sockaddr's functions instead of
//! consul-template's, with the host's addresses as its dot. The text is
//! at most [`MAX_SOCKADDR_TEXT`] bytes.
//!
//! An address travels through the template as a map (`name`, `address`,
//! `mask_bits`, `flags`, `type`), a list of them as a list: `range` and
//! `len` work on them as go-sockaddr's `IfAddrs`. The functions:
//! `GetAllInterfaces`, `GetDefaultInterfaces` (the addresses of the
//! default route's interface), `GetPrivateInterfaces`/`GetPublicInterfaces`
//! (forwardable addresses of interfaces that are up, inside or outside
//! RFC 6890's special-purpose blocks, the default route's first),
//! `GetPrivateIP(s)`, `GetPublicIP(s)`, `GetInterfaceIP(s)` (the name is a
//! regular expression, as in go-sockaddr), and `sort`, `include`,
//! `exclude`, `unique`, `limit`, `offset`, `math`, `attr`, `Attr`, `join`.
//! "Public" means an address on a local interface outside those blocks:
//! nothing asks a server what the host looks like from outside.
//!
//! The addresses are read (`crate::sys::ifaddrs`) in the network namespace
//! of the thread that renders, each time a function asks for them.

mod ifaddr;
mod network;
mod rfc;

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use template::{Args, Functions, Template, Value};

use self::ifaddr::IfAddr;
use super::Context;
use crate::sys::ifaddrs;

/// The longest text `sockaddr` evaluates, in bytes: go-sockaddr's
/// expressions are a line or two.
pub const MAX_SOCKADDR_TEXT: usize = 4096;

/// A go-sockaddr function: it reads the host, and no context.
type Function = template::Function<()>;

/// What the text `sockaddr` evaluates may call: Go's built-ins and
/// go-sockaddr's functions (whose `sort`, `join` and `include` work on
/// interface addresses), as go-sockaddr's own templates have them.
static SOCKADDR_FUNCTIONS: LazyLock<Arc<Functions<()>>> = LazyLock::new(|| {
    let mut functions = Functions::go();
    for (name, min, max, f) in FUNCTIONS {
        functions.register(name, *min..=*max, *f);
    }
    functions.explain_unknown(|_| Some("not defined in sockaddr's templates".into()));
    Arc::new(functions)
});

/// `sockaddr WORDS...`, in a `template` block: the words joined by spaces
/// and rendered as go-sockaddr's template, over the host's addresses.
pub(super) fn sockaddr(a: &mut Args<'_>, _: &Context<'_>) -> Result<Value, String> {
    let words = (0..a.values.len())
        .map(|i| a.string(i))
        .collect::<Result<Vec<_>, _>>()?;
    let text = words.join(" ");
    if text.len() > MAX_SOCKADDR_TEXT {
        return Err(format!(
            "its text is {} bytes, longer than MAX_SOCKADDR_TEXT ({MAX_SOCKADDR_TEXT})",
            text.len()
        ));
    }
    let wrapped = format!("{{{{ {text} }}}}");
    let named = |e: &dyn std::fmt::Display| format!("{text:?}: {e}");
    let template =
        Template::parse(&wrapped, "{{", "}}", &SOCKADDR_FUNCTIONS).map_err(|e| named(&e))?;
    let all = host_addrs().map_err(|e| named(&e))?;
    let out = template
        .render_with_dot(&(), a.options(), &to_list(&all))
        .map_err(|e| named(&e))?;
    Ok(Value::Str(out))
}

/// go-sockaddr's functions, by name, with how many arguments each takes
/// (at least, at most).
const FUNCTIONS: &[(&str, usize, usize, Function)] = &[
    ("GetAllInterfaces", 0, 0, |_, _| Ok(to_list(&host_addrs()?))),
    ("GetDefaultInterfaces", 0, 0, |_, _| {
        let default = default_interface()?.ok_or("no default route")?;
        let all = host_addrs()?;
        Ok(to_list(
            &all.into_iter()
                .filter(|a| a.name == default)
                .collect::<Vec<_>>(),
        ))
    }),
    ("GetPrivateInterfaces", 0, 0, |_, _| {
        Ok(to_list(&usable(true)?))
    }),
    ("GetPublicInterfaces", 0, 0, |_, _| {
        Ok(to_list(&usable(false)?))
    }),
    ("GetPrivateIP", 0, 0, |_, _| {
        Ok(first_address(&usable(true)?))
    }),
    ("GetPublicIP", 0, 0, |_, _| {
        Ok(first_address(&usable(false)?))
    }),
    ("GetPrivateIPs", 0, 0, |_, _| {
        let addrs = by_type_and_size(host_addrs()?)?;
        let private = ifaddr::filter(addrs, "rfc", "6890", true)?;
        let forwardable = ifaddr::filter(private, "flags", "forwardable", true)?;
        Ok(join_addresses(&forwardable))
    }),
    ("GetPublicIPs", 0, 0, |_, _| {
        let addrs = by_type_and_size(host_addrs()?)?;
        Ok(join_addresses(&ifaddr::filter(
            addrs, "rfc", "6890", false,
        )?))
    }),
    ("GetInterfaceIP", 1, 1, |a, _| {
        let named = ifaddr::filter(host_addrs()?, "name", &a.string(0)?, true)?;
        let forwardable = ifaddr::filter(named, "flags", "forwardable", true)?;
        Ok(first_address(&by_type_and_size(forwardable)?))
    }),
    ("GetInterfaceIPs", 1, 1, |a, _| {
        let named = ifaddr::filter(host_addrs()?, "name", &a.string(0)?, true)?;
        Ok(join_addresses(&by_type_and_size(named)?))
    }),
    ("sort", 2, 2, |a, _| {
        let keys = a.string(0)?;
        let default = if ifaddr::sorts_by_default(&keys) {
            default_interface()?
        } else {
            None
        };
        Ok(to_list(&ifaddr::sort(
            addr_list(a, 1)?,
            &keys,
            default.as_deref(),
        )?))
    }),
    ("include", 3, 3, |a, _| {
        let kept = ifaddr::filter(addr_list(a, 2)?, &a.string(0)?, &a.string(1)?, true)?;
        Ok(to_list(&kept))
    }),
    ("exclude", 3, 3, |a, _| {
        let kept = ifaddr::filter(addr_list(a, 2)?, &a.string(0)?, &a.string(1)?, false)?;
        Ok(to_list(&kept))
    }),
    ("unique", 2, 2, |a, _| {
        Ok(to_list(&ifaddr::unique(addr_list(a, 1)?, &a.string(0)?)?))
    }),
    ("limit", 2, 2, |a, _| {
        let n = a.int(0)?;
        let n = usize::try_from(n).map_err(|_| format!("limit {n} is negative"))?;
        let addrs = addr_list(a, 1)?;
        Ok(to_list(&addrs[..n.min(addrs.len())]))
    }),
    ("offset", 2, 2, |a, _| {
        Ok(to_list(&ifaddr::offset(addr_list(a, 1)?, a.int(0)?)?))
    }),
    ("math", 3, 3, |a, _| {
        let addrs = ifaddr::math(addr_list(a, 2)?, &a.string(0)?, &a.string(1)?)?;
        Ok(to_list(&addrs))
    }),
    ("attr", 2, 2, attr),
    ("Attr", 2, 2, attr),
    ("join", 3, 3, |a, _| {
        let name = a.string(0)?;
        let sep = a.string(1)?;
        let parts = addr_list(a, 2)?
            .iter()
            .map(|addr| addr.attr(&name))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Value::Str(parts.join(&sep)))
    }),
];

/// `attr NAME X`: the attribute of the address `X`, or of the first of
/// the list `X` (empty for an empty list).
fn attr(a: &mut Args<'_>, _: &()) -> Result<Value, String> {
    let name = a.string(0)?;
    let addr = match &a.values[1] {
        Value::Map(_) => Some(from_value(&a.values[1])?),
        _ => addr_list(a, 1)?.into_iter().next(),
    };
    Ok(Value::Str(match addr {
        Some(addr) => addr.attr(&name)?,
        None => String::new(),
    }))
}

/// The addresses of interfaces that are up and forwardable, the default
/// route's first, then IPv4 before IPv6 and wider networks first, inside
/// (`private`) or outside RFC 6890's blocks: go-sockaddr's
/// `GetPrivateInterfaces` and `GetPublicInterfaces`.
fn usable(private: bool) -> Result<Vec<IfAddr>, String> {
    let forwardable = ifaddr::filter(host_addrs()?, "flags", "forwardable", true)?;
    let up = ifaddr::filter(forwardable, "flags", "up", true)?;
    let default = default_interface()?;
    let sorted = ifaddr::sort(up, "default,type,size", default.as_deref())?;
    ifaddr::filter(sorted, "rfc", "6890", private)
}

fn by_type_and_size(addrs: Vec<IfAddr>) -> Result<Vec<IfAddr>, String> {
    ifaddr::sort(addrs, "type,size", None)
}

fn first_address(addrs: &[IfAddr]) -> Value {
    Value::Str(
        addrs
            .first()
            .map(|a| a.addr.to_string())
            .unwrap_or_default(),
    )
}

fn join_addresses(addrs: &[IfAddr]) -> Value {
    let all: Vec<String> = addrs.iter().map(|a| a.addr.to_string()).collect();
    Value::Str(all.join(" "))
}

fn host_addrs() -> Result<Vec<IfAddr>, String> {
    let addrs =
        ifaddrs::interface_addrs().map_err(|e| format!("reading the interface addresses: {e}"))?;
    Ok(addrs
        .into_iter()
        .map(|a| IfAddr {
            name: a.name,
            flags: a.flags,
            addr: a.addr,
            prefix: a.prefix,
        })
        .collect())
}

fn default_interface() -> Result<Option<String>, String> {
    ifaddrs::default_interface().map_err(|e| format!("reading the default route: {e}"))
}

fn to_value(addr: &IfAddr) -> Value {
    let mut map = BTreeMap::new();
    map.insert("name".into(), Value::Str(addr.name.clone()));
    map.insert("address".into(), Value::Str(addr.addr.to_string()));
    map.insert("mask_bits".into(), Value::Int(i64::from(addr.prefix)));
    map.insert("flags".into(), Value::Str(addr.flags_text()));
    map.insert("type".into(), Value::Str(addr.kind().into()));
    Value::Map(map)
}

fn to_list(addrs: &[IfAddr]) -> Value {
    Value::List(addrs.iter().map(to_value).collect())
}

/// The address a map made by [`to_value`] stands for.
fn from_value(value: &Value) -> Result<IfAddr, String> {
    let not_addr = || format!("a {} is not an interface address", value.kind());
    let Value::Map(map) = value else {
        return Err(not_addr());
    };
    let text = |key: &str| match map.get(key) {
        Some(Value::Str(s)) => Ok(s.clone()),
        _ => Err(not_addr()),
    };
    let prefix = match map.get("mask_bits") {
        Some(Value::Int(n)) => u8::try_from(*n).map_err(|_| not_addr())?,
        _ => return Err(not_addr()),
    };
    Ok(IfAddr {
        name: text("name")?,
        flags: IfAddr::parse_flags(&text("flags")?),
        addr: text("address")?.parse().map_err(|_| not_addr())?,
        prefix,
    })
}

/// Argument `i` as a list of addresses.
fn addr_list(a: &Args<'_>, i: usize) -> Result<Vec<IfAddr>, String> {
    a.list(i)?.iter().map(from_value).collect()
}

#[cfg(test)]
mod tests;
