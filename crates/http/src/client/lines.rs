//! The lines of a head or of a chunked body's trailers, and of a chunk's
//! size: one line at a time within [`MAX_LINE`] and what is left of the
//! part's [`MAX_HEAD`], and the fields up to the blank line, at most
//! [`MAX_FIELDS`] (RFC 9112, 2.2 and 5).

use std::io::{BufRead, Read};

use super::{Error, Part, Protocol, MAX_FIELDS, MAX_HEAD, MAX_LINE};
use crate::syntax::{is_field_value, is_token, shorten};

/// Reads the fields up to the blank line that ends them, as `part`: names
/// in lower case, values without the whitespace around them. Folded lines
/// (obsolete since RFC 7230) are refused.
pub(super) fn read_fields(
    reader: &mut impl BufRead,
    part: Part,
    budget: &mut usize,
) -> Result<Vec<(String, String)>, Error> {
    let mut fields = Vec::new();
    loop {
        let line = read_line(reader, part, budget)?;
        if line.is_empty() {
            return Ok(fields);
        }
        if fields.len() == MAX_FIELDS {
            return Err(Protocol::TooManyFields(part).into());
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Protocol::BadField(shorten(&line).to_string()).into());
        };
        let value = value.trim_matches([' ', '\t']);
        if !is_token(name) || !is_field_value(value) {
            // The name only: a value may be a credential.
            return Err(Protocol::BadField(shorten(name).to_string()).into());
        }
        fields.push((name.to_ascii_lowercase(), value.to_string()));
    }
}

/// Reads one line of `part` without its CRLF (or bare LF), of at most
/// [`MAX_LINE`] bytes and at most what is left of `budget`, which it
/// takes from.
pub(super) fn read_line(
    reader: &mut impl BufRead,
    part: Part,
    budget: &mut usize,
) -> Result<String, Error> {
    let most = MAX_LINE.min(*budget);
    let mut line = Vec::new();
    let read = Read::take(&mut *reader, most as u64 + 1).read_until(b'\n', &mut line)?;
    if read > most {
        let bound = match most == MAX_LINE {
            true => Protocol::LineTooLong(part),
            false => Protocol::HeadTooLong(part),
        };
        return Err(bound.into());
    }
    if read == 0 && part == Part::Head && *budget == MAX_HEAD {
        return Err(Protocol::NoAnswer.into());
    }
    if line.last() != Some(&b'\n') {
        return Err(Protocol::Cut(part).into());
    }
    *budget -= read;
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| Protocol::NotText(part).into())
}
