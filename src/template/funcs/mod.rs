//! The functions a template may call, in one table: Go's `text/template`
//! built-ins and the consul-template functions that need neither Consul,
//! Vault nor Nomad's variables. The piped value comes last, as in
//! consul-template (`{{ "a,b" | split "," }}` is `split "," "a,b"`).
//!
//! The functions that read Consul, Vault or Nomad's variables are refused
//! by name, as are the two Nomad itself denies (`plugin`,
//! `writeToFile`); any other name is an unknown function. Nomad's service
//! registry is csi-agent's own (`nomad.rs`).
//!
//! A second, smaller set serves the text `sockaddr` evaluates: Go's
//! built-ins and go-sockaddr's functions (`sockaddr/`), as go-sockaddr's
//! own templates have them; see [`FunctionSet`].

use super::exec::Value;
use super::Context;

mod go;
pub(super) mod nomad;
mod sockaddr;
mod strings;
mod values;

pub use sockaddr::MAX_SOCKADDR_TEXT;

pub(super) type Function = fn(&mut Args<'_>) -> Result<Value, String>;

/// A call's arguments and the context it renders in.
pub(super) struct Args<'a> {
    pub values: Vec<Value>,
    pub ctx: &'a Context<'a>,
}

/// Which functions a template may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FunctionSet {
    /// A `template` block's: Go's built-ins and consul-template's.
    ConsulTemplate,
    /// The text `sockaddr` evaluates: Go's built-ins and go-sockaddr's
    /// (whose `sort`, `join` and `include` work on interface addresses).
    Sockaddr,
}

/// The functions by family, each a table of names with how many arguments
/// each takes (at least, at most): one table, in parts.
const TABLE: &[&[(&str, usize, usize, Function)]] = &[
    go::FUNCTIONS,
    strings::FUNCTIONS,
    values::FUNCTIONS,
    nomad::FUNCTIONS,
    sockaddr::TEMPLATE_FUNCTIONS,
];

/// The table of [`FunctionSet::Sockaddr`].
const SOCKADDR_TABLE: &[&[(&str, usize, usize, Function)]] = &[sockaddr::FUNCTIONS, go::FUNCTIONS];

/// The entry of `name` in the table of `set`.
fn entry(set: FunctionSet, name: &str) -> Option<&'static (&'static str, usize, usize, Function)> {
    let table = match set {
        FunctionSet::ConsulTemplate => TABLE,
        FunctionSet::Sockaddr => SOCKADDR_TABLE,
    };
    table
        .iter()
        .flat_map(|family| family.iter())
        .find(|(n, ..)| *n == name)
}

/// Functions that read what csi-agent does not have, with what they need.
const REFUSED: &[(&str, &str)] = &[
    ("key", "Consul"),
    ("keyExists", "Consul"),
    ("keyOrDefault", "Consul"),
    ("ls", "Consul"),
    ("safeLs", "Consul"),
    ("tree", "Consul"),
    ("safeTree", "Consul"),
    ("service", "Consul"),
    ("services", "Consul"),
    ("connect", "Consul"),
    ("caLeaf", "Consul"),
    ("caRoots", "Consul"),
    ("datacenters", "Consul"),
    ("node", "Consul"),
    ("nodes", "Consul"),
    ("checks", "Consul"),
    ("partitions", "Consul"),
    ("peerings", "Consul"),
    ("exportedServices", "Consul"),
    ("byKey", "Consul"),
    ("byTag", "Consul"),
    ("byMeta", "Consul"),
    ("secret", "Vault"),
    ("secrets", "Vault"),
    ("pkiCert", "Vault"),
    ("nomadVar", "Nomad's variables"),
    ("nomadVarList", "Nomad's variables"),
    ("nomadVarListSafe", "Nomad's variables"),
    ("nomadVarExists", "Nomad's variables"),
];

/// Whether a template may call `name`: an error that says why not.
pub(super) fn check(set: FunctionSet, name: &str) -> Result<(), String> {
    if entry(set, name).is_some() {
        return Ok(());
    }
    if set == FunctionSet::Sockaddr {
        return Err(format!(
            "function {name:?} not defined in sockaddr's templates"
        ));
    }
    if let Some((_, needs)) = REFUSED.iter().find(|(n, _)| *n == name) {
        return Err(format!(
            "function {name:?} needs {needs}, which csi-agent does not have"
        ));
    }
    Err(match name {
        "plugin" | "writeToFile" => {
            format!("function {name:?} is denied, as Nomad denies it by default")
        }
        "sha256Hex" | "md5sum" | "toYAML" | "parseYAML" | "toTOML" | "executeTemplate" => {
            format!("function {name:?} is not supported by csi-agent")
        }
        _ if name.starts_with("sprig_") => {
            format!("function {name:?} is not supported: csi-agent has no sprig functions")
        }
        _ => format!("function {name:?} not defined"),
    })
}

/// Calls `name`, which [`check`] accepted, with `values`.
pub(super) fn call(
    set: FunctionSet,
    name: &str,
    values: Vec<Value>,
    ctx: &Context<'_>,
) -> Result<Value, String> {
    let (_, min, max, f) =
        entry(set, name).ok_or_else(|| format!("function {name:?} not defined"))?;
    if values.len() < *min || values.len() > *max {
        let want = if min == max {
            min.to_string()
        } else if *max == usize::MAX {
            format!("at least {min}")
        } else {
            format!("{min} to {max}")
        };
        return Err(format!(
            "wrong number of args: got {}, want {want}",
            values.len()
        ));
    }
    f(&mut Args { values, ctx })
}

impl Args<'_> {
    pub(super) fn string(&self, i: usize) -> Result<String, String> {
        match &self.values[i] {
            Value::Str(s) => Ok(s.clone()),
            Value::Int(_) | Value::Float(_) | Value::Bool(_) => Ok(self.values[i].to_string()),
            other => Err(format!(
                "argument {} is a {}, not a string",
                i + 1,
                other.kind()
            )),
        }
    }

    pub(super) fn int(&self, i: usize) -> Result<i64, String> {
        match &self.values[i] {
            Value::Int(n) => Ok(*n),
            Value::Float(f) if f.fract() == 0.0 => Ok(*f as i64),
            Value::Str(s) => s
                .trim()
                .parse()
                .map_err(|_| format!("argument {} is {s:?}, not an integer", i + 1)),
            other => Err(format!(
                "argument {} is a {}, not an integer",
                i + 1,
                other.kind()
            )),
        }
    }

    pub(super) fn list(&self, i: usize) -> Result<Vec<Value>, String> {
        match &self.values[i] {
            Value::List(l) => Ok(l.clone()),
            Value::Nil => Ok(Vec::new()),
            other => Err(format!(
                "argument {} is a {}, not a list",
                i + 1,
                other.kind()
            )),
        }
    }
}
