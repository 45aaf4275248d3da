//! A small flag parser in Nomad's style: `-flag value`, `--flag value`,
//! `-flag=value`, switches without values, repeatable flags, and flags
//! anywhere among the positional arguments (`--` ends the flags).

use std::collections::HashMap;
use std::fmt;

/// What a flag takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// No value: present or not.
    Switch,
    /// One value; given twice is an error.
    Value,
    /// A value, repeatable.
    Repeated,
}

#[derive(Clone, Copy, Debug)]
pub struct Flag {
    pub name: &'static str,
    pub kind: Kind,
}

pub const fn switch(name: &'static str) -> Flag {
    Flag {
        name,
        kind: Kind::Switch,
    }
}

pub const fn value(name: &'static str) -> Flag {
    Flag {
        name,
        kind: Kind::Value,
    }
}

pub const fn repeated(name: &'static str) -> Flag {
    Flag {
        name,
        kind: Kind::Repeated,
    }
}

/// A command line that does not fit the command: exit 2 with the usage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError {
    pub message: String,
}

impl UsageError {
    pub fn new(message: impl Into<String>) -> UsageError {
        UsageError {
            message: message.into(),
        }
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UsageError {}

/// The parsed command line.
#[derive(Debug, Default)]
pub struct Args {
    values: HashMap<&'static str, Vec<String>>,
    pub positional: Vec<String>,
}

impl Args {
    pub fn switch(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    pub fn value(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    pub fn required(&self, name: &str) -> Result<&str, UsageError> {
        self.value(name)
            .ok_or_else(|| UsageError::new(format!("-{name} is required")))
    }

    pub fn all(&self, name: &str) -> &[String] {
        self.values.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Every `key=value` given to a repeatable flag.
    pub fn pairs(&self, name: &str) -> Result<Vec<(String, String)>, UsageError> {
        self.all(name)
            .iter()
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                // Never echo the value: it may be a secret.
                _ => Err(UsageError::new(format!("-{name} takes key=value"))),
            })
            .collect()
    }

    /// The positional argument at `index`, named `what` in the error.
    pub fn positional(&self, index: usize, what: &str) -> Result<&str, UsageError> {
        self.positional
            .get(index)
            .map(String::as_str)
            .ok_or_else(|| UsageError::new(format!("missing {what}")))
    }

    /// Fails if there are more than `n` positional arguments.
    pub fn at_most(&self, n: usize) -> Result<(), UsageError> {
        match self.positional.get(n) {
            Some(extra) => Err(UsageError::new(format!("unexpected argument {extra:?}"))),
            None => Ok(()),
        }
    }
}

/// Parses `args` against `flags`.
pub fn parse(flags: &[Flag], args: &[String]) -> Result<Args, UsageError> {
    let mut out = Args::default();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--" {
            out.positional.extend(iter.by_ref().cloned());
            break;
        }
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            out.positional.push(arg.clone());
            continue;
        };
        if body.is_empty() {
            out.positional.push(arg.clone());
            continue;
        }
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        let flag = flags
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| UsageError::new(format!("unknown flag -{name}")))?;
        let value = match (flag.kind, inline) {
            (Kind::Switch, None) => String::new(),
            (Kind::Switch, Some(_)) => {
                return Err(UsageError::new(format!("-{name} takes no value")))
            }
            (_, Some(value)) => value.to_string(),
            (_, None) => iter
                .next()
                .cloned()
                .ok_or_else(|| UsageError::new(format!("-{name} needs a value")))?,
        };
        let values = out.values.entry(flag.name).or_default();
        if flag.kind == Kind::Value && !values.is_empty() {
            return Err(UsageError::new(format!("-{name} given twice")));
        }
        values.push(value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAGS: &[Flag] = &[switch("json"), value("target"), repeated("secret")];

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn accepts_single_and_double_dashes_and_inline_values() {
        let parsed = parse(
            FLAGS,
            &args(&[
                "vol",
                "--target",
                "/t",
                "-json",
                "-secret=a=b",
                "--secret",
                "c=d",
            ]),
        )
        .unwrap();
        assert!(parsed.switch("json"));
        assert_eq!(parsed.value("target"), Some("/t"));
        assert_eq!(parsed.positional, vec!["vol"]);
        assert_eq!(
            parsed.pairs("secret").unwrap(),
            vec![
                ("a".to_string(), "b".to_string()),
                ("c".to_string(), "d".to_string())
            ]
        );
    }

    #[test]
    fn unknown_and_incomplete_flags_are_usage_errors() {
        assert_eq!(
            parse(FLAGS, &args(&["-nope"])).unwrap_err().message,
            "unknown flag -nope"
        );
        assert_eq!(
            parse(FLAGS, &args(&["-target"])).unwrap_err().message,
            "-target needs a value"
        );
        assert_eq!(
            parse(FLAGS, &args(&["-json=1"])).unwrap_err().message,
            "-json takes no value"
        );
        assert_eq!(
            parse(FLAGS, &args(&["-target", "a", "-target", "b"]))
                .unwrap_err()
                .message,
            "-target given twice"
        );
    }

    #[test]
    fn malformed_pairs_never_echo_the_value() {
        let parsed = parse(FLAGS, &args(&["-secret", "hunter2"])).unwrap();
        let err = parsed.pairs("secret").unwrap_err();
        assert_eq!(err.message, "-secret takes key=value");
    }

    #[test]
    fn double_dash_ends_flags() {
        let parsed = parse(FLAGS, &args(&["--", "-json"])).unwrap();
        assert!(!parsed.switch("json"));
        assert_eq!(parsed.positional, vec!["-json"]);
        assert!(parsed.at_most(0).is_err());
        assert!(parsed.at_most(1).is_ok());
    }
}
