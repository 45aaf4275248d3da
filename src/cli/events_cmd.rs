//! `csi-agent events [-follow] [-json] [-since INDEX] [-topic T]`: the
//! agent's recent events, and with `-follow` the new ones as they happen.
//!
//! The agent keeps the last events in a ring; `-follow` asks for the ones
//! after the last it printed, each call waiting for the next (a long
//! poll). A follower slower than the agent's events by a whole ring is
//! told what it missed and ends with exit code 1, so that it never
//! prints a stream with a silent hole in it.

use std::time::Duration;

use super::args::{self, repeated, switch, value, Flag, UsageError};
use super::json::from_message;
use super::{out, CliError};
use crate::api::client::{resolve_address, AgentClient};
use crate::events::Topic;
use crate::plugin::fingerprint::from_unix_ms;
use crate::proto::agent as api;
use crate::units::format_timestamp;

pub const USAGE: &str = "\
usage: csi-agent events [-follow] [-json] [-since INDEX] [-topic TOPIC]... [-address ADDR]

  The agent's recent events, oldest first: plugin health and fingerprint
  changes, volumes registered, created, expanded, snapshotted and deleted,
  claims asked for, taken, released and failed with each protocol step,
  task events, and cluster node changes.

  -follow        keep printing new events as they happen, until interrupted
  -json          one JSON object a line
  -since INDEX   only the events after INDEX (the first column; each event
                 has the next index, counted from 1 since the agent started)
  -topic TOPIC   only TOPIC's events: plugin, volume, claim, job or node
                 (repeatable, or comma-separated)";

const FLAGS: &[Flag] = &[
    switch("follow"),
    switch("json"),
    value("since"),
    repeated("topic"),
    value("address"),
];

/// How long one call of `-follow` waits for an event before asking again.
const FOLLOW_WAIT: Duration = Duration::from_secs(30);

/// The most events one answer of the agent carries (its bound): an answer
/// this full may have more behind it.
const PAGE: usize = crate::api::EVENTS_MAX_PAGE;

pub fn run(argv: &[String]) -> Result<(), CliError> {
    let args = args::parse(FLAGS, argv)?;
    args.at_most(0)?;
    let mut since = match args.value("since") {
        None => 0,
        Some(text) => text.parse::<u64>().map_err(|_| {
            UsageError::new(format!(
                "-since: {text:?} is not an event index (a whole number)"
            ))
        })?,
    };
    let topics = topics(args.all("topic"))?;
    let follow = args.switch("follow");
    let json = args.switch("json");
    let socket = resolve_address(args.value("address"))?;
    let client = AgentClient::connect(&socket)?;
    loop {
        let wait = if follow { FOLLOW_WAIT } else { Duration::ZERO };
        let resp = client.events(since, &topics, wait)?;
        for event in &resp.events {
            if json {
                out::outln!("{}", from_message(event));
            } else {
                out::outln!("{}", line(event));
            }
        }
        let last_printed = resp.events.last().map_or(since, |e| e.index);
        let more = resp.events.len() >= PAGE;
        since = if more {
            last_printed
        } else {
            resp.last_index.max(last_printed)
        };
        if out::closed() || (!follow && !more) {
            return Ok(());
        }
    }
}

/// `-topic` values, each a topic or a comma-separated list of them.
fn topics(given: &[String]) -> Result<Vec<String>, UsageError> {
    let mut topics = Vec::new();
    for name in given.iter().flat_map(|v| v.split(',')) {
        let topic: Topic = name
            .trim()
            .parse()
            .map_err(|err| UsageError::new(format!("-topic: {err}")))?;
        if !topics.contains(&topic.as_str().to_string()) {
            topics.push(topic.as_str().to_string());
        }
    }
    Ok(topics)
}

/// An event as one line of text: time, index, topic, type, key, message.
fn line(event: &api::Event) -> String {
    let time = format_timestamp(from_unix_ms(event.unix_ms));
    let mut line = format!(
        "{time}  {:>6}  {:<6}  {:<14}  {}",
        event.index, event.topic, event.type_, event.key
    );
    if !event.message.is_empty() {
        line.push_str(": ");
        line.push_str(&event.message);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_may_be_repeated_or_comma_separated_and_are_checked() {
        let given = vec![
            "claim,volume".to_string(),
            "claim".to_string(),
            "job".to_string(),
        ];
        assert_eq!(topics(&given).unwrap(), ["claim", "volume", "job"]);
        let err = topics(&["claims".to_string()]).unwrap_err();
        assert!(
            err.to_string().contains("-topic: unknown topic \"claims\""),
            "{err}"
        );
    }

    #[test]
    fn a_line_has_time_index_topic_type_key_and_message() {
        let event = api::Event {
            index: 42,
            unix_ms: 0,
            topic: "claim".into(),
            type_: "ClaimTaken".into(),
            key: "vol1".into(),
            message: "alloc a1".into(),
            ..Default::default()
        };
        let text = line(&event);
        assert!(text.starts_with("1970-01-01"), "{text}");
        assert!(
            text.contains("    42  claim   ClaimTaken      vol1: alloc a1"),
            "{text}"
        );
    }
}
