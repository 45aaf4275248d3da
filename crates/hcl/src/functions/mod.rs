//! The HCL2 functions a job file may call, in one table: the string,
//! collection, encoding and file functions Nomad's job files commonly use,
//! with Nomad's (go-cty's) meaning. A call to any other function is an
//! error that names it.

use crate::value::Value;

mod collections;
mod encodings;
mod files;
mod network;
mod numbers;
mod regex;
mod strings;

pub use files::FileSource;

/// What a function gets: its name (for messages), its arguments and the
/// files `file()` may read.
pub(super) struct Args<'a> {
    name: &'static str,
    values: Vec<Value>,
    files: Option<&'a FileSource>,
}

pub(super) type Function = fn(&Args<'_>) -> Result<Value, String>;

/// The functions by family, each family a table of names with how many
/// arguments each takes (at least, at most): one table, in parts.
const TABLE: &[&[(&str, usize, usize, Function)]] = &[
    strings::FUNCTIONS,
    collections::FUNCTIONS,
    numbers::FUNCTIONS,
    encodings::FUNCTIONS,
    files::FUNCTIONS,
    network::FUNCTIONS,
    regex::FUNCTIONS,
];

/// The names of the functions, for documentation and tests.
pub fn names() -> impl Iterator<Item = &'static str> {
    TABLE
        .iter()
        .flat_map(|family| family.iter())
        .map(|(name, ..)| *name)
}

/// Calls the function `name`; the message of an error says what is wrong
/// without the position, which the caller adds.
pub(crate) fn call(
    name: &str,
    values: Vec<Value>,
    files: Option<&FileSource>,
) -> Result<Value, String> {
    let found = TABLE
        .iter()
        .flat_map(|family| family.iter())
        .find(|(n, ..)| *n == name);
    let Some(&(name, least, most, function)) = found else {
        return Err(format!("unknown function '{name}'"));
    };
    if values.len() < least || values.len() > most {
        let wanted = match (least, most) {
            (l, m) if l == m => format!("{l}"),
            (l, usize::MAX) => format!("at least {l}"),
            (l, m) => format!("{l} to {m}"),
        };
        return Err(format!(
            "{name} takes {wanted} arguments, not {}",
            values.len()
        ));
    }
    function(&Args {
        name,
        values,
        files,
    })
}

impl Args<'_> {
    pub(super) fn wrong(&self, i: usize, wanted: &str) -> String {
        format!(
            "{}: argument {} must be a {wanted}, not a {}",
            self.name,
            i + 1,
            self.values[i].kind_name()
        )
    }

    pub(super) fn string(&self, i: usize) -> Result<String, String> {
        self.values[i]
            .as_text()
            .ok_or_else(|| self.wrong(i, "string"))
    }

    pub(super) fn number(&self, i: usize) -> Result<f64, String> {
        let parsed = match &self.values[i] {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        parsed.ok_or_else(|| self.wrong(i, "number"))
    }

    pub(super) fn index(&self, i: usize) -> Result<usize, String> {
        let n = self.number(i)?;
        if n < 0.0 || n.fract() != 0.0 {
            return Err(format!(
                "{}: argument {} must be a whole number, not {n}",
                self.name,
                i + 1
            ));
        }
        Ok(n as usize)
    }

    pub(super) fn list(&self, i: usize) -> Result<Vec<Value>, String> {
        match &self.values[i] {
            Value::List(items) => Ok(items.clone()),
            _ => Err(self.wrong(i, "list")),
        }
    }

    pub(super) fn object(&self, i: usize) -> Result<Vec<(String, Value)>, String> {
        match &self.values[i] {
            Value::Object(entries) => Ok(entries.clone()),
            _ => Err(self.wrong(i, "map")),
        }
    }
}
