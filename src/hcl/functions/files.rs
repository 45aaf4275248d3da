//! File and path functions: `file` reads what the job was sent with, or
//! beside the job file.

use super::Function;
use crate::hcl::eval::Value;

/// The file and path functions, by name, with how many arguments each takes (at least,
/// at most).
pub(super) const FUNCTIONS: &[(&str, usize, usize, Function)] = &[
    ("file", 1, 1, |a| {
        let Some(files) = a.files else {
            return Err("file: only job files may read files".to_string());
        };
        files
            .text(&a.string(0)?)
            .map(Value::String)
            .map_err(|err| format!("file: {err}"))
    }),
    ("basename", 1, 1, |a| {
        let path = a.string(0)?;
        Ok(Value::String(
            path.trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_string(),
        ))
    }),
    ("dirname", 1, 1, |a| {
        let path = a.string(0)?;
        Ok(Value::String(match path.rsplit_once('/') {
            Some(("", _)) => "/".to_string(),
            Some((dir, _)) => dir.to_string(),
            None => ".".to_string(),
        }))
    }),
];
