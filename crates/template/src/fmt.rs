//! Go's `fmt` as templates use it (`print`, `println`, `printf` with the
//! common verbs) and Go's time layouts for `timestamp`.

use std::time::SystemTime;

use crate::value::format_float;
use crate::{Value, MAX_OUTPUT};

/// `fmt.Sprint` (spaces between operands when neither is a string) or
/// `fmt.Sprintln` (spaces always, and a newline). Stops once past
/// [`MAX_OUTPUT`] bytes, which the caller then refuses.
pub(super) fn sprint(values: &[Value], line: bool) -> String {
    let mut out = String::new();
    for (i, v) in values.iter().enumerate() {
        let is_str = |v: &Value| matches!(v, Value::Str(_));
        if i > 0 && (line || !(is_str(v) || is_str(&values[i - 1]))) {
            out.push(' ');
        }
        out.push_str(&v.to_string());
        if out.len() > MAX_OUTPUT {
            return out;
        }
    }
    if line {
        out.push('\n');
    }
    out
}

/// The largest width or precision `printf` pads to, as in Go's `fmt`
/// (its `tooLarge`): past it the format ends with `%!(NOVERB)`.
pub(super) const MAX_WIDTH: usize = 1_000_000;

/// `fmt.Sprintf` with the verbs `%v %s %q %d %f %F %e %E %g %G %x %X %o
/// %b %c %t %%`, the flags `- + 0 space` and width and precision. Stops
/// once past [`MAX_OUTPUT`] bytes, which the caller then refuses.
pub(super) fn printf(format: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let mut next = 0;
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let (mut minus, mut plus, mut zero, mut space) = (false, false, false, false);
        while let Some(&f) = chars.peek() {
            match f {
                '-' => minus = true,
                '+' => plus = true,
                '0' => zero = true,
                ' ' => space = true,
                '#' => {}
                _ => break,
            }
            chars.next();
        }
        let number = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
            let mut n: Option<usize> = None;
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d as usize));
                chars.next();
            }
            n
        };
        let width = number(&mut chars);
        let prec = if chars.peek() == Some(&'.') {
            chars.next();
            Some(number(&mut chars).unwrap_or(0))
        } else {
            None
        };
        // Go's fmt gives up on the rest of the format at a width or a
        // precision past its bound.
        if width.max(prec).is_some_and(|n| n > MAX_WIDTH) {
            out.push_str("%!(NOVERB)");
            break;
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(next) else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        next += 1;
        let numeric = matches!(arg, Value::Int(_) | Value::Float(_));
        let mut text = match (verb, arg) {
            ('v' | 's', v) => v.to_string(),
            ('q', Value::Str(s)) => format!("{s:?}"),
            ('q', Value::Int(n)) => {
                format!("{:?}", char::from_u32(*n as u32).unwrap_or('\u{FFFD}'))
            }
            ('d', Value::Int(n)) => n.to_string(),
            ('f' | 'F', Value::Float(x)) => format!("{x:.*}", prec.unwrap_or(6)),
            ('f' | 'F', Value::Int(n)) => format!("%!f(int={n})"),
            ('e' | 'E', Value::Float(x)) => go_exp(*x, prec.unwrap_or(6), verb == 'E'),
            ('g' | 'G', Value::Float(x)) => format_float(*x),
            ('x', Value::Int(n)) => signed_radix(*n, |u| format!("{u:x}")),
            ('X', Value::Int(n)) => signed_radix(*n, |u| format!("{u:X}")),
            ('o', Value::Int(n)) => signed_radix(*n, |u| format!("{u:o}")),
            ('b', Value::Int(n)) => signed_radix(*n, |u| format!("{u:b}")),
            ('x', Value::Str(s)) => s.bytes().map(|b| format!("{b:02x}")).collect(),
            ('X', Value::Str(s)) => s.bytes().map(|b| format!("{b:02X}")).collect(),
            ('c', Value::Int(n)) => char::from_u32(*n as u32).unwrap_or('\u{FFFD}').to_string(),
            ('t', Value::Bool(b)) => b.to_string(),
            (verb, v) => format!("%!{verb}({}={v})", v.kind()),
        };
        if let (Some(p), 's' | 'v' | 'q', Value::Str(_)) = (prec, verb, arg) {
            if verb != 'q' {
                text = text.chars().take(p).collect();
            }
        }
        if numeric && !text.starts_with('-') && !text.starts_with('%') {
            if plus {
                text.insert(0, '+');
            } else if space {
                text.insert(0, ' ');
            }
        }
        let len = text.chars().count();
        match width {
            Some(w) if w > len && minus => text.push_str(&" ".repeat(w - len)),
            Some(w) if w > len && zero && numeric => {
                let at = usize::from(text.starts_with(['-', '+', ' ']));
                text.insert_str(at, &"0".repeat(w - len));
            }
            Some(w) if w > len => text.insert_str(0, &" ".repeat(w - len)),
            _ => {}
        }
        out.push_str(&text);
        if out.len() > MAX_OUTPUT {
            return out;
        }
    }
    if next < args.len() {
        out.push_str("%!(EXTRA ");
        let extra: Vec<String> = args[next..]
            .iter()
            .map(|v| format!("{}={v}", v.kind()))
            .collect();
        out.push_str(&extra.join(", "));
        out.push(')');
    }
    out
}

