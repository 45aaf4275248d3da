//! Exponential backoff with full jitter: the one retry policy of the agent.
//!
//! [`Backoff`] is a policy (base, factor, cap, and optional limits on
//! attempts and total time) and [`Backoff::delay`] is a pure function of the
//! attempt number and a jitter draw, so schedules are testable exactly.
//! [`Schedule`] walks a policy for one operation, with time passed in by the
//! caller and randomness from an injected [`Jitter`]; [`retry`] is the
//! blocking loop used around CSI calls, which retries only what
//! [`crate::csi::Error::is_retryable`] allows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::error::Error;

/// A retry policy. Delays grow as `base * factor^attempt`, capped at `cap`;
/// each actual delay is drawn uniformly from `[0, that ceiling]` ("full
/// jitter"), so that many clients retrying at once spread out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub factor: u32,
    pub cap: Duration,
    /// Total attempts allowed, the first included; `None` is unbounded.
    pub max_attempts: Option<u32>,
    /// Time allowed from the first attempt; `None` is unbounded.
    pub deadline: Option<Duration>,
}

impl Backoff {
    /// Base and cap with factor 2 and no limits.
    pub const fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            factor: 2,
            cap,
            max_attempts: None,
            deadline: None,
        }
    }

    /// Nomad's claim retry: 1 s doubling to 1 min, for at most 24 h.
    pub const CLAIM: Backoff = Backoff {
        base: Duration::from_secs(1),
        factor: 2,
        cap: Duration::from_secs(60),
        max_attempts: None,
        deadline: Some(Duration::from_secs(24 * 3600)),
    };

    pub const fn with_factor(mut self, factor: u32) -> Backoff {
        self.factor = factor;
        self
    }

    pub const fn with_max_attempts(mut self, attempts: u32) -> Backoff {
        self.max_attempts = Some(attempts);
        self
    }

    pub const fn with_deadline(mut self, deadline: Duration) -> Backoff {
        self.deadline = Some(deadline);
        self
    }

    /// The largest delay before retry number `attempt` (0 is the wait after
    /// the first failure): `min(cap, base * factor^attempt)`, without
    /// overflow however large `attempt` is.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let mut delay = self.base;
        for _ in 0..attempt {
            if delay >= self.cap {
                break;
            }
            delay = delay.saturating_mul(self.factor.max(1));
        }
        delay.min(self.cap)
    }

    /// The delay before retry number `attempt`, for a jitter draw `unit` in
    /// `[0, 1)`. Pure: the same inputs give the same delay.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.ceiling(attempt).mul_f64(unit)
    }

    /// A schedule for one operation that started at `start`.
    pub fn schedule<J: Jitter>(&self, start: Instant, jitter: J) -> Schedule<J> {
        Schedule {
            policy: *self,
            start,
            failures: 0,
            jitter,
        }
    }
}

/// A source of jitter draws in `[0, 1)`.
pub trait Jitter {
    fn unit(&mut self) -> f64;
}

