//! Cron expressions as Nomad's `periodic` block reads them (Nomad parses
//! them with its fork of `gorhill/cronexpr`), and the search for the next
//! time one matches.
//!
//! The fields, by how many are given:
//!
//! | fields | meaning |
//! |---|---|
//! | 5 | minute, hour, day of month, month, day of week |
//! | 6 | the five, then the year |
//! | 7 | the second, the five, then the year |
//!
//! So a six-field expression has a year last, not seconds first:
//! `*/15 * * * * *` is every 15 minutes; seconds need seven fields.
//! An entry is `*` or `?` (every value), a value, a range `a-b`, or a step
//! `*/n`, `a/n` (from `a` to the field's end) or `a-b/n`; entries are joined
//! by commas. Months and days of the week take their names (`jan`,
//! `january`, `mon`, `monday`, any case); Sunday is 0 or 7. The day of the
//! month also takes `L` (its last day), `LW` (its last weekday) and `nW`
//! (the weekday nearest day `n`, within the month); the day of the week
//! takes `nL` (the month's last such day) and `n#k` (its `k`th). When both
//! day fields are restricted, a day matching either is taken, as cron does.
//! `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily` and `@hourly`
//! stand for their expressions.
//!
//! Where csi-agent is stricter than cronexpr, it refuses rather than guess:
//! an expression of more than seven fields (cronexpr drops the rest), a
//! range whose start is past its end (cronexpr makes it match nothing, or
//! every day of the week), and `@midnight` (cronexpr does not know it and
//! fails on it as a missing field; `@daily` is the same time).
//!
//! Times are seconds since the Unix epoch. [`CronExpr::next_after`]
//! matches UTC's civil dates and times; [`CronExpr::next_after_in`] those
//! of a zone's local time (`zone.rs`), turning each matching local time
//! into the instants that have it. The search is
//! bounded by [`MAX_SEARCH_YEARS`]: an expression no date matches (the
//! 30th of February) ends with `None` rather than searching for ever.
//! cronexpr searches the rest of this year and the next and ignores the year
//! field there; here the year field is honoured, and eight years reach the
//! next 29th of February from any date.

use std::fmt;

pub use crate::units::format_utc;
use crate::units::{civil_from_days, days_from_civil, days_in_month, weekday, SECS_PER_DAY};

/// How many years after the time searched from [`CronExpr::next_after`]
/// looks for a match before it gives up: enough to reach the next 29th of
/// February from any date (at most eight years away, as from 1896 to
/// 1904), few enough that a search that finds nothing ends at once
/// (about 3,000 days, each looked at once).
pub const MAX_SEARCH_YEARS: i64 = 8;

/// The longest expression read, in bytes: a list of every minute written
/// out is under 200, so a longer text is not a cron expression.
pub const MAX_EXPRESSION_LEN: usize = 1024;

/// A cron expression, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpr {
    text: String,
    /// Bit `n` set: second `n` matches.
    seconds: u64,
    minutes: u64,
    hours: u32,
    /// Bits 1 to 31.
    days: u32,
    /// The day-of-month field is not `*`.
    days_restricted: bool,
    last_day: bool,
    last_workday: bool,
    /// `nW`: bits 1 to 31.
    workdays: u32,
    /// Bits 1 to 12.
    months: u16,
    /// Bits 0 (Sunday) to 6.
    weekdays: u8,
    weekdays_restricted: bool,
    /// `nL`: the last such weekday of the month, bits 0 to 6.
    last_weekdays: u8,
    /// `n#k`: (weekday, k).
    nth_weekdays: Vec<(u8, u8)>,
    /// The years that match (1970 to 2099); every year when `None`.
    years: Option<Vec<i64>>,
}

/// Why an expression was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronError {
    pub expression: String,
    pub reason: String,
}

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid cron expression {:?}: {}",
            self.expression, self.reason
        )
    }
}

impl std::error::Error for CronError {}

/// One field's rules.
#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    min: i64,
    max: i64,
    names: &'static [(&'static str, i64)],
}

