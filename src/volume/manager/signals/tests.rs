//! The polls' schedule and what an answer may be, without a plugin: the
//! [`Signals`] state alone, its gauges read from the process-wide
//! registry (each test names its own volumes, so tests running at once do
//! not meet).

use super::sample::check;
use super::*;
use crate::csi::types::{Usage, UsageUnit, VolumeCondition};
use crate::csi::{AccessMode, AttachmentMode, Capability};
use crate::volume::model::{Staging, StagingKey};

const INTERVAL: Duration = Duration::from_secs(60);

fn staged(id: &str) -> Volume {
    let capability = Capability::new(AccessMode::SingleNodeWriter, AttachmentMode::FileSystem);
    let mut v = crate::volume::model::test_volume(capability.clone());
    v.id = id.to_string();
    v.plugin_id = "sig".to_string();
    v.stagings.insert(
        StagingKey::Volume,
        Staging {
            step: Step::Done,
            capability,
        },
    );
    v
}

fn unstaged(id: &str) -> Volume {
    let mut v = staged(id);
    v.stagings.clear();
    v
}

fn usage(unit: UsageUnit, total: i64, available: i64, used: i64) -> Usage {
    Usage {
        unit,
        total,
        available,
        used,
    }
}

fn answer(used: i64, condition: Option<(bool, &str)>) -> Result<VolumeStats, crate::csi::Error> {
    Ok(VolumeStats {
        usage: vec![
            usage(UsageUnit::Bytes, 1000, 1000 - used, used),
            usage(UsageUnit::Inodes, 100, 90, 10),
        ],
        condition: condition.map(|(abnormal, message)| VolumeCondition {
            abnormal,
            message: message.to_string(),
        }),
    })
}

fn gauge(family: &'static crate::metrics::Family, id: &str) -> Option<f64> {
    let text = crate::metrics::global().render(&[family]);
    let series = format!("{}{{volume=\"{id}\",plugin=\"sig\"}} ", family.name);
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.parse().unwrap())
}

#[test]
fn a_staged_volume_is_first_polled_within_a_tenth_of_the_interval_then_each_interval() {
    let mut s = Signals::new(INTERVAL);
    let now = Instant::now();
    s.volume_changed("sched-a", Some(&staged("sched-a")), now);
    let first = s.next_due().expect("a first poll");
    assert!(
        first >= now && first <= now + INTERVAL / 10 + SLOT,
        "{first:?}"
    );
    assert!(s.due_volumes(first - Duration::from_millis(1)).is_empty());
    assert_eq!(s.due_volumes(first), ["sched-a"]);
    assert_eq!(s.next_due(), None, "nothing else is due while it polls");
    let answered = first + Duration::from_secs(1);
    s.stats_answered("sched-a", true, true, &answer(10, None), answered);
    let next = s.next_due().expect("the next poll");
    let (low, high) = (
        answered + INTERVAL * 9 / 10,
        answered + INTERVAL * 11 / 10 + SLOT,
    );
    assert!(
        next >= low && next <= high,
        "{next:?} not in {low:?}..{high:?}"
    );
}

#[test]
fn polls_due_within_one_slot_fall_due_together() {
    let mut s = Signals::new(INTERVAL);
    let now = Instant::now();
    let ids: Vec<String> = (0..200).map(|n| format!("slot-{n}")).collect();
    for id in &ids {
        s.volume_changed(id, Some(&staged(id)), now);
    }
    // 200 first polls over 6 s: at most one wake-up per slot.
    let mut wakeups = 0;
    let mut polled = 0;
    while let Some(at) = s.next_due() {
        wakeups += 1;
        polled += s.due_volumes(at).len();
    }
    assert_eq!(polled, 200);
    let slots = (INTERVAL / 10).as_millis() / SLOT.as_millis() + 1;
    assert!(wakeups as u128 <= slots, "{wakeups} wake-ups");
    for id in &ids {
        s.volume_changed(id, None, now);
    }
}

#[test]
fn a_volume_is_never_polled_twice_at_once() {
    let mut s = Signals::new(INTERVAL);
    let now = Instant::now();
    s.volume_changed("once", Some(&staged("once")), now);
    let due = s.next_due().unwrap();
    assert_eq!(s.due_volumes(due), ["once"]);
    // Its interval changes while the poll is out: nothing is scheduled
    // for it until the poll answers.
    s.set_interval(Duration::from_secs(5), due);
    assert_eq!(s.next_due(), None);
    s.stats_answered("once", true, true, &answer(1, None), due);
    let next = s.next_due().unwrap();
    assert!(
        next <= due + Duration::from_millis(5500) + SLOT,
        "the new interval"
    );
    assert_eq!(s.due_volumes(next), ["once"]);
}

