//! Where a volume can be used: matching a node's topology against a
//! volume's accessible topologies, and the bounds on the topologies a
//! plugin (or a user, or another host's record) gives us.
//!
//! A node matches one of a volume's topologies when every segment of that
//! topology is in the node's with the same value: a volume accessible
//! from `{zone: a}` can be used on a node in `{zone: a, rack: 3}`. A
//! volume with no topology is usable everywhere, and a node that reports
//! no topology matches no volume that has one (both as Nomad's scheduler
//! decides, its `CSITopology.MatchFound`).
//!
//! The CSI spec bounds a key to a 63-character prefix, a slash and a
//! 63-character name, and a value to 63 characters. We refuse only what
//! could cost us (more than [`MAX_SEGMENTS`] segments, a key or value over
//! [`MAX_PART`] bytes, more than [`MAX_TOPOLOGIES`] topologies for one
//! volume) or could not be shown (an empty key, control characters), so a
//! plugin slightly outside the letter of the spec still works.

use std::fmt::Write as _;

use super::types::Topology;

/// The most segments one topology may have.
pub const MAX_SEGMENTS: usize = 16;
/// The most bytes of a segment's key, or of its value (CSI's bound on
/// strings).
pub const MAX_PART: usize = 128;
/// The most topologies one volume may be accessible from.
pub const MAX_TOPOLOGIES: usize = 64;

/// Whether `node` is in `volume`'s topology: every segment of `volume` is
/// in `node` with the same value.
pub fn contains(node: &Topology, volume: &Topology) -> bool {
    volume
        .iter()
        .all(|(key, value)| node.get(key) == Some(value))
}

/// Whether a node whose plugin reports `node` may use a volume accessible
/// from `volume`: always for a volume without topology; otherwise the
/// node must be in one of them.
pub fn accessible(volume: &[Topology], node: Option<&Topology>) -> bool {
    if volume.is_empty() {
        return true;
    }
    node.is_some_and(|node| volume.iter().any(|v| contains(node, v)))
}

/// Checks `topology` against the bounds; the error says which.
pub fn check(topology: &Topology) -> Result<(), String> {
    if topology.len() > MAX_SEGMENTS {
        return Err(format!(
            "a topology has {} segments, more than {MAX_SEGMENTS}",
            topology.len()
        ));
    }
    for (key, value) in topology {
        if key.is_empty() {
            return Err("a topology segment has an empty key".to_string());
        }
        for (what, text) in [("key", key), ("value", value)] {
            if text.len() > MAX_PART {
                return Err(format!(
                    "a topology segment's {what} is {} bytes long, more than {MAX_PART}: {}...",
                    text.len(),
                    text.chars().take(32).collect::<String>().escape_debug()
                ));
            }
            if text.chars().any(char::is_control) {
                return Err(format!(
                    "a topology segment's {what} {:?} has a control character",
                    text
                ));
            }
        }
    }
    Ok(())
}

/// Checks each of a volume's topologies, and how many there are.
pub fn check_all(topologies: &[Topology]) -> Result<(), String> {
    if topologies.len() > MAX_TOPOLOGIES {
        return Err(format!(
            "{} topologies, more than {MAX_TOPOLOGIES}",
            topologies.len()
        ));
    }
    topologies.iter().try_for_each(check)
}

/// One topology as users write it: `{zone=a, rack=3}`.
pub fn describe(topology: &Topology) -> String {
    let mut out = String::from("{");
    for (i, (key, value)) in topology.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{key}={value}");
    }
    out.push('}');
    out
}

/// A list of topologies, `none` for an empty one.
pub fn describe_all(topologies: &[Topology]) -> String {
    if topologies.is_empty() {
        return "none".to_string();
    }
    topologies
        .iter()
        .map(describe)
        .collect::<Vec<_>>()
        .join(" or ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(segments: &[(&str, &str)]) -> Topology {
        segments
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_node_is_in_a_topology_when_it_has_every_segment_with_the_same_value() {
        let node = t(&[("zone", "a"), ("rack", "3")]);
        assert!(contains(&node, &t(&[("zone", "a")])));
        assert!(contains(&node, &t(&[("zone", "a"), ("rack", "3")])));
        assert!(!contains(&node, &t(&[("zone", "b")])));
        assert!(!contains(&node, &t(&[("zone", "a"), ("row", "1")])));
        // An empty topology asks for nothing.
        assert!(contains(&node, &t(&[])));
        // The node's extra segments do not make a narrower topology match.
        assert!(!contains(&t(&[("zone", "a")]), &node));
    }

    #[test]
    fn a_volume_without_topology_is_usable_everywhere() {
        assert!(accessible(&[], None));
        assert!(accessible(&[], Some(&t(&[("zone", "a")]))));
    }

    #[test]
    fn a_volume_is_usable_where_one_of_its_topologies_matches() {
        let volume = [t(&[("zone", "a")]), t(&[("zone", "b")])];
        assert!(accessible(
            &volume,
            Some(&t(&[("zone", "b"), ("rack", "1")]))
        ));
        assert!(!accessible(&volume, Some(&t(&[("zone", "c")]))));
    }

    #[test]
    fn a_node_without_topology_matches_no_volume_that_has_one() {
        assert!(!accessible(&[t(&[("zone", "a")])], None));
        assert!(!accessible(&[t(&[("zone", "a")])], Some(&t(&[]))));
    }

    #[test]
    fn topologies_are_described_as_users_write_them() {
        assert_eq!(
            describe(&t(&[("zone", "a"), ("rack", "3")])),
            "{rack=3, zone=a}"
        );
        assert_eq!(describe_all(&[]), "none");
        assert_eq!(
            describe_all(&[t(&[("zone", "a")]), t(&[("zone", "b")])]),
            "{zone=a} or {zone=b}"
        );
    }

    #[test]
    fn each_bound_is_hit_and_named() {
        let many: Topology = (0..=MAX_SEGMENTS)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        assert!(check(&many)
            .unwrap_err()
            .contains("17 segments, more than 16"));
        let at_bound: Topology = (0..MAX_SEGMENTS)
            .map(|i| (format!("k{i}"), "v".repeat(MAX_PART)))
            .collect();
        assert_eq!(check(&at_bound), Ok(()));
        let long_key = t(&[(&"k".repeat(MAX_PART + 1), "v")]);
        assert!(check(&long_key)
            .unwrap_err()
            .contains("key is 129 bytes long, more than 128"));
        let long_value = t(&[("k", &"v".repeat(1 << 20))]);
        let err = check(&long_value).unwrap_err();
        assert!(err.contains("value is 1048576 bytes long"), "{err}");
        assert!(
            err.len() < 200,
            "the message quotes a bounded prefix: {err}"
        );
        assert!(check(&t(&[("", "v")])).unwrap_err().contains("empty key"));
        assert!(check(&t(&[("k", "a\nb")]))
            .unwrap_err()
            .contains("control character"));
        let too_many = vec![t(&[("zone", "a")]); MAX_TOPOLOGIES + 1];
        assert!(check_all(&too_many)
            .unwrap_err()
            .contains("65 topologies, more than 64"));
        assert_eq!(check_all(&too_many[..MAX_TOPOLOGIES]), Ok(()));
    }
}