const MONTH_NAMES: &[(&str, i64)] = &[
    ("january", 1),
    ("february", 2),
    ("march", 3),
    ("april", 4),
    ("may", 5),
    ("june", 6),
    ("july", 7),
    ("august", 8),
    ("september", 9),
    ("october", 10),
    ("november", 11),
    ("december", 12),
];

const DAY_NAMES: &[(&str, i64)] = &[
    ("sunday", 0),
    ("monday", 1),
    ("tuesday", 2),
    ("wednesday", 3),
    ("thursday", 4),
    ("friday", 5),
    ("saturday", 6),
];

const SECOND: Field = Field {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
};
const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: Field = Field {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: MONTH_NAMES,
};
/// 7 is Sunday too; values are folded to 0..=6 after ranges are expanded.
const DAY_OF_WEEK: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: DAY_NAMES,
};
const YEAR: Field = Field {
    name: "year",
    min: 1970,
    max: 2099,
    names: &[],
};

/// The aliases cronexpr knows, as seven fields.
const ALIASES: &[(&str, &str)] = &[
    ("@yearly", "0 0 0 1 1 * *"),
    ("@annually", "0 0 0 1 1 * *"),
    ("@monthly", "0 0 0 1 * * *"),
    ("@weekly", "0 0 0 * * 0 *"),
    ("@daily", "0 0 0 * * * *"),
    ("@hourly", "0 0 * * * * *"),
];

/// One comma-separated entry of a field.
enum Entry {
    /// `*` or `?`.
    All,
    /// The values of a value, range or step.
    Values(Vec<i64>),
    /// Something only a day field reads (`L`, `15W`, `5#3`): its text, in
    /// lower case.
    Special(String),
}

