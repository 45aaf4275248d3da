//! Regular-expression functions, with Go's syntax and matches
//! ([`regex`]): `regex` and `regexall` as go-cty's stdlib defines
//! them, and `regex_replace`, Nomad's name for a replacement by pattern.
//! (`replace` matches its substring literally, as in Nomad.)

use super::{Args, Function};
use crate::value::Value;
use regex::{Captures, Regex};

/// The regex functions, by name, with how many arguments each takes (at
/// least, at most).
pub(super) const FUNCTIONS: &[(&str, usize, usize, Function)] = &[
    ("regex", 2, 2, |a| {
        let (re, text) = (pattern(a, 0)?, a.string(1)?);
        let shape = Shape::of(&re, a.name)?;
        let found = re
            .captures(&text)
            .ok_or("regex: the pattern did not match any part of the given string")?;
        Ok(shape.value(&re, &text, &found))
    }),
    ("regexall", 2, 2, |a| {
        let (re, text) = (pattern(a, 0)?, a.string(1)?);
        let shape = Shape::of(&re, a.name)?;
        let all = re
            .captures_all(&text)
            .map_err(|err| format!("{}: {err}", a.name))?;
        Ok(Value::List(
            all.iter()
                .map(|found| shape.value(&re, &text, found))
                .collect(),
        ))
    }),
    ("regex_replace", 3, 3, |a| {
        let (text, re, with) = (a.string(0)?, pattern(a, 1)?, a.string(2)?);
        let replaced = re
            .replace_all(&text, &with)
            .map_err(|err| format!("{}: {err}", a.name))?;
        Ok(Value::String(replaced))
    }),
];

/// Argument `i` compiled as a pattern.
fn pattern(a: &Args<'_>, i: usize) -> Result<Regex, String> {
    let text = a.string(i)?;
    Regex::new(&text).map_err(|err| format!("{}: invalid pattern {text:?} {err}", a.name))
}

/// What a match is returned as, by the pattern's groups: the matched text
/// without groups, a list of the groups' texts with unnamed ones, an
/// object by name with named ones (mixing both is an error).
enum Shape {
    Text,
    List,
    Object,
}

impl Shape {
    fn of(re: &Regex, name: &str) -> Result<Shape, String> {
        let groups = &re.group_names()[1..];
        let named = groups.iter().filter(|n| n.is_some()).count();
        match (groups.len(), named) {
            (0, _) => Ok(Shape::Text),
            (_, 0) => Ok(Shape::List),
            (all, named) if all == named => Ok(Shape::Object),
            _ => Err(format!(
                "{name}: invalid pattern: cannot mix both named and unnamed capture groups"
            )),
        }
    }

    /// The value of one match; a group that took no part is null.
    fn value(&self, re: &Regex, text: &str, found: &Captures) -> Value {
        let group = |span: &Option<(usize, usize)>| match span {
            Some((from, to)) => Value::String(text[*from..*to].to_string()),
            None => Value::Null,
        };
        match self {
            Shape::Text => group(&found[0]),
            Shape::List => Value::List(found[1..].iter().map(group).collect()),
            Shape::Object => {
                let mut entries: Vec<(String, Value)> = re.group_names()[1..]
                    .iter()
                    .zip(&found[1..])
                    .map(|(name, span)| (name.clone().unwrap_or_default(), group(span)))
                    .collect();
                order::sort_by(&mut entries, |x, y| x.0.cmp(&y.0));
                Value::Object(entries)
            }
        }
    }
}
