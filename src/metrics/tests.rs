use super::*;

static PLAIN: Family = Family::counter("t_plain_total", "A plain counter.", &[]);
static LABELED: Family = Family::gauge("t_labeled", "A gauge\\with \"help\"\nlines.", &["a", "b"]);
static HIST: Family = Family::histogram("t_seconds", "A histogram.", &["m"], &[0.1, 1.0]);

#[test]
fn the_exposition_format_is_exact_and_sorted() {
    let r = Registry::new();
    r.add(&PLAIN, &[], 2.0);
    r.set(&LABELED, &["y", "z"], 1.5);
    r.set(&LABELED, &["x", "q"], -3.0);
    r.observe(&HIST, &["get"], 0.05);
    r.observe(&HIST, &["get"], 0.5);
    r.observe(&HIST, &["get"], 7.0);
    let text = r.render(&[&HIST, &PLAIN, &LABELED]);
    assert_eq!(
        text,
        "# HELP t_labeled A gauge\\\\with \"help\"\\nlines.\n\
         # TYPE t_labeled gauge\n\
         t_labeled{a=\"x\",b=\"q\"} -3\n\
         t_labeled{a=\"y\",b=\"z\"} 1.5\n\
         # HELP t_plain_total A plain counter.\n\
         # TYPE t_plain_total counter\n\
         t_plain_total 2\n\
         # HELP t_seconds A histogram.\n\
         # TYPE t_seconds histogram\n\
         t_seconds_bucket{m=\"get\",le=\"0.1\"} 1\n\
         t_seconds_bucket{m=\"get\",le=\"1\"} 2\n\
         t_seconds_bucket{m=\"get\",le=\"+Inf\"} 3\n\
         t_seconds_sum{m=\"get\"} 7.55\n\
         t_seconds_count{m=\"get\"} 3\n"
    );
}

#[test]
fn a_family_that_never_moved_still_has_its_help_and_type() {
    let r = Registry::new();
    assert_eq!(
        r.render(&[&PLAIN]),
        "# HELP t_plain_total A plain counter.\n# TYPE t_plain_total counter\n"
    );
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(escape_label_value(r#"a\b"c"#), r#"a\\b\"c"#);
    assert_eq!(escape_label_value("l1\nl2"), "l1\\nl2");
    let r = Registry::new();
    r.set(&LABELED, &["q\"uote", "back\\slash\n"], 1.0);
    let text = r.render(&[&LABELED]);
    assert!(
        text.contains(r#"t_labeled{a="q\"uote",b="back\\slash\n"} 1"#),
        "{text}"
    );
}

#[test]
fn histogram_buckets_are_cumulative_and_bounds_inclusive() {
    let r = Registry::new();
    for v in [0.1, 0.1, 1.0, 1.0001] {
        r.observe(&HIST, &["x"], v);
    }
    let text = r.render(&[&HIST]);
    assert!(
        text.contains("t_seconds_bucket{m=\"x\",le=\"0.1\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("t_seconds_bucket{m=\"x\",le=\"1\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("t_seconds_bucket{m=\"x\",le=\"+Inf\"} 4\n"),
        "{text}"
    );
    assert!(text.contains("t_seconds_count{m=\"x\"} 4\n"), "{text}");
    assert_eq!(r.value(&HIST, &["x"]), 4.0);
    assert_eq!(r.total(&HIST), 4.0);
}

#[test]
fn values_are_written_as_the_format_reads_them() {
    assert_eq!(format_value(3.0), "3");
    assert_eq!(format_value(0.25), "0.25");
    assert_eq!(format_value(f64::INFINITY), "+Inf");
    assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
    assert_eq!(format_value(f64::NAN), "NaN");
}

#[test]
fn the_global_families_move_and_render() {
    let before = STEP_RETRIES.value(&[]);
    STEP_RETRIES.inc(&[]);
    assert_eq!(STEP_RETRIES.value(&[]), before + 1.0);
    let text = render();
    for family in ALL {
        assert!(
            text.contains(&format!("# TYPE {} ", family.name)),
            "{}",
            family.name
        );
        assert!(family.name.starts_with("csi_agent_"), "{}", family.name);
    }
}

#[test]
fn family_names_are_unique_and_valid() {
    let mut names: Vec<&str> = ALL.iter().map(|f| f.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), ALL.len());
    for family in ALL {
        let ok = family
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        assert!(ok, "{}", family.name);
        if let Kind::Counter = family.kind {
            assert!(family.name.ends_with("_total"), "{}", family.name);
        }
        if let Kind::Histogram(buckets) = family.kind {
            assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{}", family.name);
            assert!(!family.labels.contains(&"le"));
        }
    }
}

#[test]
fn every_family_is_documented_with_its_labels() {
    let docs = include_str!("../../docs/metrics.md");
    for family in ALL {
        let row = docs
            .lines()
            .find(|line| line.starts_with(&format!("| `{}` |", family.name)))
            .unwrap_or_else(|| panic!("docs/metrics.md has no row for {}", family.name));
        for label in family.labels {
            assert!(
                row.contains(&format!("`{label}`")),
                "{}: {label}",
                family.name
            );
        }
        assert!(
            row.contains(&format!("| {} |", family.kind.as_str())),
            "{}",
            family.name
        );
    }
}