impl CronExpr {
    /// Parses `text` as Nomad's `periodic { cron }` does.
    pub fn parse(text: &str) -> Result<CronExpr, CronError> {
        let fail = |reason: String| CronError {
            expression: text.to_string(),
            reason,
        };
        if text.len() > MAX_EXPRESSION_LEN {
            return Err(fail(format!(
                "longer than {MAX_EXPRESSION_LEN} bytes (MAX_EXPRESSION_LEN)"
            )));
        }
        let trimmed = text.trim();
        let expanded = match ALIASES.iter().find(|(alias, _)| *alias == trimmed) {
            Some((_, fields)) => *fields,
            None if trimmed.starts_with('@') => {
                let known: Vec<&str> = ALIASES.iter().map(|(a, _)| *a).collect();
                let hint = if trimmed == "@midnight" {
                    " (Nomad's cron parser does not know it; @daily is the same time)"
                } else {
                    ""
                };
                return Err(fail(format!(
                    "{trimmed} is not a known alias{hint}; known: {}",
                    known.join(", ")
                )));
            }
            None => trimmed,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() < 5 {
            return Err(fail(format!(
                "{} fields; a cron expression has 5 (minute hour day-of-month month day-of-week), 6 (a year last) or 7 (a second first, a year last)",
                fields.len()
            )));
        }
        if fields.len() > 7 {
            return Err(fail(format!(
                "{} fields; at most 7 (second minute hour day-of-month month day-of-week year)",
                fields.len()
            )));
        }
        let (second, rest) = if fields.len() == 7 {
            (Some(fields[0]), &fields[1..])
        } else {
            (None, &fields[..])
        };
        let mut expr = CronExpr {
            text: text.to_string(),
            seconds: 1,
            minutes: 0,
            hours: 0,
            days: 0,
            days_restricted: true,
            last_day: false,
            last_workday: false,
            workdays: 0,
            months: 0,
            weekdays: 0,
            weekdays_restricted: true,
            last_weekdays: 0,
            nth_weekdays: Vec::new(),
            years: None,
        };
        if let Some(second) = second {
            expr.seconds = plain_field(second, SECOND).map_err(fail)?;
        }
        expr.minutes = plain_field(rest[0], MINUTE).map_err(fail)?;
        expr.hours = plain_field(rest[1], HOUR).map_err(fail)? as u32;
        expr.day_of_month(rest[2]).map_err(fail)?;
        expr.months = plain_field(rest[3], MONTH).map_err(fail)? as u16;
        expr.day_of_week(rest[4]).map_err(fail)?;
        if let Some(year) = rest.get(5) {
            let entries = entries(year, YEAR).map_err(fail)?;
            if !entries.iter().any(|e| matches!(e, Entry::All)) {
                let mut years = Vec::new();
                for entry in entries {
                    match entry {
                        Entry::Values(values) => years.extend(values),
                        Entry::All => {}
                        Entry::Special(text) => return Err(fail(syntax(YEAR, &text))),
                    }
                }
                order::sort(&mut years);
                years.dedup();
                expr.years = Some(years);
            }
        }
        Ok(expr)
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn day_of_month(&mut self, text: &str) -> Result<(), String> {
        for entry in entries(text, DAY_OF_MONTH)? {
            match entry {
                Entry::All => self.days_restricted = false,
                Entry::Values(values) => {
                    for v in values {
                        self.days |= 1 << v;
                    }
                }
                Entry::Special(s) if s == "l" => self.last_day = true,
                Entry::Special(s) if s == "lw" => self.last_workday = true,
                Entry::Special(s) => {
                    let day = s
                        .strip_suffix('w')
                        .and_then(|n| number(n, DAY_OF_MONTH).ok())
                        .ok_or_else(|| syntax(DAY_OF_MONTH, &s))?;
                    self.workdays |= 1 << day;
                }
            }
        }
        Ok(())
    }

    fn day_of_week(&mut self, text: &str) -> Result<(), String> {
        for entry in entries(text, DAY_OF_WEEK)? {
            match entry {
                Entry::All => self.weekdays_restricted = false,
                Entry::Values(values) => {
                    for v in values {
                        self.weekdays |= 1 << (v % 7);
                    }
                }
                Entry::Special(s) => {
                    if let Some(day) = s.strip_suffix('l') {
                        let day = value(day, DAY_OF_WEEK).map_err(|_| syntax(DAY_OF_WEEK, &s))?;
                        self.last_weekdays |= 1 << (day % 7);
                    } else if let Some((day, k)) = s.split_once('#') {
                        let day = value(day, DAY_OF_WEEK).map_err(|_| syntax(DAY_OF_WEEK, &s))?;
                        let k: u8 = match k {
                            "1" | "2" | "3" | "4" | "5" => k.parse().unwrap_or(1),
                            _ => {
                                return Err(format!(
                                    "day-of-week field: {s:?}: the week after # is 1 to 5"
                                ))
                            }
                        };
                        self.nth_weekdays.push(((day % 7) as u8, k));
                    } else {
                        return Err(syntax(DAY_OF_WEEK, &s));
                    }
                }
            }
        }
        Ok(())
    }

    /// The first time after `after` (seconds since the epoch, UTC) that
    /// matches, or `None` if none does within [`MAX_SEARCH_YEARS`].
    pub fn next_after(&self, after: i64) -> Option<i64> {
        let start = after.checked_add(1)?;
        let first_day = start.div_euclid(SECS_PER_DAY);
        let mut from_second = start.rem_euclid(SECS_PER_DAY);
        let (start_year, _, _) = civil_from_days(first_day);
        let last_year = start_year + MAX_SEARCH_YEARS;
        let mut day = first_day;
        loop {
            let (year, month, dom) = civil_from_days(day);
            if year > last_year || year > YEAR.max {
                return None;
            }
            if self.date_matches(year, month, dom, day) {
                if let Some(second) = self.time_from(from_second) {
                    return Some(day * SECS_PER_DAY + second);
                }
            }
            day += 1;
            from_second = 0;
        }
    }

    /// The first time after `after` (seconds since the epoch) that matches
    /// in `zone`'s local time, or `None` within [`MAX_SEARCH_YEARS`].
    ///
    /// Local dates and times are matched; each local time is then the
    /// instants whose offset makes it that time. A local time that a
    /// change to summer time skips has none, and is skipped, as cronexpr
    /// skips it; one that the change back repeats has two, and both match,
    /// as in cronexpr.
    pub fn next_after_in(&self, after: i64, zone: &super::zone::Zone) -> Option<i64> {
        if zone.is_utc() {
            return self.next_after(after);
        }
        let offsets = zone.offsets();
        let (low, high) = (*offsets.first()?, *offsets.last()?);
        // The local day of the earliest instant after `after` may be the
        // one before `after`'s own, with the largest offset gone.
        let first_day = (after + low).div_euclid(SECS_PER_DAY) - 1;
        let (start_year, _, _) = civil_from_days(first_day);
        let mut best: Option<i64> = None;
        for day in first_day.. {
            let (year, month, dom) = civil_from_days(day);
            if year > start_year + MAX_SEARCH_YEARS || year > YEAR.max {
                return best;
            }
            // No later day holds an earlier instant.
            if best.is_some_and(|b| day * SECS_PER_DAY - high > b) {
                return best;
            }
            if !self.date_matches(year, month, dom, day) {
                continue;
            }
            for second in self.seconds_of_day() {
                let local = day * SECS_PER_DAY + second;
                if best.is_some_and(|b| local - high > b) {
                    break;
                }
                for &offset in &offsets {
                    let utc = local - offset;
                    if utc > after
                        && zone.offset_at(utc) == offset
                        && best.map_or(true, |b| utc < b)
                    {
                        best = Some(utc);
                    }
                }
            }
        }
        best
    }

    /// Every matching second of a day, in order.
    fn seconds_of_day(&self) -> impl Iterator<Item = i64> + '_ {
        next_bits(u64::from(self.hours), 0, 23).flat_map(move |h| {
            next_bits(self.minutes, 0, 59).flat_map(move |m| {
                next_bits(self.seconds, 0, 59).map(move |s| h * 3600 + m * 60 + s)
            })
        })
    }

    /// The first matching second of a day at or after `from`.
    fn time_from(&self, from: i64) -> Option<i64> {
        let (h0, m0, s0) = (from / 3600, from / 60 % 60, from % 60);
        for h in next_bits(u64::from(self.hours), h0, 23) {
            let m_start = if h == h0 { m0 } else { 0 };
            for m in next_bits(self.minutes, m_start, 59) {
                let s_start = if h == h0 && m == m0 { s0 } else { 0 };
                if let Some(s) = next_bits(self.seconds, s_start, 59).next() {
                    return Some(h * 3600 + m * 60 + s);
                }
            }
        }
        None
    }

    fn date_matches(&self, year: i64, month: i64, dom: i64, days: i64) -> bool {
        if self.months & (1 << month) == 0 {
            return false;
        }
        if let Some(years) = &self.years {
            if years.binary_search(&year).is_err() {
                return false;
            }
        }
        if !self.days_restricted && !self.weekdays_restricted {
            return true;
        }
        (self.days_restricted && self.day_of_month_matches(year, month, dom))
            || (self.weekdays_restricted && self.day_of_week_matches(year, month, dom, days))
    }

    fn day_of_month_matches(&self, year: i64, month: i64, dom: i64) -> bool {
        let last = days_in_month(year, month);
        if self.days & (1 << dom) != 0 {
            return true;
        }
        if self.last_day && dom == last {
            return true;
        }
        if self.last_workday && dom == nearest_workday(year, month, last, last) {
            return true;
        }
        (1..=last)
            .filter(|n| self.workdays & (1 << n) != 0)
            .any(|n| nearest_workday(year, month, n, last) == dom)
    }

    fn day_of_week_matches(&self, year: i64, month: i64, dom: i64, days: i64) -> bool {
        let weekday = weekday(days);
        if self.weekdays & (1 << weekday) != 0 {
            return true;
        }
        if self.last_weekdays & (1 << weekday) != 0 && dom + 7 > days_in_month(year, month) {
            return true;
        }
        let week = ((dom - 1) / 7 + 1) as u8;
        self.nth_weekdays.contains(&(weekday as u8, week))
    }
}

/// The set bits of `mask` from `from` to `max`, in order.
fn next_bits(mask: u64, from: i64, max: i64) -> impl Iterator<Item = i64> {
    (from..=max).filter(move |b| mask & (1 << b) != 0)
}

/// A field of values only (second, minute, hour, month) as a bit mask.
fn plain_field(text: &str, field: Field) -> Result<u64, String> {
    let mut mask = 0u64;
    for entry in entries(text, field)? {
        match entry {
            Entry::All => {
                for v in field.min..=field.max {
                    mask |= 1 << v;
                }
            }
            Entry::Values(values) => {
                for v in values {
                    mask |= 1 << v;
                }
            }
            Entry::Special(s) => return Err(syntax(field, &s)),
        }
    }
    Ok(mask)
}

fn syntax(field: Field, entry: &str) -> String {
    let extra = match field.name {
        "day-of-month" => ", L, LW or nW",
        "day-of-week" => ", nL or n#k",
        _ => "",
    };
    format!(
        "{} field: {entry:?} is not *, ?, a value ({} to {}{}), a range a-b or a step */n, a/n, a-b/n{extra}",
        field.name,
        field.min,
        field.max,
        if field.names.is_empty() { "" } else { " or a name" }
    )
}

/// The comma-separated entries of one field.
fn entries(text: &str, field: Field) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for raw in text.split(',') {
        if raw.is_empty() {
            return Err(format!("{} field: {text:?} has an empty entry", field.name));
        }
        let entry = raw.to_ascii_lowercase();
        out.push(parse_entry(&entry, field)?);
    }
    Ok(out)
}

