//! Numeric literals, kept as written until the decoder knows their type.

/// A numeric literal. The text is kept as written so that integers of any
/// size keep their precision until the decoder knows the target type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Number {
    text: String,
}

impl Number {
    /// Wraps the literal text, whose shape the caller has checked: the
    /// lexer, or a decoder that reads a number out of a string.
    pub fn new(text: String) -> Number {
        Number { text }
    }

    /// The literal as written, such as `-1`, `2.5` or `1e3`.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The value as an `i64` if it is a whole number in range. Fractions
    /// and exponents are evaluated exactly, so `1e3` and `2.0` are whole
    /// numbers, while `1.5` and `1e-3` are not.
    pub fn as_i64(&self) -> Option<i64> {
        let (negative, magnitude) = self.whole_magnitude()?;
        let magnitude = i128::try_from(magnitude).ok()?;
        i64::try_from(if negative { -magnitude } else { magnitude }).ok()
    }

    /// The value as a `u64` if it is a whole, non-negative number in range.
    pub fn as_u64(&self) -> Option<u64> {
        let (negative, magnitude) = self.whole_magnitude()?;
        if negative && magnitude != 0 {
            return None;
        }
        u64::try_from(magnitude).ok()
    }

    /// The value as the nearest `f64`, or `None` if it is too large to be
    /// finite.
    pub fn as_f64(&self) -> Option<f64> {
        self.text
            .parse::<f64>()
            .ok()
            .filter(|value| value.is_finite())
    }

    /// Splits the literal into a sign and the magnitude of a whole number, or
    /// `None` if it has a fractional part or is larger than `u128`.
    fn whole_magnitude(&self) -> Option<(bool, u128)> {
        let (negative, rest) = match self.text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, self.text.as_str()),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], parse_exponent(&rest[at + 1..])?),
            None => (rest, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        // The digits of the mantissa without the point, scaled by 10^shift.
        let digits = whole.bytes().chain(fraction.bytes());
        let shift = exponent - i64::try_from(fraction.len()).ok()?;
        let mut value: u128 = 0;
        let mut pending_zeros: i64 = 0;
        for digit in digits {
            if !digit.is_ascii_digit() {
                return None;
            }
            // Trailing zeros are held back so that a negative shift can
            // cancel them without overflowing first.
            if digit == b'0' {
                pending_zeros += 1;
                continue;
            }
            for _ in 0..pending_zeros {
                value = value.checked_mul(10)?;
            }
            pending_zeros = 0;
            value = value
                .checked_mul(10)?
                .checked_add(u128::from(digit - b'0'))?;
        }
        if value == 0 {
            return Some((negative, 0));
        }
        let zeros = pending_zeros.checked_add(shift)?;
        if zeros < 0 {
            return None;
        }
        for _ in 0..zeros {
            value = value.checked_mul(10)?;
        }
        Some((negative, value))
    }
}

/// Parses an exponent such as `3`, `+3` or `-3`, saturating far beyond any
/// value that could still produce a whole `u128`.
fn parse_exponent(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: i64 = 0;
    for digit in digits.bytes() {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = (value * 10 + i64::from(digit - b'0')).min(1_000_000);
    }
    Some(if negative { -value } else { value })
}
