//! Reading a trace (see [`super`]) into the phases of the calls it
//! covers: the benchmark's anatomy of a claim and of a release. The
//! benchmark adds points of its own to the agent's, on the same clock:
//! `claim`/`claimed` and `release`/`released` around each call.

/// The phases of a call, in the order they happen.
pub const PHASES: [&str; 8] = [
    "control API",
    "loop before the sync",
    "record sync",
    "to the worker",
    "RPCs",
    "host mount",
    "between steps",
    "answer",
];

/// The medians of each phase, and of the whole call, in microseconds.
#[derive(Debug, Default)]
pub struct Phases {
    pub phases: [u64; PHASES.len()],
    pub total: u64,
    pub runs: usize,
}

#[derive(Debug)]
pub struct Point {
    pub at: u64,
    pub label: String,
    pub detail: String,
}

impl Point {
    pub fn parse(line: &str) -> Option<Point> {
        let mut fields = line.splitn(3, ' ');
        Some(Point {
            at: fields.next()?.parse().ok()?,
            label: fields.next()?.to_string(),
            detail: fields.next()?.to_string(),
        })
    }
}

/// The points of each call from `start` to `end`, the first `skip` left
/// out (a warm-up).
pub fn calls<'a>(points: &'a [Point], start: &str, end: &str, skip: usize) -> Vec<&'a [Point]> {
    let mut calls = Vec::new();
    let mut from = None;
    for (i, p) in points.iter().enumerate() {
        if p.label == start {
            from = Some(i);
        } else if p.label == end {
            if let Some(f) = from.take() {
                calls.push(&points[f..=i]);
            }
        }
    }
    calls.into_iter().skip(skip).collect()
}

/// One call's phases, or `None` if a point is missing (the call took
/// another path, e.g. a retry).
fn phases(call: &[Point]) -> Option<([u64; PHASES.len()], u64)> {
    let first = |label: &str| call.iter().find(|p| p.label == label).map(|p| p.at);
    let last = |label: &str| call.iter().rev().find(|p| p.label == label).map(|p| p.at);
    let start = call.first()?.at;
    let end = call.last()?.at;
    let in_loop = first("loop-claim").or_else(|| first("loop-release"))?;
    let sync = first("write-sync")?;
    let synced = call
        .iter()
        .find(|p| p.label == "written" && p.at >= sync)?
        .at;
    let first_step = call
        .iter()
        .find(|p| p.label == "rpc" || p.label == "local")?
        .at;
    let last_step = last("step-done")?;
    let sent = last("api-sent")?;
    let (mut rpcs, mut local) = (0, 0);
    let mut open: Option<&Point> = None;
    for p in call {
        match p.label.as_str() {
            "rpc" | "local" => open = Some(p),
            "step-done" => {
                let began = open.take()?;
                let took = p.at - began.at;
                match began.label.as_str() {
                    "rpc" => rpcs += took,
                    _ => local += took,
                }
            }
            _ => {}
        }
    }
    let job = last_step.checked_sub(first_step)?;
    let phases = [
        (in_loop - start) + (end - sent),
        sync - in_loop,
        synced - sync,
        first_step.checked_sub(synced)?,
        rpcs,
        local,
        job.checked_sub(rpcs + local)?,
        sent.checked_sub(last_step)?,
    ];
    Some((phases, end - start))
}

pub fn medians(calls: &[&[Point]]) -> Phases {
    let all: Vec<_> = calls.iter().filter_map(|c| phases(c)).collect();
    let mut out = Phases {
        runs: all.len(),
        ..Phases::default()
    };
    if all.is_empty() {
        return out;
    }
    let median = |mut v: Vec<u64>| {
        order::sort(&mut v);
        v[(v.len() - 1) / 2]
    };
    for (i, slot) in out.phases.iter_mut().enumerate() {
        *slot = median(all.iter().map(|(p, _)| p[i]).collect());
    }
    out.total = median(all.iter().map(|(_, t)| *t).collect());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(text: &str) -> Vec<Point> {
        text.lines().filter_map(Point::parse).collect()
    }

    #[test]
    fn a_call_s_phases_add_up_to_its_total() {
        let call = points(
            "100 claim -\n\
             300 api-call VolumeClaim\n\
             350 loop-claim -\n\
             450 write-sync -\n\
             650 written -\n\
             700 rpc ControllerPublishVolume\n\
             1700 step-done ControllerPublishVolume\n\
             1750 write -\n\
             1760 written -\n\
             1800 resumed -\n\
             1810 local bind-mount the target\n\
             1900 step-done bind-mount the target\n\
             1950 write -\n\
             1960 written -\n\
             2000 api-sent VolumeClaim\n\
             2200 claimed -\n",
        );
        let (p, total) = phases(&call).unwrap();
        assert_eq!(p, [250 + 200, 100, 200, 50, 1000, 90, 110, 100]);
        assert_eq!(p.iter().sum::<u64>(), total);
        assert_eq!(total, 2100);
    }
}