fn parse_entry(entry: &str, field: Field) -> Result<Entry, String> {
    if entry == "*" || entry == "?" {
        return Ok(Entry::All);
    }
    let (range, step) = match entry.split_once('/') {
        Some((range, step)) => {
            let step = match step.parse::<i64>() {
                Ok(n) if step.bytes().all(|b| b.is_ascii_digit()) && n >= 1 && n <= field.max => n,
                _ => {
                    return Err(format!(
                        "{} field: {entry:?}: the step after / is 1 to {}",
                        field.name, field.max
                    ))
                }
            };
            (range, Some(step))
        }
        None => (entry, None),
    };
    let (first, last) = if range == "*" && step.is_some() {
        (field.min, field.max)
    } else if let Some((a, b)) = range.split_once('-') {
        let first = value(a, field).map_err(|_| syntax(field, entry))?;
        let mut last = value(b, field).map_err(|_| syntax(field, entry))?;
        // Sunday named as a range's end is its last day, 7.
        if field.name == DAY_OF_WEEK.name && last == 0 && first > 0 {
            last = 7;
        }
        if first > last {
            return Err(format!(
                "{} field: range {entry:?} starts after it ends",
                field.name
            ));
        }
        (first, last)
    } else {
        match value(range, field) {
            Ok(v) if step.is_some() => (v, field.max),
            Ok(v) => (v, v),
            Err(()) if step.is_none() => return Ok(Entry::Special(entry.to_string())),
            Err(()) => return Err(syntax(field, entry)),
        }
    };
    let step = step.unwrap_or(1);
    Ok(Entry::Values(
        (first..=last).step_by(step as usize).collect(),
    ))
}

