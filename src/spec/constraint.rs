//! `constraint` blocks, at job, group and task level, as Nomad reads them:
//!
//! ```hcl
//! constraint {
//!   attribute = "${attr.kernel.name}"
//!   operator  = "="          # the default
//!   value     = "linux"
//! }
//! constraint { distinct_hosts = true }
//! constraint { version = ">= 5.4" attribute = "${attr.kernel.version}" }
//! ```
//!
//! Decoding checks what Nomad's `Constraint.Validate` checks: the operator
//! is one of Nomad's, an `attribute` is given (except for
//! `distinct_hosts`), the comparisons and the `set_contains` operators have
//! a `value`, `is_set` and `is_not_set` have none, a `regexp` compiles
//! (with the crate's RE2 engine), a `version` or `semver` constraint parses,
//! and a `distinct_property` limit is a whole number of at least 1. As in
//! Nomad's job files, `version`, `semver`, `regexp`, `set_contains`,
//! `distinct_hosts` and `distinct_property` may also be written as the
//! block's one attribute; `distinct_hosts = false` is no constraint.
//! Evaluating one against the node is `task::feasible`'s.
//!
//! A level's `meta` (a map of strings) travels with its constraints
//! ([`Inherited`]): a group keeps a copy of its job's, so that an alloc's
//! group holds all that applies to it, and a task's `NOMAD_META_*` merge
//! job, group and task, the later winning, as Nomad's `CombinedTaskMeta`.

use std::collections::BTreeMap;

use super::decode::Fields;
use super::encode::Writer;
use super::version::{Flavor, VersionConstraint};
use hcl::{Expr, Pos};

/// What a job level hands down: `meta` (merged job, then group, then task,
/// the later winning) and `constraint`s (all of them apply).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inherited {
    pub meta: BTreeMap<String, String>,
    pub constraints: Vec<Constraint>,
}

/// A job's, group's or task's `meta` and `constraint`s.
pub(crate) fn decode_placement(f: &mut Fields<'_>) -> Inherited {
    Inherited {
        meta: f.map("meta").unwrap_or_default(),
        constraints: decode_constraints(f, false),
    }
}

/// A task's `meta` and `constraint`s, which may not count allocs: the
/// `distinct_*` operators are the job's or the group's, as in Nomad.
pub(crate) fn decode_task_placement(f: &mut Fields<'_>) -> Inherited {
    Inherited {
        meta: f.map("meta").unwrap_or_default(),
        constraints: decode_constraints(f, true),
    }
}

pub(crate) fn write_placement(w: &mut Writer, placement: &Inherited) {
    w.map("meta", &placement.meta);
    write_constraints(w, &placement.constraints);
}

/// Nomad's constraint operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `=`, `==`, `is`.
    Equal,
    /// `!=`, `not`.
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    Regexp,
    /// `set_contains` and `set_contains_all`.
    SetContainsAll,
    SetContainsAny,
    Version,
    Semver,
    IsSet,
    IsNotSet,
    DistinctHosts,
    DistinctProperty,
}

/// Every operator as written, for messages.
const OPERATORS: &[(&str, Operator)] = &[
    ("=", Operator::Equal),
    ("==", Operator::Equal),
    ("is", Operator::Equal),
    ("!=", Operator::NotEqual),
    ("not", Operator::NotEqual),
    ("<", Operator::Less),
    ("<=", Operator::LessEqual),
    (">", Operator::Greater),
    (">=", Operator::GreaterEqual),
    ("regexp", Operator::Regexp),
    ("set_contains", Operator::SetContainsAll),
    ("set_contains_all", Operator::SetContainsAll),
    ("set_contains_any", Operator::SetContainsAny),
    ("version", Operator::Version),
    ("semver", Operator::Semver),
    ("is_set", Operator::IsSet),
    ("is_not_set", Operator::IsNotSet),
    ("distinct_hosts", Operator::DistinctHosts),
    ("distinct_property", Operator::DistinctProperty),
];

/// The operators that may stand as the block's one attribute.
const SHORTHANDS: &[&str] = &[
    "version",
    "semver",
    "regexp",
    "set_contains",
    "distinct_hosts",
    "distinct_property",
];