#[test]
fn a_volume_released_and_claimed_again_has_one_poll_due_not_one_per_claim() {
    let mut s = Signals::new(INTERVAL);
    let now = Instant::now();
    // A claim and its release, 200 times over, within a millisecond.
    for _ in 0..200 {
        s.volume_changed("churn", Some(&staged("churn")), now);
        s.volume_changed("churn", Some(&unstaged("churn")), now);
    }
    s.volume_changed("churn", Some(&staged("churn")), now);
    assert_eq!(s.due_volumes(now + INTERVAL), ["churn"]);
    assert_eq!(s.next_due(), None);
    // An answer to a poll of an earlier watch schedules nothing more.
    s.volume_changed("churn", Some(&unstaged("churn")), now);
    s.volume_changed("churn", Some(&staged("churn")), now);
    s.stats_answered("churn", true, true, &answer(1, None), now);
    assert_eq!(s.due_volumes(now + INTERVAL), ["churn"]);
    s.volume_changed("churn", None, now);
}

#[test]
fn a_volume_no_longer_on_the_node_is_forgotten_with_its_gauges() {
    let mut s = Signals::new(INTERVAL);
    let now = Instant::now();
    s.volume_changed("gone-a", Some(&staged("gone-a")), now);
    s.stats_answered(
        "gone-a",
        false,
        true,
        &answer(42, Some((false, "fine"))),
        now,
    );
    assert_eq!(
        gauge(&crate::metrics::VOLUME_STATS_USED, "gone-a"),
        Some(42.0)
    );
    assert_eq!(gauge(&crate::metrics::VOLUME_ABNORMAL, "gone-a"), Some(0.0));
    s.volume_changed("gone-a", Some(&unstaged("gone-a")), now);
    assert!(s.watched().is_empty());
    assert_eq!(gauge(&crate::metrics::VOLUME_STATS_USED, "gone-a"), None);
    assert_eq!(gauge(&crate::metrics::VOLUME_STATS_INODES, "gone-a"), None);
    assert_eq!(gauge(&crate::metrics::VOLUME_ABNORMAL, "gone-a"), None);
    // Its queued poll's answer, come late, changes nothing.
    s.stats_answered("gone-a", true, true, &answer(7, None), now);
    assert_eq!(gauge(&crate::metrics::VOLUME_STATS_USED, "gone-a"), None);
    // Its first poll's place in the schedule is left behind, and costs
    // one wake-up that polls nothing.
    let stale = s.next_due().unwrap();
    assert!(s.due_volumes(stale).is_empty());
    assert_eq!(s.next_due(), None);
}

#[test]
fn a_volume_of_an_unknown_plugin_state_is_polled_again_an_interval_later() {
    let mut s = Signals::new(INTERVAL);
    let now = Instant::now();
    s.volume_changed("skip-a", Some(&staged("skip-a")), now);
    let due = s.next_due().unwrap();
    assert_eq!(s.due_volumes(due), ["skip-a"]);
    s.skipped("skip-a", due);
    let next = s.next_due().unwrap();
    assert!(next >= due + INTERVAL * 9 / 10, "{next:?}");
}

#[test]
fn zero_interval_polls_nothing_but_a_status_still_moves_the_gauges() {
    let mut s = Signals::new(Duration::ZERO);
    let now = Instant::now();
    s.volume_changed("off-a", Some(&staged("off-a")), now);
    s.plugin_seen("off-plugin", now);
    assert_eq!(s.next_due(), None);
    s.stats_answered("off-a", false, true, &answer(5, None), now);
    assert_eq!(
        gauge(&crate::metrics::VOLUME_STATS_USED, "off-a"),
        Some(5.0)
    );
    // Turned on (SIGHUP): each is asked within a tenth of the interval.
    s.set_interval(INTERVAL, now);
    assert!(s
        .next_due()
        .is_some_and(|at| at <= now + INTERVAL / 10 + SLOT));
    s.volume_changed("off-a", None, now);
}

