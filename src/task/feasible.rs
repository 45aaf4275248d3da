//! Constraints checked against this node, as Nomad's scheduler checks
//! them (its `feasible.go`), at `job run`.
//!
//! A constraint's `attribute` and `value` are each a literal or one
//! `${...}` of the node: `${node.unique.id}`, `${node.unique.name}`,
//! `${node.datacenter}`, `${node.region}`, `${node.class}` (empty: the
//! agent has no node class), `${node.pool}` (`default`), `${attr.<name>}`
//! (the fingerprint: [`host_attributes`](super::node::host_attributes)
//! and the placement fingerprint's numbers,
//! [`NodeFacts::for_constraints`](super::node::NodeFacts::for_constraints))
//! and `${meta.<key>}` (the agent config's `client { meta }`). An attribute the node does not have is
//! unset: it fails every operator but `!=` (Nomad compares it as the
//! empty string) and `is_not_set`.
//!
//! The ordering operators compare as whole numbers when both sides are
//! ones, else as floating-point numbers when both are, else as text
//! (Nomad's `checkOrder`). `set_contains` (`set_contains_all`) and
//! `set_contains_any` split both sides on commas, spaces trimmed.
//! `regexp` is the crate's RE2 engine, unanchored as Go's `MatchString`.
//! `version` and `semver` are `spec::version`'s.
//!
//! `distinct_hosts` and `distinct_property` count allocs: this agent is
//! one host, so `distinct_hosts` lets at most one alloc of its scope on
//! it, and `distinct_property` at most `value` (default 1) allocs sharing
//! the node's one value of the property (none if the node lacks it). The
//! scope is the job for a job-level constraint, the group for a
//! group-level one (a task may not have them, as in Nomad). Allocs past
//! the bound are not placed.
//!
//! A group instance that cannot be placed gets no alloc: `job run`
//! answers, the agent's events say, and `job status` shows which
//! constraint filtered the node, in Nomad's words ([`Unplaced::message`]).
//! Running the job again checks again, and so does a SIGHUP that changes
//! the node's `meta`, class or pool (`refit.rs`).

use std::collections::BTreeMap;

use super::Allocs;
use crate::spec::{
    Constraint, Flavor, Group, Job, Operator, Version, VersionConstraint, VolumeType,
};

/// Where `${node.pool}` points when the agent config names no pool: the
/// pool Nomad puts a client in.
pub const DEFAULT_NODE_POOL: &str = "default";

/// A group's instances that cannot be placed on this node, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unplaced {
    pub group: String,
    /// How many of the group's `count` get no alloc: `instances.len()`.
    pub count: u64,
    /// Which instances (by index, ascending) get no alloc: every one for
    /// a failed node constraint, the last ones for a `distinct_*` bound,
    /// and, for a `per_alloc` volume, the instances whose own volume is
    /// elsewhere (Nomad places each instance on its own).
    pub instances: Vec<u64>,
    /// The constraint that filtered the node, as Nomad names it.
    pub constraint: String,
    /// What the filter found, where Nomad's name alone does not say
    /// (a volume's topologies and the node's); empty otherwise.
    pub detail: String,
}

impl Unplaced {
    /// Nomad's line for the filter.
    pub fn message(&self) -> String {
        let line = format!(
            "Constraint {:?}: 1 nodes excluded by filter",
            self.constraint
        );
        if self.detail.is_empty() {
            line
        } else {
            format!("{line} ({})", self.detail)
        }
    }
}

/// Nomad's name for the filter of a node on which a group's CSI volume is
/// not accessible.
pub const TOPOLOGY_FILTER: &str = "did not meet topology requirement";

/// A target's value on `node`: a literal as it is, `${name}` looked up;
/// `None` when the node lacks it.
pub fn resolve(target: &str, node: &BTreeMap<String, String>) -> Option<String> {
    let Some(inner) = target.strip_prefix("${") else {
        return Some(target.to_string());
    };
    let name = inner.strip_suffix('}').unwrap_or(inner).trim();
    match name {
        "node.class" => Some(node.get(name).cloned().unwrap_or_default()),
        "node.pool" => Some(
            node.get(name)
                .cloned()
                .unwrap_or_else(|| DEFAULT_NODE_POOL.into()),
        ),
        _ => node.get(name).cloned(),
    }
}

