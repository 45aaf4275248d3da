//! Versions and version constraints, as a `constraint` block's `version`
//! and `semver` operators read them.
//!
//! Nomad compares versions with HashiCorp's go-version. An attribute's
//! value is read leniently ([`Version::parse`]: an optional `v`, any number
//! of dot-separated numbers, a pre-release after `-` (or straight after the
//! numbers when it starts with a letter), build metadata after `+`). A
//! constraint is a comma-separated list of `OP VERSION`, every one of which
//! must hold; `OP` is `=` (or nothing), `!=`, `>`, `>=`, `<`, `<=`, and for
//! `version` also `~>` (the pessimistic operator: `~> 1.2` is `>= 1.2, <
//! 2.0`; `~> 1.2.3` is `>= 1.2.3, < 1.3.0`).
//!
//! The two operators differ in pre-releases:
//! - `version`: a pre-release version satisfies an ordering operator only
//!   when the constraint's version is a pre-release of the same numbers
//!   (`1.3.0-beta1` is not `>= 1.0`; it is `>= 1.3.0-alpha`).
//! - `semver`: versions in the constraint must be strict SemVer 2.0 (at
//!   most three numbers without leading zeros, `-` before a pre-release),
//!   and pre-releases are ordered as SemVer orders them, with no special
//!   rule (`1.3.0-beta1` is `>= 1.0.0` and `< 1.3.0`).
//!
//! Both order numbers segment by segment, missing ones counting as 0
//! (`1.2` = `1.2.0`); a pre-release comes before its release; pre-release
//! identifiers compare numerically when both are numbers, a number comes
//! before a word, and more identifiers come after fewer. Build metadata
//! never counts.

use std::cmp::Ordering;
use std::fmt;

/// A version: its numbers, pre-release and how many numbers were written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// At least three: missing ones are 0.
    segments: Vec<u64>,
    /// How many numbers the text had.
    written: usize,
    /// Empty when it is a release.
    pre: String,
}

impl Version {
    /// A version as go-version's `NewVersion` reads one.
    pub fn parse(text: &str) -> Option<Version> {
        let rest = text.strip_prefix('v').unwrap_or(text);
        let numbers_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (numbers, tail) = rest.split_at(numbers_end);
        // A trailing dot belongs to no number.
        if numbers.is_empty() || numbers.ends_with('.') {
            return None;
        }
        let mut segments = Vec::new();
        for part in numbers.split('.') {
            if part.is_empty() {
                return None;
            }
            segments.push(part.parse::<u64>().ok()?);
        }
        let (pre_part, meta) = match tail.split_once('+') {
            Some((pre, meta)) => (pre, Some(meta)),
            None => (tail, None),
        };
        if let Some(meta) = meta {
            if !identifiers(meta) {
                return None;
            }
        }
        let pre = match pre_part.strip_prefix('-') {
            Some(pre) => pre,
            // Without a dash, a pre-release starts with a letter.
            None if pre_part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '~') => pre_part,
            None if pre_part.is_empty() => "",
            None => return None,
        };
        if !pre.is_empty() && !identifiers(pre) {
            return None;
        }
        Some(Version::new(segments, pre))
    }

    /// A strict SemVer 2.0 version: at most three numbers without leading
    /// zeros, a pre-release only after `-`.
    pub fn parse_semver(text: &str) -> Option<Version> {
        let rest = text.strip_prefix('v').unwrap_or(text);
        let (main, meta) = match rest.split_once('+') {
            Some((main, meta)) => (main, Some(meta)),
            None => (rest, None),
        };
        if meta.is_some_and(|m| !identifiers(m)) {
            return None;
        }
        let (numbers, pre) = match main.split_once('-') {
            Some((numbers, pre)) => (numbers, pre),
            None => (main, ""),
        };
        let mut segments = Vec::new();
        for part in numbers.split('.') {
            if part.is_empty()
                || !part.bytes().all(|b| b.is_ascii_digit())
                || (part.len() > 1 && part.starts_with('0'))
            {
                return None;
            }
            segments.push(part.parse::<u64>().ok()?);
        }
        if segments.len() > 3 {
            return None;
        }
        if main.contains('-') {
            let valid = !pre.is_empty()
                && pre.split('.').all(|id| {
                    !id.is_empty()
                        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                        && !(id.len() > 1
                            && id.starts_with('0')
                            && id.bytes().all(|b| b.is_ascii_digit()))
                });
            if !valid {
                return None;
            }
        }
        Some(Version::new(segments, pre))
    }

    fn new(mut segments: Vec<u64>, pre: &str) -> Version {
        let written = segments.len();
        while segments.len() < 3 {
            segments.push(0);
        }
        Version {
            segments,
            written,
            pre: pre.to_string(),
        }
    }

    fn segment(&self, i: usize) -> u64 {
        self.segments.get(i).copied().unwrap_or(0)
    }

    fn same_numbers(&self, other: &Version) -> bool {
        let n = self.segments.len().max(other.segments.len());
        (0..n).all(|i| self.segment(i) == other.segment(i))
    }

    /// SemVer's precedence, build metadata left out.
    pub fn precedence(&self, other: &Version) -> Ordering {
        let n = self.segments.len().max(other.segments.len());
        for i in 0..n {
            match self.segment(i).cmp(&other.segment(i)) {
                Ordering::Equal => {}
                unequal => return unequal,
            }
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => compare_pre(&self.pre, &other.pre),
        }
    }
}

