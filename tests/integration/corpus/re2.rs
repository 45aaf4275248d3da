//! RE2's search table (`tests/corpora/re2/re2-search.txt`, as Go's
//! `regexp` package keeps it) against the regex engine.
//!
//! The table lists strings, then patterns; after each pattern, one line per
//! string with four results separated by `;`: a full match, a partial
//! match (leftmost-first, Go's and our semantics), the longest full match
//! and the longest partial match. Each result is `-` for no match or the
//! byte offsets `from-to` of the match and of each group (`-` for a group
//! that took no part). We compare the second: [`Regex::captures`].
//! Patterns the engine refuses (`\C`, `\pN`, `\p{Greek}`: syntax outside
//! its subset) must be refused with an error, never a panic; their syntax
//! is listed in [`REFUSED`].

use regex::Regex;

use super::{check_known, dir};

/// The syntax the engine refuses, with why: every pattern of the table it
/// refuses holds one of these, and every pattern holding one is refused.
const REFUSED: &[(&str, &str)] = &[
    (
        r"\C",
        "any byte, even inside a UTF-8 character; Go refuses it too",
    ),
    (r"\p", "Unicode classes, which need Unicode's tables"),
    (r"\P", "negated Unicode classes"),
];

/// Patterns and strings where the engine's match differs from the table:
/// `pattern` then the string, joined by a tab.
const KNOWN_DIFFERENT: &[&str] = &[];

#[test]
fn re2_search_table_matches_leftmost_first() {
    let text = std::fs::read_to_string(dir("re2").join("re2-search.txt")).unwrap();
    let mut lines = text.lines().peekable();
    assert_eq!(
        lines.next(),
        Some("# RE2 basic search tests built by make log")
    );
    let (mut strings, mut compared, mut refused) = (Vec::new(), 0, Vec::new());
    let (mut wrong, mut unexpected) = (Vec::new(), Vec::new());
    let mut patterns = 0;
    while let Some(line) = lines.next() {
        if line.starts_with('#') || line == "Regexp.SearchTests" {
            continue;
        }
        if line == "strings" {
            strings.clear();
            while let Some(s) = lines.next_if(|l| *l != "regexps") {
                strings.push(unquote(s));
            }
            lines.next();
            continue;
        }
        let pattern = unquote(line);
        patterns += 1;
        let results: Vec<&str> = (0..strings.len()).map(|_| lines.next().unwrap()).collect();
        let re = match Regex::new(&pattern) {
            Ok(re) => {
                let unsupported = REFUSED.iter().find(|(syntax, _)| pattern.contains(syntax));
                assert!(
                    unsupported.is_none(),
                    "{pattern:?} compiled: {unsupported:?}"
                );
                re
            }
            Err(err) => {
                assert!(
                    !err.message.is_empty(),
                    "{pattern:?} refused without a message"
                );
                refused.push(pattern);
                continue;
            }
        };
        for (s, result) in strings.iter().zip(&results) {
            let want = result.split(';').nth(1).unwrap();
            let got = show(re.captures(s));
            compared += 1;
            if got != want {
                let id = format!("{pattern}\t{s}");
                if !KNOWN_DIFFERENT.contains(&id.as_str()) {
                    unexpected.push(format!(
                        "{pattern:?} on {s:?}: the table says {want}, the engine {got}"
                    ));
                }
                wrong.push(id);
            }
        }
    }
    println!(
        "re2: {patterns} patterns, {compared} searches compared, {} patterns refused: {refused:?}",
        refused.len()
    );
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
    let unlisted: Vec<&String> = refused
        .iter()
        .filter(|p| !REFUSED.iter().any(|(syntax, _)| p.contains(syntax)))
        .collect();
    assert!(
        unlisted.is_empty(),
        "refused, though their syntax is not in REFUSED: {unlisted:?}"
    );
    check_known("re2", KNOWN_DIFFERENT, &wrong);
    assert!(compared > 1500, "only {compared} searches compared");
}

/// The table's result notation for `captures`.
fn show(found: Option<Vec<Option<(usize, usize)>>>) -> String {
    let Some(groups) = found else {
        return "-".into();
    };
    let parts: Vec<String> = groups
        .iter()
        .map(|g| g.map_or("-".into(), |(from, to)| format!("{from}-{to}")))
        .collect();
    parts.join(" ")
}

/// A Go-quoted string of the table: it escapes only `\` and newline.
fn unquote(quoted: &str) -> String {
    let inner = quoted
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or_else(|| panic!("not a quoted string: {quoted:?}"));
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            other => panic!("escape \\{other:?} in {quoted:?}"),
        }
    }
    out
}