/// A value of `field`: a number (with at most one leading zero for the
/// two-digit fields) or a name, full or its first three letters.
fn value(text: &str, field: Field) -> Result<i64, ()> {
    if let Some(v) = field
        .names
        .iter()
        .find(|(name, _)| text == *name || (text.len() == 3 && name.starts_with(text)))
        .map(|(_, v)| *v)
    {
        return Ok(v);
    }
    number(text, field)
}

fn number(text: &str, field: Field) -> Result<i64, ()> {
    let digits = if field.max >= 1000 { 4 } else { 2 };
    if text.is_empty() || text.len() > digits || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(());
    }
    let v: i64 = text.parse().map_err(|_| ())?;
    if v < field.min || v > field.max {
        return Err(());
    }
    Ok(v)
}

/// The weekday nearest to day `n` of the month, within the month
/// (cronexpr's rule: a Saturday moves to the Friday before, or to the
/// Monday after when it is the 1st; a Sunday to the Monday after, or to
/// the Friday before when it is the last day).
fn nearest_workday(year: i64, month: i64, n: i64, last: i64) -> i64 {
    match weekday(days_from_civil(year, month, n)) {
        6 if n > 1 => n - 1,
        6 => n + 2,
        0 if n < last => n + 1,
        0 => n - 2,
        _ => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds since the epoch of a UTC date and time.
    fn at(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> i64 {
        days_from_civil(y, mo, d) * SECS_PER_DAY + h * 3600 + mi * 60 + s
    }

    fn next(expr: &str, after: i64) -> Option<String> {
        CronExpr::parse(expr)
            .unwrap()
            .next_after(after)
            .map(format_utc)
    }

    fn refused(expr: &str) -> String {
        CronExpr::parse(expr).unwrap_err().to_string()
    }

    #[test]
    fn civil_dates_round_trip() {
        for days in [
            -800_000, -1, 0, 1, 59, 10_956, 11_016, 19_782, 47_482, 2_932_896,
        ] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(weekday(0), 4);
        assert_eq!(
            format_utc(at(2026, 11, 28, 5, 4, 3)),
            "2026-11-28T05:04:03Z"
        );
    }

    #[test]
    fn five_fields_are_minute_to_day_of_week() {
        let from = at(2026, 11, 28, 5, 4, 3);
        assert_eq!(next("0 3 * * *", from).unwrap(), "2026-11-29T03:00:00Z");
        assert_eq!(next("* * * * *", from).unwrap(), "2026-11-28T05:05:00Z");
        assert_eq!(next("*/15 * * * *", from).unwrap(), "2026-11-28T05:15:00Z");
        // A matching time is after, never at, the time searched from.
        let three = at(2026, 11, 29, 3, 0, 0);
        assert_eq!(next("0 3 * * *", three).unwrap(), "2026-11-30T03:00:00Z");
    }

    #[test]
    fn six_fields_end_with_a_year_and_seven_start_with_a_second() {
        let from = at(2026, 11, 28, 5, 4, 3);
        // Nomad's documented `*/15 * * * * *` is every 15 minutes.
        assert_eq!(
            next("*/15 * * * * *", from).unwrap(),
            "2026-11-28T05:15:00Z"
        );
        assert_eq!(
            next("0 0 1 1 * 2028", from).unwrap(),
            "2028-01-01T00:00:00Z"
        );
        assert_eq!(next("* * * * * * *", from).unwrap(), "2026-11-28T05:04:04Z");
        assert_eq!(
            next("*/10 * * * * * *", from).unwrap(),
            "2026-11-28T05:04:10Z"
        );
        assert_eq!(
            next("30 0 12 * * * *", from).unwrap(),
            "2026-11-28T12:00:30Z"
        );
        assert_eq!(next("0 0 0 1 1 * 2025", from), None);
    }

    #[test]
    fn ranges_steps_lists_and_names() {
        let from = at(2026, 11, 28, 5, 4, 3); // a Saturday
        assert_eq!(
            next("0 9-17/4 * * *", from).unwrap(),
            "2026-11-28T09:00:00Z"
        );
        assert_eq!(next("10/20 * * * *", from).unwrap(), "2026-11-28T05:10:00Z");
        assert_eq!(next("0 1,22 * * *", from).unwrap(), "2026-11-28T22:00:00Z");
        assert_eq!(
            next("0 0 * * MON-fri", from).unwrap(),
            "2026-11-30T00:00:00Z"
        );
        assert_eq!(next("0 0 * JAN *", from).unwrap(), "2027-01-01T00:00:00Z");
        assert_eq!(
            next("0 0 * february *", from).unwrap(),
            "2027-02-01T00:00:00Z"
        );
        assert_eq!(next("0 0 * * 7", from).unwrap(), "2026-11-29T00:00:00Z");
        assert_eq!(
            next("0 0 * * fri-sun", from).unwrap(),
            "2026-11-29T00:00:00Z"
        );
        assert_eq!(next("0 0 * * 5-7", from).unwrap(), "2026-11-29T00:00:00Z");
        assert_eq!(next("05 01 * * ?", from).unwrap(), "2026-11-29T01:05:00Z");
    }

    #[test]
    fn both_day_fields_restricted_match_either() {
        // The 1st, or a Monday: Monday the 30th comes first.
        let from = at(2026, 11, 28, 5, 4, 3);
        assert_eq!(next("0 0 1 * mon", from).unwrap(), "2026-11-30T00:00:00Z");
        assert_eq!(next("0 0 1 * *", from).unwrap(), "2026-12-01T00:00:00Z");
    }

    #[test]
    fn month_ends_and_leap_years() {
        let from = at(2026, 11, 28, 5, 4, 3);
        // The 31st skips the months that have none.
        assert_eq!(next("0 0 31 * *", from).unwrap(), "2026-12-31T00:00:00Z");
        let after_jan = at(2027, 1, 31, 1, 0, 0);
        assert_eq!(
            next("0 0 31 * *", after_jan).unwrap(),
            "2027-03-31T00:00:00Z"
        );
        assert_eq!(next("0 0 29 2 *", from).unwrap(), "2028-02-29T00:00:00Z");
        // 2100 is not a leap year, and is past the year field's range.
        assert_eq!(next("0 0 29 2 *", at(2096, 3, 1, 0, 0, 0)), None);
        assert_eq!(next("0 0 L * *", from).unwrap(), "2026-11-30T00:00:00Z");
        assert_eq!(next("0 0 L 2 *", from).unwrap(), "2027-02-28T00:00:00Z");
        // Year's end rolls over.
        let eve = at(2026, 12, 31, 23, 59, 59);
        assert_eq!(next("* * * * *", eve).unwrap(), "2027-01-01T00:00:00Z");
    }

    #[test]
    fn an_impossible_date_ends_the_search() {
        let from = at(2026, 11, 28, 5, 4, 3);
        assert_eq!(next("0 0 30 2 *", from), None);
        assert_eq!(next("0 0 31 4,6,9,11 *", from), None);
        assert_eq!(next("0 0 0 1 1 * 2099", at(2099, 6, 1, 0, 0, 0)), None);
    }

    #[test]
    fn weekday_forms_l_w_and_hash() {
        let from = at(2026, 11, 1, 0, 0, 0); // a Sunday
                                             // The last Friday of November 2026 is the 27th.
        assert_eq!(next("0 0 * * 5L", from).unwrap(), "2026-11-27T00:00:00Z");
        // Its second Tuesday is the 10th.
        assert_eq!(next("0 0 * * 2#2", from).unwrap(), "2026-11-10T00:00:00Z");
        // The 1st of November 2026 is a Sunday: its weekday is the 2nd.
        let before = at(2026, 10, 31, 23, 0, 0);
        assert_eq!(next("0 0 1W * *", before).unwrap(), "2026-11-02T00:00:00Z");
        // The 1st of August 2026 is a Saturday: its weekday is the 3rd.
        assert_eq!(next("0 0 1W 8 *", from).unwrap(), "2027-08-02T00:00:00Z");
        // The last weekday of January 2027 (the 31st is a Sunday) is the 29th.
        assert_eq!(next("0 0 LW 1 *", from).unwrap(), "2027-01-29T00:00:00Z");
    }

    #[test]
    fn aliases_are_cronexprs() {
        let from = at(2026, 11, 28, 5, 4, 3);
        assert_eq!(next("@daily", from).unwrap(), "2026-11-29T00:00:00Z");
        assert_eq!(next("@hourly", from).unwrap(), "2026-11-28T06:00:00Z");
        assert_eq!(next("@weekly", from).unwrap(), "2026-11-29T00:00:00Z");
        assert_eq!(next("@monthly", from).unwrap(), "2026-12-01T00:00:00Z");
        assert_eq!(next("@yearly", from).unwrap(), "2027-01-01T00:00:00Z");
        assert_eq!(next("@annually", from).unwrap(), "2027-01-01T00:00:00Z");
        assert!(refused("@midnight").contains("@daily is the same time"));
        assert!(refused("@often").contains("not a known alias"));
    }

    #[test]
    fn invalid_fields_are_named() {
        assert!(refused("60 * * * *").contains("minute field: \"60\""));
        assert!(refused("* 24 * * *").contains("hour field"));
        assert!(refused("* * 0 * *").contains("day-of-month field"));
        assert!(refused("* * * 13 *").contains("month field"));
        assert!(refused("* * * foo *").contains("month field: \"foo\""));
        assert!(refused("* * * * 8").contains("day-of-week field"));
        assert!(refused("* * * * * 1969").contains("year field"));
        assert!(refused("61 * * * * * *").contains("second field"));
        assert!(refused("*/0 * * * *").contains("the step after / is 1 to 59"));
        assert!(refused("*/60 * * * *").contains("the step after / is 1 to 59"));
        assert!(refused("30-10 * * * *").contains("starts after it ends"));
        assert!(refused("1,,2 * * * *").contains("empty entry"));
        assert!(refused("* * * * 1#6").contains("the week after # is 1 to 5"));
        assert!(refused("* * * *").contains("4 fields"));
        assert!(refused("* * * * * * * *").contains("at most 7"));
        assert!(refused("* L * * *").contains("hour field"));
        let long = "1,".repeat(MAX_EXPRESSION_LEN) + "1 * * * *";
        assert!(refused(&long).contains("MAX_EXPRESSION_LEN"));
    }

    #[test]
    fn a_zone_s_local_time_is_matched_across_its_summer_time() {
        let berlin = crate::spec::zone::Zone::load("Europe/Berlin").unwrap();
        let next = |expr: &str, after: i64| {
            CronExpr::parse(expr)
                .unwrap()
                .next_after_in(after, &berlin)
                .map(format_utc)
        };
        // 03:00 in Berlin is 02:00Z in winter, 01:00Z in summer.
        let jan = at(2026, 1, 15, 12, 0, 0);
        assert_eq!(next("0 3 * * *", jan).unwrap(), "2026-01-16T02:00:00Z");
        let jul = at(2026, 7, 15, 12, 0, 0);
        assert_eq!(next("0 3 * * *", jul).unwrap(), "2026-07-16T01:00:00Z");
        // 02:30 does not exist on 2026-03-29: that day is skipped.
        let before_spring = at(2026, 3, 28, 12, 0, 0);
        assert_eq!(
            next("30 2 * * *", before_spring).unwrap(),
            "2026-03-30T00:30:00Z"
        );
        // 02:30 happens twice on 2026-10-25, in summer time and then in
        // winter time.
        let before_autumn = at(2026, 10, 24, 12, 0, 0);
        let first = next("30 2 * * *", before_autumn).unwrap();
        assert_eq!(first, "2026-10-25T00:30:00Z");
        let first_at = at(2026, 10, 25, 0, 30, 0);
        assert_eq!(
            next("30 2 * * *", first_at).unwrap(),
            "2026-10-25T01:30:00Z"
        );
        let second_at = at(2026, 10, 25, 1, 30, 0);
        assert_eq!(
            next("30 2 * * *", second_at).unwrap(),
            "2026-10-26T01:30:00Z"
        );
        // Midnight of the month's first day, in local time.
        assert_eq!(next("@monthly", jul).unwrap(), "2026-07-31T22:00:00Z");
        // Every second goes on through the change.
        let change = at(2026, 3, 29, 0, 59, 59);
        assert_eq!(
            next("* * * * * * *", change).unwrap(),
            "2026-03-29T01:00:00Z"
        );
        // An impossible date still ends.
        assert_eq!(next("0 0 30 2 *", jan), None);
    }

    #[test]
    fn the_search_is_bounded_by_max_search_years() {
        // The 29th of February 2096 is seven years and some after 2089.
        let from = at(2089, 3, 1, 0, 0, 0);
        assert_eq!(next("0 0 29 2 *", from).unwrap(), "2092-02-29T00:00:00Z");
        let expr = CronExpr::parse("0 0 1 1 * 2040").unwrap();
        let start = at(2026, 1, 2, 0, 0, 0);
        assert_eq!(
            expr.next_after(start),
            None,
            "2040 is past MAX_SEARCH_YEARS"
        );
        let near = at(2040 - MAX_SEARCH_YEARS, 1, 2, 0, 0, 0);
        assert!(expr.next_after(near).is_some());
    }
}