/// Dot-separated identifiers of letters, digits, `-` and `~`.
fn identifiers(text: &str) -> bool {
    text.split('.').all(|id| {
        !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'~')
    })
}

fn compare_pre(a: &str, b: &str) -> Ordering {
    let mut left = a.split('.');
    let mut right = b.split('.');
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => x.cmp(&y),
                    (Ok(_), Err(_)) => Ordering::Less,
                    (Err(_), Ok(_)) => Ordering::Greater,
                    (Err(_), Err(_)) => x.cmp(y),
                };
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

/// One comparison of a constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Equal,
    NotEqual,
    Greater,
    GreaterEqual,
    Less,
    LessEqual,
    Pessimistic,
}

/// Which of Nomad's two version operators a constraint is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `version`: go-version's rules.
    Version,
    /// `semver`: SemVer 2.0's.
    Semver,
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavor::Version => "version",
            Flavor::Semver => "semver",
        })
    }
}

/// A parsed `version` or `semver` constraint: every comparison must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionConstraint {
    flavor: Flavor,
    checks: Vec<(Op, Version)>,
}

/// A constraint that does not parse: the part at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedConstraint {
    pub part: String,
    pub flavor: Flavor,
}

impl fmt::Display for MalformedConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed {} constraint {:?}: expected OPERATOR VERSION, with OPERATOR one of =, !=, >, >=, <, <={}",
            self.flavor,
            self.part.trim(),
            match self.flavor {
                Flavor::Version => ", ~>",
                Flavor::Semver => " and a SemVer 2.0 version",
            }
        )
    }
}

impl std::error::Error for MalformedConstraint {}

impl VersionConstraint {
    pub fn parse(text: &str, flavor: Flavor) -> Result<VersionConstraint, MalformedConstraint> {
        let mut checks = Vec::new();
        for part in text.split(',') {
            let malformed = || MalformedConstraint {
                part: part.to_string(),
                flavor,
            };
            let trimmed = part.trim();
            let (op, rest) = [
                (">=", Op::GreaterEqual),
                ("<=", Op::LessEqual),
                ("!=", Op::NotEqual),
                ("~>", Op::Pessimistic),
                (">", Op::Greater),
                ("<", Op::Less),
                ("=", Op::Equal),
            ]
            .iter()
            .find_map(|(text, op)| trimmed.strip_prefix(text).map(|rest| (*op, rest)))
            .unwrap_or((Op::Equal, trimmed));
            if op == Op::Pessimistic && flavor == Flavor::Semver {
                return Err(malformed());
            }
            let rest = rest.trim_start();
            let version = match flavor {
                Flavor::Version => Version::parse(rest),
                Flavor::Semver => Version::parse_semver(rest),
            };
            checks.push((op, version.ok_or_else(malformed)?));
        }
        Ok(VersionConstraint { flavor, checks })
    }

    /// Whether `version` satisfies every comparison.
    pub fn matches(&self, version: &Version) -> bool {
        self.checks
            .iter()
            .all(|(op, c)| self.check(*op, version, c))
    }