impl Operator {
    pub fn parse(text: &str) -> Option<Operator> {
        OPERATORS
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, op)| *op)
    }

    /// Whether the operator counts allocs rather than looking at the node.
    pub fn is_distinct(self) -> bool {
        matches!(self, Operator::DistinctHosts | Operator::DistinctProperty)
    }
}

/// One constraint: `attribute operator value`, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    /// Nomad's `LTarget`: `${attr.kernel.name}`, or a literal.
    pub attribute: String,
    /// The operator as written (`==`, `is`, ...), which messages show.
    pub operator: String,
    /// Nomad's `RTarget`: a literal, or `${...}` of the node.
    pub value: String,
}

impl Constraint {
    /// The parsed operator; decoding let only Nomad's through.
    pub fn op(&self) -> Operator {
        Operator::parse(&self.operator).unwrap_or(Operator::Equal)
    }

    /// How Nomad names the constraint in its placement failures
    /// (`${attr.kernel.name} = windows`); `distinct_hosts` alone.
    pub fn describe(&self) -> String {
        [&self.attribute, &self.operator, &self.value]
            .iter()
            .filter(|part| !part.is_empty())
            .map(|part| part.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `distinct_property`'s limit: how many allocs may share one value.
    pub fn distinct_limit(&self) -> u64 {
        self.value.parse().unwrap_or(1)
    }
}

/// Decodes the `constraint` blocks of a job, group or task.
fn decode_constraints(f: &mut Fields<'_>, task_level: bool) -> Vec<Constraint> {
    let mut constraints = Vec::new();
    for block in f.blocks("constraint") {
        let mut c = f.nested(block);
        if let Some(constraint) = decode_constraint(&mut c) {
            if task_level && constraint.op().is_distinct() {
                c.error(
                    c.pos(),
                    format!(
                        "operator {:?} in {} cannot be used at task level, as in Nomad: put it in the group or the job",
                        constraint.operator,
                        c.what()
                    ),
                );
            }
            constraints.push(constraint);
        }
        c.finish();
    }
    constraints
}

/// A string, number or boolean attribute as its text.
fn scalar(f: &mut Fields<'_>, key: &'static str) -> Option<(String, Pos)> {
    let attr = f.attr(key)?;
    let text = match &attr.value {
        Expr::String { value, .. } | Expr::Heredoc { value, .. } => value.clone(),
        Expr::Number { value, .. } => value.text().to_string(),
        Expr::Bool { value, .. } => value.to_string(),
        other => {
            f.error(
                other.pos(),
                format!(
                    "{key:?} in {} must be a string, found {}",
                    f.what(),
                    other.kind_name()
                ),
            );
            return None;
        }
    };
    Some((text, attr.value.pos()))
}

fn decode_constraint(f: &mut Fields<'_>) -> Option<Constraint> {
    let attribute = scalar(f, "attribute");
    let operator = scalar(f, "operator");
    let value = scalar(f, "value");
    let mut shorthand: Option<(&'static str, String, Pos)> = None;
    for key in SHORTHANDS {
        if let Some((text, pos)) = scalar(f, key) {
            if let Some((first, _, _)) = &shorthand {
                f.error(
                    pos,
                    format!(
                        "{} sets both {first} and {key}: one operator a block",
                        f.what()
                    ),
                );
            }
            shorthand = Some((key, text, pos));
        }
    }
    let (mut operator, op_pos) = operator.unwrap_or_else(|| ("=".to_string(), f.pos()));
    let mut attribute = attribute.map(|(text, _)| text).unwrap_or_default();
    let (mut value, value_pos) = value.unwrap_or_else(|| (String::new(), f.pos()));
    let mut value_pos = value_pos;
    if let Some((key, text, pos)) = shorthand {
        if f.has("operator") {
            f.error(
                op_pos,
                format!(
                    "{} sets operator and {key}, which is an operator itself",
                    f.what()
                ),
            );
        }
        operator = key.to_string();
        match key {
            "distinct_hosts" => match text.as_str() {
                "true" => {}
                "false" => return None,
                _ => {
                    f.error(
                        pos,
                        format!("distinct_hosts in {} must be true or false", f.what()),
                    );
                    return None;
                }
            },
            "distinct_property" => attribute = text,
            _ => {
                value = text;
                value_pos = pos;
            }
        }
    }
    let Some(op) = Operator::parse(&operator) else {
        let names: Vec<&str> = OPERATORS.iter().map(|(name, _)| *name).collect();
        f.error(
            op_pos,
            format!(
                "unknown operator {operator:?} in {} (Nomad's operators: {})",
                f.what(),
                names.join(", ")
            ),
        );
        return None;
    };
    if attribute.is_empty() && op != Operator::DistinctHosts {
        f.error(
            f.pos(),
            format!("{} needs an attribute for operator {operator:?}", f.what()),
        );
    }
    check_value(f, op, &operator, &value, value_pos);
    Some(Constraint {
        attribute,
        operator,
        value,
    })
}

/// What Nomad's `Constraint.Validate` asks of the value.
fn check_value(f: &Fields<'_>, op: Operator, operator: &str, value: &str, pos: Pos) {
    let what = f.what();
    let problem = match op {
        Operator::IsSet | Operator::IsNotSet if !value.is_empty() => {
            Some(format!("operator {operator:?} in {what} takes no value"))
        }
        Operator::IsSet | Operator::IsNotSet | Operator::DistinctHosts => None,
        Operator::DistinctProperty => match value.parse::<u64>() {
            _ if value.is_empty() => None,
            Ok(n) if n >= 1 => None,
            _ => Some(format!(
                "the distinct_property limit in {what} must be a whole number of at least 1, found {value:?}"
            )),
        },
        _ if value.is_empty() => Some(format!("operator {operator:?} in {what} needs a value")),
        Operator::Regexp => regex::Regex::new(value)
            .err()
            .map(|e| format!("regexp {value:?} in {what}: {e}")),
        Operator::Version => VersionConstraint::parse(value, Flavor::Version)
            .err()
            .map(|e| format!("{e} in {what}")),
        Operator::Semver => VersionConstraint::parse(value, Flavor::Semver)
            .err()
            .map(|e| format!("{e} in {what}")),
        _ => None,
    };
    if let Some(problem) = problem {
        f.error(pos, problem);
    }
}

/// Writes the constraints in the long form, which decodes to them.
pub(crate) fn write_constraints(w: &mut Writer, constraints: &[Constraint]) {
    for c in constraints {
        w.open("constraint", None);
        if !c.attribute.is_empty() {
            w.string("attribute", &c.attribute);
        }
        w.string("operator", &c.operator);
        if !c.value.is_empty() {
            w.string("value", &c.value);
        }
        w.close();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::spec::Job;

    /// A job with `constraint` in its group.
    fn job_with(constraint: &str) -> String {
        format!(
            r#"job "j" {{
  group "g" {{
    {constraint}
    task "t" {{
      driver = "raw_exec"
      config {{ command = "/bin/true" }}
    }}
  }}
}}"#
        )
    }

    fn error_of(constraint: &str) -> String {
        Job::decode(&job_with(constraint), "j.hcl")
            .expect_err(constraint)
            .to_string()
    }

    fn constraints_of(constraint: &str) -> Vec<super::Constraint> {
        let decoded = Job::decode(&job_with(constraint), "j.hcl").unwrap_or_else(|e| panic!("{e}"));
        decoded.spec.groups[0].placement.constraints.clone()
    }

    #[test]
    fn the_operator_defaults_to_equal_and_numbers_are_text() {
        let c = constraints_of(
            r#"constraint {
        attribute = "${attr.cpu.numcores}"
        value     = 4
      }"#,
        );
        assert_eq!(c[0].operator, "=");
        assert_eq!(c[0].value, "4");
        assert_eq!(c[0].describe(), "${attr.cpu.numcores} = 4");
    }

    #[test]
    fn shorthands_are_operators() {
        let c = constraints_of(
            r#"constraint {
        attribute = "${attr.kernel.version}"
        version   = ">= 3.10, < 99"
      }
      constraint { distinct_hosts = true }
      constraint { distinct_hosts = false }
      constraint { distinct_property = "${meta.rack}" }"#,
        );
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].operator, "version");
        assert_eq!(c[0].value, ">= 3.10, < 99");
        assert_eq!(c[1].describe(), "distinct_hosts");
        assert_eq!(c[2].attribute, "${meta.rack}");
        assert_eq!(c[2].distinct_limit(), 1);
    }

    #[test]
    fn what_nomad_refuses_is_refused() {
        for (constraint, expected) in [
            (
                r#"constraint { attribute = "a"
operator = "~"
value = "b" }"#,
                "unknown operator \"~\"",
            ),
            (r#"constraint { value = "b" }"#, "needs an attribute"),
            (r#"constraint { attribute = "${attr.x}" }"#, "needs a value"),
            (
                r#"constraint { attribute = "${attr.x}"
operator = "is_set"
value = "1" }"#,
                "takes no value",
            ),
            (
                r#"constraint { attribute = "${attr.x}"
regexp = "a(b" }"#,
                "regexp \"a(b\"",
            ),
            (
                r#"constraint { attribute = "${attr.x}"
semver = "~> 1.2" }"#,
                "malformed semver constraint",
            ),
            (
                r#"constraint { attribute = "${attr.x}"
operator = "version"
value = ">= x" }"#,
                "malformed version constraint",
            ),
            (
                r#"constraint { distinct_property = "${meta.rack}"
value = "0" }"#,
                "at least 1",
            ),
            (
                r#"constraint { attribute = "a"
value = "b"
vaule = "c" }"#,
                "vaule",
            ),
        ] {
            let err = error_of(constraint);
            assert!(err.contains(expected), "{constraint}: {err}");
        }
    }

    #[test]
    fn constraints_round_trip_through_hcl() {
        let src = job_with(
            r#"constraint {
        attribute = "${attr.kernel.name}"
        operator  = "is"
        value     = "linux"
      }
      constraint { distinct_property = "${meta.rack}"
value = "2" }"#,
        );
        let job = Job::decode(&src, "j.hcl").unwrap().spec;
        let again = Job::decode(&job.to_hcl(), "again.hcl").unwrap().spec;
        assert_eq!(job, again);
    }

    #[test]
    fn meta_merges_job_then_group_then_task() {
        let src = r#"job "j" {
  meta {
    owner = "job"
    tier  = "1"
  }
  group "g" {
    meta {
      owner = "group"
      rack  = "r1"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      meta {
        rack = "r2"
      }
    }
  }
}"#;
        let job = Job::decode(src, "j.hcl").unwrap().spec;
        let group = &job.groups[0];
        let meta = group.task_meta(&group.tasks[0]);
        let pairs: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(pairs, [("owner", "group"), ("rack", "r2"), ("tier", "1")]);
        let again = Job::decode(&job.to_hcl(), "again.hcl").unwrap().spec;
        assert_eq!(job, again);

        // Dispatched meta lands at job level: the group's own key wins.
        let mut dispatched = job.clone();
        let given = BTreeMap::from([
            ("owner".to_string(), "dispatch".to_string()),
            ("run".to_string(), "7".to_string()),
        ]);
        dispatched.extend_meta(&given);
        let group = &dispatched.groups[0];
        let meta = group.task_meta(&group.tasks[0]);
        assert_eq!(meta["owner"], "group");
        assert_eq!(meta["run"], "7");
        let again = Job::decode(&dispatched.to_hcl(), "again.hcl").unwrap().spec;
        assert_eq!(dispatched, again);
    }

    #[test]
    fn a_task_cannot_count_allocs() {
        let src = r#"job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      constraint {
        distinct_hosts = true
      }
    }
  }
}"#;
        let err = Job::decode(src, "j.hcl").unwrap_err().to_string();
        assert!(
            err.contains("j.hcl:6:7: operator \"distinct_hosts\" in constraint in task \"t\" cannot be used at task level"),
            "{err}"
        );
    }
}