/// Whether `node` meets `constraint`; the `distinct_*` operators, which
/// count allocs, always do here ([`unplaced`] counts them).
pub fn meets(constraint: &Constraint, node: &BTreeMap<String, String>) -> bool {
    let left = resolve(&constraint.attribute, node);
    let right = resolve(&constraint.value, node);
    let both = || Some((left.as_deref()?, right.as_deref()?));
    match constraint.op() {
        Operator::DistinctHosts | Operator::DistinctProperty => true,
        Operator::IsSet => left.is_some(),
        Operator::IsNotSet => left.is_none(),
        Operator::NotEqual => left.unwrap_or_default() != right.unwrap_or_default(),
        op => both().is_some_and(|(l, r)| check(op, l, r)),
    }
}

/// The operators that need both sides set.
fn check(op: Operator, left: &str, right: &str) -> bool {
    match op {
        Operator::Equal => left == right,
        Operator::Less | Operator::LessEqual | Operator::Greater | Operator::GreaterEqual => {
            let order = order(left, right);
            match op {
                Operator::Less => order.is_lt(),
                Operator::LessEqual => order.is_le(),
                Operator::Greater => order.is_gt(),
                _ => order.is_ge(),
            }
        }
        Operator::Regexp => regex::Regex::new(right).is_ok_and(|re| re.is_match(left)),
        Operator::SetContainsAll => {
            let have = set(left);
            set(right).iter().all(|item| have.contains(item))
        }
        Operator::SetContainsAny => {
            let have = set(left);
            set(right).iter().any(|item| have.contains(item))
        }
        Operator::Version | Operator::Semver => {
            let flavor = if op == Operator::Version {
                Flavor::Version
            } else {
                Flavor::Semver
            };
            match (
                Version::parse(left),
                VersionConstraint::parse(right, flavor),
            ) {
                (Some(version), Ok(constraint)) => constraint.matches(&version),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Nomad's order of two values: as integers, else as floats, else as text.
fn order(left: &str, right: &str) -> std::cmp::Ordering {
    if let (Ok(l), Ok(r)) = (left.parse::<i64>(), right.parse::<i64>()) {
        return l.cmp(&r);
    }
    if let (Ok(l), Ok(r)) = (left.parse::<f64>(), right.parse::<f64>()) {
        if let Some(order) = l.partial_cmp(&r) {
            return order;
        }
    }
    left.cmp(right)
}

fn set(text: &str) -> Vec<&str> {
    text.split(',').map(str::trim).collect()
}

/// The groups of `spec` whose instances, or some of them, cannot be
/// placed on `node`, in file order: the first node constraint (job's,
/// group's, tasks') that fails filters the whole group; an instance one
/// of whose CSI volumes is in `misfits` (volume ID → why: the node's
/// topology is in none of the volume's) is filtered alone, as each
/// instance of a `per_alloc` volume has its own; then the `distinct_*`
/// bounds cut the rest from the end.
pub fn unplaced(
    spec: &Job,
    node: &BTreeMap<String, String>,
    misfits: &BTreeMap<String, String>,
) -> Vec<Unplaced> {
    let mut out = Vec::new();
    // How many allocs of the job the earlier groups placed.
    let mut job_placed: u64 = 0;
    for group in &spec.groups {
        let filtered = group
            .constraints()
            .find(|c| !c.op().is_distinct() && !meets(c, node));
        let entry = |instances: Vec<u64>, constraint: String, detail: String| Unplaced {
            group: group.name.clone(),
            count: instances.len() as u64,
            instances,
            constraint,
            detail,
        };
        if let Some(c) = filtered {
            out.push(entry(
                (0..group.count).collect(),
                c.describe(),
                String::new(),
            ));
            continue;
        }
        let mut fit = Vec::new();
        let mut misfit = Vec::new();
        let mut why = None;
        for index in 0..group.count {
            match volume_misfit(group, index, misfits) {
                Some(w) => {
                    why.get_or_insert(w);
                    misfit.push(index);
                }
                None => fit.push(index),
            }
        }
        if let Some(why) = why {
            out.push(entry(misfit, TOPOLOGY_FILTER.to_string(), why.clone()));
        }
        let (placed, cut_by) = distinct_bound(group, fit.len() as u64, node, job_placed);
        job_placed += placed;
        if let Some(c) = cut_by {
            out.push(entry(fit.split_off(placed as usize), c, String::new()));
        }
    }
    out
}

/// Why one of the CSI volumes instance `index` of `group` claims cannot
/// be used on this node, if one cannot.
fn volume_misfit<'a>(
    group: &Group,
    index: u64,
    misfits: &'a BTreeMap<String, String>,
) -> Option<&'a String> {
    if misfits.is_empty() {
        return None;
    }
    group
        .volumes
        .iter()
        .filter(|v| v.volume_type == VolumeType::Csi)
        .find_map(|v| misfits.get(&v.source_for(index)))
}

/// How many of `group`'s `available` instances its `distinct_*`
/// constraints let on this node, when `job_placed` allocs of its job are
/// placed already, and the one that cut it most.
fn distinct_bound(
    group: &Group,
    available: u64,
    node: &BTreeMap<String, String>,
    job_placed: u64,
) -> (u64, Option<String>) {
    let job_level = group.inherited.constraints.iter().map(|c| (c, true));
    let group_level = group.placement.constraints.iter().map(|c| (c, false));
    let mut placed = available;
    let mut cut_by = None;
    for (c, of_job) in job_level.chain(group_level) {
        let bound = match c.op() {
            // Nomad's `value = "false"` (Go's `ParseBool` spellings) turns
            // the constraint off; no value is true.
            Operator::DistinctHosts
                if matches!(
                    c.value.as_str(),
                    "false" | "False" | "FALSE" | "f" | "F" | "0"
                ) =>
            {
                continue
            }
            Operator::DistinctHosts => 1,
            Operator::DistinctProperty => match resolve(&c.attribute, node) {
                Some(_) => c.distinct_limit(),
                None => 0,
            },
            _ => continue,
        };
        let room = if of_job {
            bound.saturating_sub(job_placed)
        } else {
            bound
        };
        // A tighter bound names the filter: Nomad names a distinct
        // filter by its operator.
        if room < placed {
            placed = room;
            cut_by = Some(c.operator.clone());
        }
    }
    (placed, cut_by)
}

/// The instances of `group` (by index, ascending) that get an alloc.
pub fn placed(group: &Group, unplaced: &[Unplaced]) -> Vec<u64> {
    let mine: Vec<&Unplaced> = unplaced.iter().filter(|u| u.group == group.name).collect();
    (0..group.count)
        .filter(|i| !mine.iter().any(|u| u.instances.binary_search(i).is_ok()))
        .collect()
}

/// Logs and emits a `PlacementFailed` job event for each group of job
/// `job` that the node filtered.
pub fn report_unplaced(job: &str, unplaced: &[Unplaced]) {
    for u in unplaced {
        let message = format!(
            "Task Group {:?} (failed to place {} allocation{}): {}",
            u.group,
            u.count,
            if u.count == 1 { "" } else { "s" },
            u.message()
        );
        log::warn!("Job {job}: {message}");
        crate::events::emit(
            crate::events::Topic::Job,
            "PlacementFailed",
            format!("{job}/{}", u.group),
            message,
        );
    }
}

impl Allocs {
    /// The agent config, re-read on SIGHUP: the node's attributes are
    /// taken again ([`NodeFacts::reconfigure`](super::node::NodeFacts::reconfigure)),
    /// then every job is placed again against the new node (`refit.rs`).
    pub fn reconfigure_node(&mut self, config: &crate::spec::AgentConfig) {
        self.node.reconfigure(config);
        self.refit();
    }

    /// Whether the node has attribute `key` (`attr.driver.docker`, ...).
    pub fn node_has(&self, key: &str) -> bool {
        self.node.has(key)
    }

    /// The group instances of `spec` this node cannot take ([`unplaced`]).
    pub(super) fn unplaced(&self, spec: &Job) -> Vec<Unplaced> {
        self.node.unplaced(spec, &self.placement)
    }

    /// The volumes this node cannot use, by ID, with why: the volume
    /// manager's, given before each job call, since the job runner does
    /// not see the volumes (`VolumeManager::topology_misfits`).
    pub fn set_volume_misfits(&mut self, misfits: BTreeMap<String, String>) {
        self.node.set_volume_misfits(misfits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> BTreeMap<String, String> {
        [
            ("node.unique.name", "n1"),
            ("node.datacenter", "dc1"),
            ("attr.kernel.name", "linux"),
            ("attr.kernel.version", "5.15.0-91-generic"),
            ("attr.os.version", "12.4"),
            ("attr.cpu.arch", "amd64"),
            ("attr.cpu.numcores", "8"),
            ("attr.nomad.version", "1.7.3-beta.1"),
            ("attr.ratio", "2.5"),
            ("meta.rack", "r7"),
            ("meta.zones", "a, b,c"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn holds(attribute: &str, operator: &str, value: &str) -> bool {
        meets(
            &Constraint {
                attribute: attribute.into(),
                operator: operator.into(),
                value: value.into(),
            },
            &node(),
        )
    }

    #[test]
    fn equality_has_nomads_three_spellings_and_two_negations() {
        for op in ["=", "==", "is"] {
            assert!(holds("${attr.kernel.name}", op, "linux"));
            assert!(!holds("${attr.kernel.name}", op, "windows"));
        }
        for op in ["!=", "not"] {
            assert!(holds("${attr.kernel.name}", op, "windows"));
            assert!(!holds("${attr.kernel.name}", op, "linux"));
        }
        // Both sides may name the node.
        assert!(holds("${node.unique.name}", "=", "${node.unique.name}"));
        assert!(holds("${node.class}", "=", ""));
        assert!(holds("${node.pool}", "=", "default"));
    }

    #[test]
    fn an_unset_attribute_fails_all_but_not_equal_and_is_not_set() {
        for op in [
            "=",
            "<",
            ">=",
            "regexp",
            "set_contains",
            "version",
            "semver",
        ] {
            assert!(!holds("${attr.nope}", op, "1"), "{op}");
        }
        assert!(holds("${attr.nope}", "!=", "windows"));
        assert!(!holds("${attr.nope}", "!=", ""));
        assert!(holds("${attr.nope}", "is_not_set", ""));
        assert!(!holds("${attr.nope}", "is_set", ""));
        assert!(holds("${meta.rack}", "is_set", ""));
        assert!(!holds("${meta.rack}", "is_not_set", ""));
    }

    #[test]
    fn order_is_numeric_when_both_sides_are_numbers_else_lexical() {
        // 8 >= 10 is false as numbers, true as text.
        assert!(!holds("${attr.cpu.numcores}", ">=", "10"));
        assert!(holds("${attr.cpu.numcores}", ">=", "4"));
        assert!(holds("${attr.cpu.numcores}", "<", "10"));
        assert!(holds("${attr.ratio}", ">", "2.25"));
        assert!(holds("${attr.ratio}", "<=", "2.5"));
        // Text: "r7" > "r10" lexically.
        assert!(holds("${meta.rack}", ">", "r10"));
        assert!(holds("${attr.kernel.name}", "<", "windows"));
    }

    #[test]
    fn regexp_matches_anywhere_unless_anchored() {
        assert!(holds("${attr.kernel.version}", "regexp", "generic"));
        assert!(holds("${attr.kernel.version}", "regexp", "^5\\.1[0-9]\\."));
        assert!(!holds("${attr.kernel.version}", "regexp", "^4\\."));
        assert!(!holds("${attr.kernel.version}", "regexp", "a(b"));
    }

    #[test]
    fn sets_split_on_commas() {
        assert!(holds("${meta.zones}", "set_contains", "a,c"));
        assert!(holds("${meta.zones}", "set_contains_all", "b"));
        assert!(!holds("${meta.zones}", "set_contains", "a,d"));
        assert!(holds("${meta.zones}", "set_contains_any", "d, c"));
        assert!(!holds("${meta.zones}", "set_contains_any", "d,e"));
    }

    #[test]
    fn versions_follow_their_flavour() {
        assert!(holds("${attr.os.version}", "version", ">= 12, < 13"));
        // As in Nomad, Ubuntu's "5.15.0-91-generic" is a pre-release to
        // go-version, outside a range of releases.
        assert!(!holds("${attr.kernel.version}", "version", ">= 5.4"));
        assert!(holds("${attr.kernel.version}", "semver", ">= 5.4.0"));
        // go-version: a pre-release is outside a range of releases.
        assert!(!holds("${attr.nomad.version}", "version", ">= 1.6"));
        assert!(holds("${attr.nomad.version}", "semver", ">= 1.6.0"));
        assert!(holds("${attr.nomad.version}", "semver", "< 1.7.3"));
        assert!(!holds("${attr.kernel.name}", "version", ">= 1"));
    }

    fn job(src: &str) -> Job {
        Job::decode(src, "j.hcl")
            .unwrap_or_else(|e| panic!("{e}"))
            .spec
    }

    #[test]
    fn a_group_whose_csi_volume_lives_elsewhere_is_not_placed() {
        let spec = job(r#"job "j" {
  group "far" {
    volume "data" {
      type            = "csi"
      source          = "db"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
  group "each" {
    count = 2
    volume "data" {
      type            = "csi"
      source          = "shard"
      per_alloc       = true
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
  group "near" {
    volume "data" {
      type            = "csi"
      source          = "here"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#);
        let misfits: BTreeMap<String, String> = [
            ("db".to_string(), "db lives on host-a".to_string()),
            (
                "shard[1]".to_string(),
                "shard[1] lives on host-a".to_string(),
            ),
        ]
        .into();
        let filtered = unplaced(&spec, &node(), &misfits);
        assert_eq!(
            filtered,
            vec![
                Unplaced {
                    group: "far".into(),
                    count: 1,
                    instances: vec![0],
                    constraint: TOPOLOGY_FILTER.into(),
                    detail: "db lives on host-a".into(),
                },
                // Only the instance whose own volume lives elsewhere.
                Unplaced {
                    group: "each".into(),
                    count: 1,
                    instances: vec![1],
                    constraint: TOPOLOGY_FILTER.into(),
                    detail: "shard[1] lives on host-a".into(),
                },
            ]
        );
        assert_eq!(placed(&spec.groups[1], &filtered), vec![0]);
        assert_eq!(placed(&spec.groups[0], &filtered), Vec::<u64>::new());
        assert_eq!(placed(&spec.groups[2], &filtered), vec![0]);
        assert_eq!(
            filtered[0].message(),
            "Constraint \"did not meet topology requirement\": 1 nodes excluded by filter (db lives on host-a)"
        );
        assert!(unplaced(&spec, &node(), &BTreeMap::new()).is_empty());
    }

    #[test]
    fn the_first_failing_constraint_filters_the_whole_group() {
        let spec = job(r#"job "j" {
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  group "win" {
    count = 2
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      constraint {
        attribute = "${attr.kernel.name}"
        value     = "windows"
      }
    }
  }
  group "ok" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#);
        let unplaced = unplaced(&spec, &node(), &BTreeMap::new());
        assert_eq!(unplaced.len(), 1);
        assert_eq!(unplaced[0].group, "win");
        assert_eq!(unplaced[0].count, 2);
        assert_eq!(
            unplaced[0].message(),
            "Constraint \"${attr.kernel.name} = windows\": 1 nodes excluded by filter"
        );
    }

    #[test]
    fn distinct_hosts_lets_one_alloc_of_its_scope_on_this_host() {
        let spec = job(r#"job "j" {
  group "a" {
    count = 3
    constraint { distinct_hosts = true }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
  group "b" {
    count = 2
    constraint {
      distinct_property = "${meta.rack}"
      value             = "2"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
  group "c" {
    constraint { distinct_property = "${meta.row}" }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#);
        let unplaced = unplaced(&spec, &node(), &BTreeMap::new());
        assert_eq!(
            unplaced,
            vec![
                Unplaced {
                    group: "a".into(),
                    count: 2,
                    instances: vec![1, 2],
                    constraint: "distinct_hosts".into(),
                    detail: String::new(),
                },
                Unplaced {
                    group: "c".into(),
                    count: 1,
                    instances: vec![0],
                    constraint: "distinct_property".into(),
                    detail: String::new(),
                },
            ]
        );
    }

    #[test]
    fn a_distinct_bound_takes_the_instances_whose_volumes_are_here() {
        // Instance 0's volume lives elsewhere: distinct_hosts lets one
        // instance on this host, and that is instance 1, not none.
        let spec = job(r#"job "j" {
  group "each" {
    count = 3
    constraint { distinct_hosts = true }
    volume "data" {
      type            = "csi"
      source          = "shard"
      per_alloc       = true
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#);
        let misfits: BTreeMap<String, String> =
            [("shard[0]".to_string(), "elsewhere".to_string())].into();
        let filtered = unplaced(&spec, &node(), &misfits);
        let seen: Vec<(&str, &[u64])> = filtered
            .iter()
            .map(|u| (u.constraint.as_str(), u.instances.as_slice()))
            .collect();
        assert_eq!(
            seen,
            vec![(TOPOLOGY_FILTER, &[0][..]), ("distinct_hosts", &[2][..])]
        );
        assert_eq!(placed(&spec.groups[0], &filtered), vec![1]);
    }

    #[test]
    fn distinct_hosts_with_the_value_false_is_off() {
        let spec = job(r#"job "j" {
  group "a" {
    count = 2
    constraint {
      operator = "distinct_hosts"
      value    = "false"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#);
        assert_eq!(unplaced(&spec, &node(), &BTreeMap::new()), Vec::new());
    }

    #[test]
    fn a_job_level_distinct_hosts_counts_across_groups() {
        let spec = job(r#"job "j" {
  constraint { distinct_hosts = true }
  group "a" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
  group "b" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#);
        let unplaced = unplaced(&spec, &node(), &BTreeMap::new());
        assert_eq!(unplaced.len(), 1);
        assert_eq!((unplaced[0].group.as_str(), unplaced[0].count), ("b", 1));
    }
}