    fn check(&self, op: Op, v: &Version, c: &Version) -> bool {
        let order = v.precedence(c);
        let pre_ok = match self.flavor {
            Flavor::Semver => true,
            Flavor::Version => match (v.pre.is_empty(), c.pre.is_empty()) {
                (false, false) => v.same_numbers(c),
                (false, true) => false,
                _ => true,
            },
        };
        match op {
            Op::Equal => order == Ordering::Equal,
            Op::NotEqual => order != Ordering::Equal,
            Op::Greater => pre_ok && order == Ordering::Greater,
            Op::GreaterEqual => pre_ok && order != Ordering::Less,
            Op::Less => pre_ok && order == Ordering::Less,
            Op::LessEqual => pre_ok && order != Ordering::Greater,
            Op::Pessimistic => {
                if !pre_ok || (!c.pre.is_empty() && v.pre.is_empty()) || order == Ordering::Less {
                    return false;
                }
                // The numbers before the constraint's last written one are
                // fixed; the last may grow.
                let fixed = c.written.max(1) - 1;
                (0..fixed).all(|i| v.segment(i) == c.segment(i))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(version: &str, constraint: &str, flavor: Flavor) -> bool {
        let v = Version::parse(version).unwrap_or_else(|| panic!("version {version:?}"));
        VersionConstraint::parse(constraint, flavor)
            .unwrap_or_else(|e| panic!("{e}"))
            .matches(&v)
    }

    #[test]
    fn versions_parse_as_go_version_reads_them() {
        for good in [
            "1",
            "1.2",
            "v1.2.3",
            "1.2.3.4",
            "1.2.3-beta.1",
            "1.2.3beta",
            "1.2+build.5",
        ] {
            assert!(Version::parse(good).is_some(), "{good}");
        }
        for bad in ["", "v", "1.", "1..2", ".1", "1.2.3-beta..1", "x1.2", "1.2 "] {
            assert!(Version::parse(bad).is_none(), "{bad}");
        }
        assert_eq!(
            Version::parse("1.2")
                .unwrap()
                .precedence(&Version::parse("1.2.0").unwrap()),
            Ordering::Equal
        );
    }

    #[test]
    fn semver_versions_are_strict() {
        for good in [
            "1.2.3",
            "v1.2.3",
            "1.2",
            "1.2.3-rc.1",
            "1.2.3-0a",
            "1.0.0+20130313144700",
        ] {
            assert!(Version::parse_semver(good).is_some(), "{good}");
        }
        for bad in [
            "01.2.3",
            "1.2.3.4",
            "1.2.3beta",
            "1.2.3-01",
            "1.2.3-",
            "1.2.3-a..b",
        ] {
            assert!(Version::parse_semver(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_range_needs_every_comparison() {
        let v = Flavor::Version;
        assert!(holds("1.5.0", ">= 1.2, < 2.0", v));
        assert!(holds("1.2", ">= 1.2, < 2.0", v));
        assert!(!holds("2.0.0", ">= 1.2, < 2.0", v));
        assert!(!holds("1.1.9", ">= 1.2, < 2.0", v));
        assert!(holds("5.15.0", "> 4.19", v));
        // Numbers, not text: 10 > 9.
        assert!(holds("1.10.0", "> 1.9", v));
        assert!(holds("3.0", "3", v));
        assert!(holds("3.0", "!= 3.1", v));
        assert!(!holds("3.1+meta", "!= 3.1", v));
    }

    #[test]
    fn version_keeps_pre_releases_out_of_ranges_of_releases() {
        let v = Flavor::Version;
        assert!(!holds("1.3.0-beta1", ">= 1.0", v));
        assert!(holds("1.3.0-beta1", ">= 1.3.0-alpha", v));
        // A pre-release constraint only admits pre-releases of its numbers.
        assert!(!holds("1.4.0-beta1", ">= 1.3.0-alpha", v));
        assert!(holds("1.4.0", ">= 1.3.0-alpha", v));
        assert!(holds("1.3.0-beta1", "= 1.3.0-beta1", v));
    }

    #[test]
    fn semver_orders_pre_releases_as_semver_does() {
        let s = Flavor::Semver;
        assert!(holds("1.3.0-beta1", ">= 1.0.0", s));
        assert!(holds("1.3.0-beta1", "< 1.3.0", s));
        assert!(holds("1.0.0-alpha", "< 1.0.0-alpha.1", s));
        assert!(holds("1.0.0-alpha.1", "< 1.0.0-alpha.beta", s));
        assert!(holds("1.0.0-beta.2", "< 1.0.0-beta.11", s));
        assert!(holds("1.0.0-rc.1", "> 1.0.0-beta.11", s));
        assert!(VersionConstraint::parse("~> 1.2", s).is_err());
        assert!(VersionConstraint::parse(">= 1.2.3.4", s).is_err());
    }

    #[test]
    fn the_pessimistic_operator_lets_the_last_number_grow() {
        let v = Flavor::Version;
        assert!(holds("1.9.0", "~> 1.2", v));
        assert!(!holds("2.0.0", "~> 1.2", v));
        assert!(!holds("1.1.0", "~> 1.2", v));
        assert!(holds("1.2.9", "~> 1.2.3", v));
        assert!(!holds("1.3.0", "~> 1.2.3", v));
        assert!(!holds("1.2.2", "~> 1.2.3", v));
        assert!(!holds("1.2.4-beta", "~> 1.2.3", v));
    }

    #[test]
    fn a_malformed_constraint_names_its_part() {
        let err = VersionConstraint::parse(">= 1.2, => 2", Flavor::Version).unwrap_err();
        assert_eq!(err.part.trim(), "=> 2");
        assert!(err
            .to_string()
            .starts_with("malformed version constraint \"=> 2\""));
        assert!(VersionConstraint::parse("", Flavor::Version).is_err());
    }
}
