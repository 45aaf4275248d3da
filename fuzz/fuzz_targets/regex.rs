//! Fuzzes the regex engine (`crates/regex`): the input's first line is the
//! pattern, the rest the text. No pattern may panic the parser or the
//! compiler, and a compiled one must search any text within its step
//! budget, with every group inside the text and on character boundaries.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = String::from_utf8_lossy(data);
    let (pattern, text) = input.split_once('\n').unwrap_or((&input, ""));
    let Ok(re) = regex::Regex::new(pattern) else {
        return;
    };
    let found = re.captures(text);
    assert_eq!(
        found.is_some(),
        re.is_match(text),
        "{pattern:?} on {text:?}"
    );
    if let Ok(all) = re.captures_all(text) {
        if let Some(first) = &found {
            assert_eq!(all.first().map(|c| c[0]), Some(first[0]));
        }
        for caps in &all {
            for &(start, end) in caps.iter().flatten() {
                assert!(start <= end && end <= text.len(), "{pattern:?} on {text:?}");
                assert!(text.is_char_boundary(start) && text.is_char_boundary(end));
            }
        }
    }
    let _ = re.replace_all(text, "<$1>");
});