fn signed_radix(n: i64, f: impl Fn(u64) -> String) -> String {
    if n < 0 {
        format!("-{}", f(n.unsigned_abs()))
    } else {
        f(n as u64)
    }
}

/// `%e`: `1.234560e+03`.
fn go_exp(x: f64, prec: usize, upper: bool) -> String {
    let s = format!("{x:.prec$e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let e = if upper { 'E' } else { 'e' };
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}{e}{sign}{:02}", exp.abs())
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// The proleptic Gregorian date (year, month, day) `days` after
/// 1970-01-01, by Howard Hinnant's `civil_from_days`: days counted in
/// eras of 400 years (146,097 days) from 0000-03-01, so that the leap day
/// ends each year of the count.
fn date(days: i64) -> (i64, u32, u32) {
    let from_march_0000 = days + 719_468;
    let era = from_march_0000.div_euclid(146_097);
    let day_of_era = from_march_0000.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months from March, each 153 days per five.
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `now` in UTC in Go's reference layout `layout`
/// (`2006-01-02T15:04:05Z07:00`); the layout `unix` gives seconds since
/// the epoch, as consul-template's `timestamp` does.
pub(super) fn timestamp(layout: &str, now: SystemTime) -> String {
    let since = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    if layout == "unix" {
        return secs.to_string();
    }
    let (year, month, day) = date((secs / 86_400) as i64);
    let rem = secs % 86_400;
    let (hour, min, sec) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let weekday = ((secs / 86_400 + 4) % 7) as usize;
    let month_name = MONTHS[month as usize - 1];
    let nanos = since.subsec_nanos();
    // Longest first, so that `2006` is not read as `2` then `006`.
    let tokens: &[(&str, String)] = &[
        ("January", month_name.to_string()),
        ("Monday", DAYS[weekday].to_string()),
        ("Z07:00", "Z".into()),
        ("-07:00", "+00:00".into()),
        ("Z0700", "Z".into()),
        ("-0700", "+0000".into()),
        (".000000000", format!(".{nanos:09}")),
        (".000000", format!(".{:06}", nanos / 1000)),
        (".000", format!(".{:03}", nanos / 1_000_000)),
        ("2006", format!("{year:04}")),
        ("Jan", month_name[..3].to_string()),
        ("Mon", DAYS[weekday][..3].to_string()),
        ("MST", "UTC".into()),
        ("-07", "+00".into()),
        ("Z07", "Z".into()),
        ("_2", format!("{day:>2}")),
        ("01", format!("{month:02}")),
        ("02", format!("{day:02}")),
        ("03", format!("{:02}", (hour + 11) % 12 + 1)),
        ("04", format!("{min:02}")),
        ("05", format!("{sec:02}")),
        ("06", format!("{:02}", year % 100)),
        ("15", format!("{hour:02}")),
        ("PM", if hour < 12 { "AM" } else { "PM" }.into()),
        ("pm", if hour < 12 { "am" } else { "pm" }.into()),
        ("1", month.to_string()),
        ("2", day.to_string()),
        ("3", ((hour + 11) % 12 + 1).to_string()),
        ("4", min.to_string()),
        ("5", sec.to_string()),
    ];
    let mut out = String::new();
    let mut rest = layout;
    'outer: while !rest.is_empty() {
        for (token, value) in tokens {
            if let Some(after) = rest.strip_prefix(token) {
                out.push_str(value);
                rest = after;
                continue 'outer;
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_from_the_epoch_are_gregorian_dates() {
        assert_eq!(date(0), (1970, 1, 1));
        assert_eq!(date(-1), (1969, 12, 31));
        assert_eq!(date(11_016), (2000, 2, 29));
        assert_eq!(date(11_017), (2000, 3, 1));
        assert_eq!(date(47_540), (2100, 2, 28));
        assert_eq!(date(47_541), (2100, 3, 1));
    }
}