#[test]
fn an_abnormal_condition_is_told_once_and_its_recovery_once() {
    let mut s = Signals::new(INTERVAL);
    let now = Instant::now();
    s.volume_changed("cond-a", Some(&staged("cond-a")), now);
    s.stats_answered("cond-a", false, true, &answer(1, Some((false, "ok"))), now);
    let first = s.health("cond-a").unwrap().clone();
    assert!(!first.abnormal);
    s.stats_answered(
        "cond-a",
        false,
        true,
        &answer(1, Some((true, "disk gone"))),
        now,
    );
    let bad = s.health("cond-a").unwrap().clone();
    assert!(bad.abnormal && bad.message == "disk gone");
    assert!(bad.since >= first.since);
    assert_eq!(gauge(&crate::metrics::VOLUME_ABNORMAL, "cond-a"), Some(1.0));
    // Still abnormal: since stays, the message and the check move.
    s.stats_answered(
        "cond-a",
        false,
        true,
        &answer(1, Some((true, "still gone"))),
        now,
    );
    let still = s.health("cond-a").unwrap().clone();
    assert_eq!(still.since, bad.since);
    assert_eq!(still.message, "still gone");
    s.stats_answered(
        "cond-a",
        false,
        true,
        &answer(1, Some((false, "back"))),
        now,
    );
    assert!(!s.health("cond-a").unwrap().abnormal);
    assert_eq!(gauge(&crate::metrics::VOLUME_ABNORMAL, "cond-a"), Some(0.0));
    // A node without VOLUME_CONDITION: the condition is not read.
    s.stats_answered("cond-a", false, false, &answer(1, Some((true, "x"))), now);
    assert!(!s.health("cond-a").unwrap().abnormal);
    s.volume_changed("cond-a", None, now);
}

#[test]
fn an_answer_with_two_usages_of_a_unit_or_a_negative_figure_is_invalid() {
    let two = VolumeStats {
        usage: vec![
            usage(UsageUnit::Bytes, 1, 1, 0),
            usage(UsageUnit::Bytes, 2, 2, 0),
        ],
        condition: None,
    };
    let err = check(&two).err().unwrap();
    assert!(err.contains("more than one usage in Bytes"), "{err}");
    let negative = VolumeStats {
        usage: vec![usage(UsageUnit::Inodes, 10, -1, 11)],
        condition: None,
    };
    let err = check(&negative).err().unwrap();
    assert!(err.contains("a negative figure"), "{err}");
    // The gauges keep the last good answer, and the poll is counted.
    let mut s = Signals::new(INTERVAL);
    let now = Instant::now();
    s.volume_changed("bad-a", Some(&staged("bad-a")), now);
    s.stats_answered("bad-a", false, true, &answer(3, None), now);
    let invalid = crate::metrics::VOLUME_STATS_POLLS.value(&["sig", "invalid"]);
    s.stats_answered("bad-a", true, true, &Ok(two), now);
    assert_eq!(
        gauge(&crate::metrics::VOLUME_STATS_USED, "bad-a"),
        Some(3.0)
    );
    assert!(crate::metrics::VOLUME_STATS_POLLS.value(&["sig", "invalid"]) >= invalid + 1.0);
    s.volume_changed("bad-a", None, now);
}

#[test]
fn a_long_condition_message_is_cut_at_a_character_boundary() {
    let message = "é".repeat(MAX_MESSAGE); // two bytes each
    let stats = VolumeStats {
        usage: Vec::new(),
        condition: Some(VolumeCondition {
            abnormal: true,
            message,
        }),
    };
    let (_, cut) = check(&stats).ok().unwrap().condition.unwrap();
    assert!(cut.len() <= MAX_MESSAGE + " [cut]".len(), "{}", cut.len());
    assert!(cut.ends_with(" [cut]"));
}

#[test]
fn a_plugin_s_capacity_is_kept_and_a_negative_one_refused() {
    let mut s = Signals::new(INTERVAL);
    let now = Instant::now();
    s.plugin_seen("cap-p", now);
    let due = s.next_due().unwrap();
    assert_eq!(s.due_plugins(due), ["cap-p"]);
    let capacity = Capacity {
        available_capacity: 5 << 30,
        maximum_volume_size: Some(1 << 30),
        minimum_volume_size: None,
    };
    s.capacity_answered("cap-p", Ok(capacity.clone()), due);
    let known = s.capacity("cap-p").unwrap();
    assert_eq!(known.reading.as_ref().unwrap().0, capacity);
    assert_eq!(
        crate::metrics::PLUGIN_CAPACITY.value(&["cap-p"]),
        (5u64 << 30) as f64
    );
    let next = s.next_due().unwrap();
    assert_eq!(s.due_plugins(next), ["cap-p"]);
    let negative = Capacity {
        available_capacity: -1,
        ..capacity.clone()
    };
    s.capacity_answered("cap-p", Ok(negative), next);
    let known = s.capacity("cap-p").unwrap();
    assert_eq!(known.reading.as_ref().unwrap().0, capacity, "kept");
    assert!(known.error.contains("negative"), "{}", known.error);
    // Deregistered: forgotten, its gauges dropped.
    let next = s.next_due().unwrap();
    assert_eq!(s.due_plugins(next), ["cap-p"]);
    s.plugin_skipped("cap-p", true, next);
    assert!(s.capacity("cap-p").is_none());
    let text = crate::metrics::global().render(&[&crate::metrics::PLUGIN_CAPACITY]);
    assert!(!text.contains("plugin=\"cap-p\""), "{text}");
}
