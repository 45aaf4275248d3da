//! Samples of durations and their percentiles, and how the table prints
//! numbers.

use std::time::Duration;

/// Durations measured one run each.
#[derive(Clone, Debug, Default)]
pub struct Samples(Vec<Duration>);

impl From<Vec<Duration>> for Samples {
    fn from(samples: Vec<Duration>) -> Samples {
        Samples(samples)
    }
}

impl Samples {
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The nearest-rank percentile `p` (0-100): the smallest sample with at
    /// least `p`% of the samples at or below it.
    pub fn percentile(&self, p: f64) -> Duration {
        assert!(!self.0.is_empty(), "no samples");
        let mut sorted = self.0.clone();
        sorted.sort();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    /// Every sample added up.
    pub fn sum(&self) -> Duration {
        self.0.iter().sum()
    }

    pub fn p50(&self) -> Duration {
        self.percentile(50.0)
    }

    pub fn p99(&self) -> Duration {
        self.percentile(99.0)
    }
}

/// Milliseconds with a precision that suits the size.
pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1e3)
    }
}

/// `a / b` as a ratio, `1.23x`.
pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}