/// SplitMix64: a tiny, good-enough generator for jitter; seedable for tests.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn seeded(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// Seeded from the clock, the process id and a per-process counter:
    /// different for every schedule, which is all jitter needs.
    pub fn from_entropy() -> SplitMix64 {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        SplitMix64(
            nanos
                ^ (u64::from(std::process::id()) << 32)
                ^ call.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Jitter for SplitMix64 {
    fn unit(&mut self) -> f64 {
        // 53 random bits make an exact f64 in [0, 1).
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One operation's walk through a [`Backoff`] policy.
#[derive(Clone, Debug)]
pub struct Schedule<J> {
    policy: Backoff,
    start: Instant,
    failures: u32,
    jitter: J,
}

impl<J: Jitter> Schedule<J> {
    /// Records a failure at `now` and returns how long to wait before the
    /// next attempt, or `None` when the attempts or the deadline are used
    /// up. A delay never runs past the deadline.
    pub fn next_delay(&mut self, now: Instant) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        if let Some(max) = self.policy.max_attempts {
            if self.failures >= max {
                return None;
            }
        }
        let delay = self.policy.delay(self.failures - 1, self.jitter.unit());
        match self.policy.deadline {
            None => Some(delay),
            Some(deadline) => {
                let left = deadline.checked_sub(now.saturating_duration_since(self.start))?;
                if left.is_zero() {
                    None
                } else {
                    Some(delay.min(left))
                }
            }
        }
    }

    /// Failures recorded so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// Runs `op` until it succeeds, fails in a way that must not be retried, or
/// the policy gives up; sleeps between attempts. `op` gets the attempt number
/// (0 first). Only errors that [`Error::is_retryable`] allows are retried:
/// terminal and ignorable ones return at once, so the caller decides.
pub fn retry<T>(policy: &Backoff, mut op: impl FnMut(u32) -> Result<T, Error>) -> Result<T, Error> {
    let mut schedule = policy.schedule(Instant::now(), SplitMix64::from_entropy());
    loop {
        let attempt = schedule.failures();
        match op(attempt) {
            Ok(value) => return Ok(value),
            Err(err) if !err.is_retryable() => return Err(err),
            Err(err) => match schedule.next_delay(Instant::now()) {
                None => return Err(err),
                Some(delay) => {
                    log::debug!("{err}; retrying in {delay:?} (attempt {})", attempt + 2);
                    thread::sleep(delay);
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::error::{Code, Rpc};

    const MS: Duration = Duration::from_millis(1);

    /// A jitter source that always draws the same value.
    struct Fixed(f64);
    impl Jitter for Fixed {
        fn unit(&mut self) -> f64 {
            self.0
        }
    }

    #[test]
    fn ceiling_doubles_from_base_up_to_cap() {
        let b = Backoff::new(100 * MS, 1000 * MS);
        let ceilings: Vec<u128> = (0..7).map(|a| b.ceiling(a).as_millis()).collect();
        assert_eq!(ceilings, vec![100, 200, 400, 800, 1000, 1000, 1000]);
    }

    #[test]
    fn ceiling_does_not_overflow_for_huge_attempts() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(60));
        let unbounded = Backoff::new(Duration::from_secs(1), Duration::MAX).with_factor(10);
        assert_eq!(unbounded.ceiling(200), Duration::MAX);
    }

    #[test]
    fn factor_is_configurable() {
        let b = Backoff::new(10 * MS, Duration::from_secs(10)).with_factor(3);
        assert_eq!(b.ceiling(2), 90 * MS);
    }

    #[test]
    fn full_jitter_scales_the_ceiling_by_the_draw() {
        let b = Backoff::new(100 * MS, 1000 * MS);
        assert_eq!(b.delay(2, 0.0), Duration::ZERO);
        assert_eq!(b.delay(2, 0.5), 200 * MS);
        assert_eq!(b.delay(2, 0.25), 100 * MS);
        assert_eq!(b.delay(2, f64::NAN), Duration::ZERO);
        assert_eq!(b.delay(2, 7.0), 400 * MS);
    }

    #[test]
    fn seeded_schedule_is_reproducible_and_within_ceilings() {
        let b = Backoff::new(100 * MS, 1000 * MS);
        let start = Instant::now();
        let run = |seed| {
            let mut s = b.schedule(start, SplitMix64::seeded(seed));
            (0..8)
                .map(|_| s.next_delay(start).unwrap())
                .collect::<Vec<_>>()
        };
        let first = run(42);
        assert_eq!(first, run(42));
        assert_ne!(first, run(43));
        for (attempt, delay) in first.iter().enumerate() {
            assert!(
                *delay <= b.ceiling(attempt as u32),
                "attempt {attempt}: {delay:?}"
            );
        }
    }

    #[test]
    fn splitmix_draws_are_in_the_unit_interval_and_spread() {
        let mut rng = SplitMix64::seeded(7);
        let draws: Vec<f64> = (0..10_000).map(|_| rng.unit()).collect();
        assert!(draws.iter().all(|u| (0.0..1.0).contains(u)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((0.45..0.55).contains(&mean), "mean {mean}");
    }

    #[test]
    fn max_attempts_counts_the_first_attempt() {
        let b = Backoff::new(10 * MS, 100 * MS).with_max_attempts(3);
        let start = Instant::now();
        let mut s = b.schedule(start, Fixed(1.0));
        assert_eq!(s.next_delay(start), Some(10 * MS));
        assert_eq!(s.next_delay(start), Some(20 * MS));
        assert_eq!(s.next_delay(start), None);
    }

    #[test]
    fn deadline_truncates_the_last_delay_then_stops() {
        let b = Backoff::new(Duration::from_secs(4), Duration::from_secs(60))
            .with_deadline(Duration::from_secs(10));
        let start = Instant::now();
        let mut s = b.schedule(start, Fixed(1.0));
        assert_eq!(s.next_delay(start), Some(Duration::from_secs(4)));
        assert_eq!(
            s.next_delay(start + Duration::from_secs(4)),
            Some(Duration::from_secs(6))
        );
        assert_eq!(s.next_delay(start + Duration::from_secs(10)), None);
        assert_eq!(s.next_delay(start + Duration::from_secs(11)), None);
    }

    #[test]
    fn retry_stops_at_once_on_terminal_errors() {
        let b = Backoff::new(MS, MS).with_max_attempts(5);
        let mut calls = 0;
        let result: Result<(), _> = retry(&b, |_| {
            calls += 1;
            Err(Error::new(
                Rpc::NodeStageVolume,
                Code::InvalidArgument,
                "bad",
            ))
        });
        assert_eq!(result.unwrap_err().code, Code::InvalidArgument);
        assert_eq!(calls, 1);
    }

    #[test]
    fn retry_resends_uncertain_errors_until_success() {
        let b = Backoff::new(MS, MS).with_max_attempts(5);
        let mut attempts = Vec::new();
        let result = retry(&b, |attempt| {
            attempts.push(attempt);
            if attempt < 2 {
                Err(Error::new(Rpc::NodeStageVolume, Code::Unavailable, "down"))
            } else {
                Ok("staged")
            }
        });
        assert_eq!(result, Ok("staged"));
        assert_eq!(attempts, vec![0, 1, 2]);
    }

    #[test]
    fn retry_gives_up_after_max_attempts_with_the_last_error() {
        let b = Backoff::new(MS, MS).with_max_attempts(3);
        let mut calls = 0;
        let result: Result<(), _> = retry(&b, |_| {
            calls += 1;
            Err(Error::new(
                Rpc::NodePublishVolume,
                Code::Aborted,
                format!("busy {calls}"),
            ))
        });
        assert_eq!(result.unwrap_err().message, "busy 3");
        assert_eq!(calls, 3);
    }

    #[test]
    fn retry_never_resends_a_probe() {
        let b = Backoff::new(MS, MS).with_max_attempts(5);
        let mut calls = 0;
        let result: Result<(), _> = retry(&b, |_| {
            calls += 1;
            Err(Error::new(Rpc::Probe, Code::Unavailable, ""))
        });
        assert!(result.is_err());
        assert_eq!(calls, 1);
    }
}
