//! Durations and byte sizes as users write them, in Nomad's spelling:
//! `500ms`, `30s`, `5m`, `1h30m`; `1048576`, `512MiB`, `10GiB`, `1GB`.

use std::fmt::{self, Write};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} {:?} (expected {})",
            self.what, self.value, self.expected
        )
    }
}

impl std::error::Error for UnitError {}

const DURATION_HELP: &str = "a number with a unit, like 500ms, 30s, 5m or 1h30m";
const SIZE_HELP: &str = "bytes, or a number with a unit, like 512MiB, 10GiB or 1GB";

/// Parses a Go-style duration made of `<number><unit>` parts (`ns`, `us`,
/// `ms`, `s`, `m`, `h`); fractions are allowed (`1.5s`).
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let err = || UnitError {
        what: "duration",
        value: text.to_string(),
        expected: DURATION_HELP,
    };
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = number.parse().map_err(|_| err())?;
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        let part = Duration::try_from_secs_f64(value * seconds).map_err(|_| err())?;
        total = total.checked_add(part).ok_or_else(err)?;
        rest = tail;
    }
    Ok(total)
}

/// A duration in the form [`parse_duration`]
/// reads back exactly: `1h30m`, `45s`, `500ms`, `1500us`, `0s`.
pub fn format_duration(value: Duration) -> String {
    let nanos = value.subsec_nanos();
    if nanos != 0 {
        let total = value.as_nanos();
        return if nanos % 1_000_000 == 0 {
            format!("{}ms", total / 1_000_000)
        } else if nanos % 1_000 == 0 {
            format!("{}us", total / 1_000)
        } else {
            format!("{total}ns")
        };
    }
    let secs = value.as_secs();
    if secs == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    for (amount, unit) in [(hours, "h"), (minutes, "m"), (seconds, "s")] {
        if amount > 0 {
            let _ = write!(out, "{amount}{unit}");
        }
    }
    out
}

/// Parses a byte size: a plain number of bytes, or a number with a decimal
/// (`KB`, `MB`, `GB`, `TB`) or binary (`KiB`, `MiB`, `GiB`, `TiB`) unit.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let err = || UnitError {
        what: "size",
        value: text.to_string(),
        expected: SIZE_HELP,
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier: u64 = match unit {
        "" | "B" => 1,
        "KB" | "kB" => 1000,
        "MB" => 1000_u64.pow(2),
        "GB" => 1000_u64.pow(3),
        "TB" => 1000_u64.pow(4),
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(err()),
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(multiplier).ok_or_else(err);
    }
    let value: f64 = number.parse().map_err(|_| err())?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(err());
    }
    Ok(bytes.round() as u64)
}

/// A size for people: `1.5 GiB`, `512 B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A time as RFC 3339 in UTC with milliseconds: `2026-11-21T09:30:00.125Z`.
/// Times before the Unix epoch print as the epoch.
pub fn format_timestamp(time: std::time::SystemTime) -> String {
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// One log line as env_logger's default format writes it, without
/// colours: `[2026-11-29T14:52:10.258Z INFO  target] message`, or
/// `[... ERROR] message` for a record without a target.
/// Written to any sink, so that this file (which the fuzz targets include)
/// names no logger crate: the callers hand it env_logger's formatter.
pub fn log_line(out: &mut dyn std::io::Write, record: &log::Record<'_>) -> std::io::Result<()> {
    let time = format_timestamp(std::time::SystemTime::now());
    write!(out, "[{time} {:<5}", record.level())?;
    // A record without a target (gRPC's core, redirected) has none
    // written, as env_logger's own format does.
    if !record.target().is_empty() {
        write!(out, " {}", record.target())?;
    }
    writeln!(out, "] {}", record.args())
}

// Civil dates of the proleptic Gregorian calendar and seconds since the
// Unix epoch, for the timestamps above, the cron search and `job status`.
// No leap seconds, as Unix time has none.

/// A civil day, in seconds.
pub(crate) const SECS_PER_DAY: i64 = 86_400;

/// 0 for Sunday; 1970-01-01 was a Thursday.
pub(crate) fn weekday(days: i64) -> i64 {
    (days + 4).rem_euclid(7)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

pub(crate) fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date of the proleptic Gregorian calendar,
/// counted in 400-year eras of 146,097 days that start on the 1st of March.
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date (year, month, day) `days` after 1970-01-01.
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `YYYY-MM-DDTHH:MM:SSZ` of seconds since the epoch, as `job status`
/// shows a launch.
pub fn format_utc(secs: i64) -> String {
    let (y, mo, d) = civil_from_days(secs.div_euclid(SECS_PER_DAY));
    let s = secs.rem_euclid(SECS_PER_DAY);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_format_as_they_are_written() {
        for (secs, nanos, text) in [
            (5400, 0, "1h30m"),
            (30, 0, "30s"),
            (3661, 0, "1h1m1s"),
            (0, 500_000_000, "500ms"),
            (1, 500_000_000, "1500ms"),
            (0, 1_500, "1500ns"),
            (0, 2_000, "2us"),
            (0, 0, "0s"),
        ] {
            let value = Duration::new(secs, nanos);
            assert_eq!(format_duration(value), text);
            assert_eq!(parse_duration(text), Ok(value), "{text}");
        }
    }

    #[test]
    fn durations_in_nomads_spelling() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_say_what_is_expected() {
        for bad in ["", "30", "s", "5x", "1h30", "-1s", "1..5s", "30 s"] {
            let err = parse_duration(bad).unwrap_err();
            assert_eq!(err.value, bad);
            assert!(err.to_string().contains("like 500ms, 30s"), "{err}");
        }
    }

    #[test]
    fn sizes_with_decimal_and_binary_units() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("10GiB"), Ok(10 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
    }

    #[test]
    fn bad_sizes_are_errors() {
        for bad in ["", "GiB", "10 GiB ", "10XB", "-1", "99999999999TiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_format_for_people() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(10 << 30), "10.0 GiB");
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        use std::time::{Duration, UNIX_EPOCH};
        let at = |ms: u64| format_timestamp(UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(1_795_253_405_125), "2026-11-21T09:30:05.125Z");
        assert_eq!(at(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }
}
