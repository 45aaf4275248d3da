//! The engine against Go's `regexp` results.

use super::Regex;

/// The text of the first match of `pattern` in `text` and of its groups.
fn find(pattern: &str, text: &str) -> Option<Vec<Option<String>>> {
    let re = Regex::new(pattern).unwrap_or_else(|err| panic!("{pattern:?}: {err}"));
    re.captures(text).map(|caps| {
        caps.iter()
            .map(|span| span.map(|(from, to)| text[from..to].to_string()))
            .collect()
    })
}

/// The whole first match.
fn matched(pattern: &str, text: &str) -> Option<String> {
    find(pattern, text).and_then(|groups| groups[0].clone())
}

fn all(pattern: &str, text: &str) -> Vec<String> {
    let re = Regex::new(pattern).unwrap();
    re.captures_all(text)
        .unwrap()
        .iter()
        .map(|caps| {
            let (from, to) = caps[0].unwrap();
            text[from..to].to_string()
        })
        .collect()
}

fn error(pattern: &str) -> String {
    match Regex::new(pattern) {
        Ok(_) => panic!("{pattern:?} compiled"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn literals_dots_and_classes_match() {
    assert_eq!(matched("b.d", "abcde").as_deref(), Some("bcd"));
    assert_eq!(matched("[0-9]+", "ab 123 4").as_deref(), Some("123"));
    assert_eq!(matched("[^a-c]+", "abcdefa").as_deref(), Some("def"));
    assert_eq!(matched(r"\d+\.\d+", "v 10.25").as_deref(), Some("10.25"));
    assert_eq!(matched(r"\w+", "  hi_there! ").as_deref(), Some("hi_there"));
    assert_eq!(matched(r"\s+", "a \t b").as_deref(), Some(" \t "));
    assert_eq!(matched(r"\D\W\S", "1a-b").as_deref(), Some("a-b"));
    assert_eq!(
        matched(r"[\d.]+", "ip 10.0.0.1/8").as_deref(),
        Some("10.0.0.1")
    );
    assert_eq!(matched("[[:alpha:]]+", "12abc3").as_deref(), Some("abc"));
    assert_eq!(matched("[]a]+", "x]a]").as_deref(), Some("]a]"));
    assert_eq!(matched("a.c", "a\nc"), None);
    assert_eq!(matched("(?s)a.c", "a\nc").as_deref(), Some("a\nc"));
    assert_eq!(matched(r"\x41\x{263a}", "A☺").as_deref(), Some("A☺"));
    assert_eq!(matched("é+", "café").as_deref(), Some("é"));
}

#[test]
fn anchors_hold_where_go_says() {
    assert_eq!(matched("^ab", "abab").as_deref(), Some("ab"));
    assert_eq!(matched("^b", "ab"), None);
    assert_eq!(matched("b$", "ab\n"), None);
    assert_eq!(matched("(?m)b$", "ab\nc").as_deref(), Some("b"));
    assert_eq!(matched("(?m)^c", "ab\nc").as_deref(), Some("c"));
    assert_eq!(matched(r"\bis\b", "this is").as_deref(), Some("is"));
    assert_eq!(find(r"\Bis", "this is").map(|_| ()), Some(()));
    assert_eq!(matched(r"\Aa\z", "a").as_deref(), Some("a"));
}

#[test]
fn repetitions_are_greedy_or_lazy() {
    assert_eq!(matched("a+", "baaa").as_deref(), Some("aaa"));
    assert_eq!(matched("a+?", "baaa").as_deref(), Some("a"));
    assert_eq!(matched("<.*>", "<a><b>").as_deref(), Some("<a><b>"));
    assert_eq!(matched("<.*?>", "<a><b>").as_deref(), Some("<a>"));
    assert_eq!(matched("a{2}", "aaaa").as_deref(), Some("aa"));
    assert_eq!(matched("a{2,}", "aaaa").as_deref(), Some("aaaa"));
    assert_eq!(matched("a{1,3}", "aaaa").as_deref(), Some("aaa"));
    assert_eq!(matched("a{1,3}?", "aaaa").as_deref(), Some("a"));
    assert_eq!(matched("ab?c", "ac").as_deref(), Some("ac"));
    assert_eq!(matched("a{,2}", "a{,2}").as_deref(), Some("a{,2}"));
    assert_eq!(matched("(?U)a+", "aaa").as_deref(), Some("a"));
}

#[test]
fn alternation_prefers_its_left_branch() {
    assert_eq!(matched("a|ab", "ab").as_deref(), Some("a"));
    assert_eq!(matched("ab|a", "ab").as_deref(), Some("ab"));
    assert_eq!(matched("cat|dog", "hotdog").as_deref(), Some("dog"));
    assert_eq!(matched("x(a|b|)y", "xy").as_deref(), Some("xy"));
}

#[test]
fn groups_capture_and_may_be_named_or_plain() {
    assert_eq!(
        find(r"(\d+)-(\d+)", "port 80-443"),
        Some(vec![
            Some("80-443".to_string()),
            Some("80".to_string()),
            Some("443".to_string())
        ])
    );
    assert_eq!(
        find("(?:a)(b)", "ab"),
        Some(vec![Some("ab".to_string()), Some("b".to_string())])
    );
    assert_eq!(
        find("(a)|(b)", "b"),
        Some(vec![Some("b".to_string()), None, Some("b".to_string())])
    );
    let re = Regex::new(r"(?P<year>\d{4})-(?<month>\d\d)").unwrap();
    assert_eq!(
        re.group_names(),
        &[None, Some("year".to_string()), Some("month".to_string())]
    );
    // The last iteration of a repeated group is what it captures.
    assert_eq!(find("(a|b)+", "abab").unwrap()[1].as_deref(), Some("b"));
}

#[test]
fn case_insensitivity_is_a_flag() {
    assert_eq!(matched("(?i)hello", "say HeLLo").as_deref(), Some("HeLLo"));
    assert_eq!(matched("(?i)[a-c]+", "xABCd").as_deref(), Some("ABC"));
    assert_eq!(matched("a(?i:b)c", "aBc").as_deref(), Some("aBc"));
    assert_eq!(matched("a(?i:b)c", "aBC"), None);
    assert_eq!(matched("(?i)a(?-i)b", "Ab").as_deref(), Some("Ab"));
    assert_eq!(matched("(?i)a(?-i)b", "AB"), None);
}

#[test]
fn find_all_skips_an_empty_match_after_a_match() {
    assert_eq!(all(r"\d+", "a1b22c333"), ["1", "22", "333"]);
    assert_eq!(all("a*", "baaac"), ["", "aaa", ""]);
    assert_eq!(all("x*", ""), [""]);
}

#[test]
fn replace_all_expands_groups_as_go_does() {
    let re = Regex::new(r"(\w+)@(?P<host>\w+)").unwrap();
    assert_eq!(re.replace_all("a@b, c@d", "$2:$1").unwrap(), "b:a, d:c");
    assert_eq!(re.replace_all("a@b", "${host}-${1}").unwrap(), "b-a");
    assert_eq!(re.replace_all("a@b", "$host$$").unwrap(), "b$");
    // `$1x` names a group `1x`, which does not exist: empty.
    assert_eq!(re.replace_all("a@b", "[$1x]").unwrap(), "[]");
    assert_eq!(re.replace_all("a@b", "$ and ${").unwrap(), "$ and ${");
    let empty = Regex::new("a*").unwrap();
    assert_eq!(empty.replace_all("baaac", "-").unwrap(), "-b-c-");
    assert_eq!(
        Regex::new("").unwrap().replace_all("ab", "-").unwrap(),
        "-a-b-"
    );
}

#[test]
fn a_pathological_pattern_runs_in_linear_time() {
    // Exponential for a backtracking engine; one pass here.
    let text = "a".repeat(20_000);
    assert!(!Regex::new("(a*)*b").unwrap().is_match(&text));
    assert!(!Regex::new("(a|a)*b").unwrap().is_match(&text));
    assert!(!Regex::new("(a+)+$x").unwrap().is_match(&text));
    let nested = format!("{}b", "(a?)".repeat(30) + &"a".repeat(30));
    assert!(!Regex::new(&nested).unwrap().is_match(&"a".repeat(30)));
}

#[test]
fn errors_name_the_position_in_the_pattern() {
    assert_eq!(
        error("ab(cd"),
        "at character 3: the group opened here is not closed: missing ')'"
    );
    assert_eq!(
        error("ab)"),
        "at character 3: unexpected ')': no group is open"
    );
    assert_eq!(
        error("a[b-"),
        "at character 2: the class opened here is not closed: missing ']'"
    );
    assert_eq!(
        error("x[z-a]"),
        "at character 3: the range z-a is backwards"
    );
    assert_eq!(
        error("*a"),
        "at character 1: the repetition operator has nothing to repeat"
    );
    assert_eq!(
        error("a**"),
        "at character 3: a repetition operator cannot follow another"
    );
    assert_eq!(
        error("a{1001}"),
        "at character 2: a repetition count is at most 1000"
    );
    assert_eq!(
        error(r"\pL"),
        "at character 1: unknown or unsupported escape '\\p'"
    );
    assert_eq!(
        error("(?P<n>a)(?P<n>b)"),
        "at character 9: the group name \"n\" is used twice"
    );
    assert_eq!(
        error("(?x)a"),
        "at character 3: unknown flag 'x': the flags are i, m, s and U"
    );
    assert_eq!(error("ab\\"), "at character 3: the pattern ends with '\\'");
}

#[test]
fn the_size_of_a_pattern_is_bounded() {
    assert!(error("(((a{1000}){1000}){1000})").contains("too large"));
    assert!(error(&"(".repeat(200)).contains("nest deeper"));
    assert!(error(&"a".repeat(20_000)).contains("longer than"));
}

/// The steps of the VM that finding every match of `pattern` in `text`
/// takes.
fn steps_for_all(pattern: &str, text: &str) -> u64 {
    let re = Regex::new(pattern).unwrap();
    let (_, steps) = re.captures_all_within(text, u64::MAX).unwrap();
    steps
}

#[test]
fn all_matches_of_a_pattern_that_settles_each_match_early_take_linear_steps() {
    let short = steps_for_all("a+b", &"aab".repeat(1_000));
    let long = steps_for_all("a+b", &"aab".repeat(2_000));
    assert!(long <= short * 2 + 100, "{short} then {long} steps");
}

#[test]
fn all_matches_of_a_pattern_that_looks_ahead_to_the_end_take_quadratic_steps() {
    // Each `a` matches alone, after the greedy `(.*z)?` has run to the end
    // of the text looking for a `z`.
    let short = steps_for_all("a(.*z)?", &"a".repeat(300));
    let long = steps_for_all("a(.*z)?", &"a".repeat(600));
    assert!(long >= short * 3, "{short} then {long} steps");
}

#[test]
fn a_search_for_all_matches_past_its_step_limit_is_refused() {
    let re = Regex::new("a(.*z)?").unwrap();
    let text = "a".repeat(20_000);
    let err = re.captures_all(&text).unwrap_err();
    assert_eq!(err.limit, re.step_limit(&text));
    assert!(re.replace_all(&text, "b").is_err());
    // A text of the same size whose matches settle early is fine.
    let fine = Regex::new("a").unwrap();
    assert_eq!(fine.captures_all(&text).unwrap().len(), 20_000);
    assert_eq!(fine.replace_all(&text, "b").unwrap(), "b".repeat(20_000));
}

#[test]
fn octal_escapes_read_as_go_reads_them() {
    // RE2's search table: `\141` is 'a', `\0600` is '0' then '0', `\608` is
    // `\60` ('0') then '8', `\018` is `\01` then '8'.
    assert_eq!(matched(r"\141", "a").as_deref(), Some("a"));
    assert_eq!(matched(r"\060", "0").as_deref(), Some("0"));
    assert_eq!(matched(r"\0600", "00").as_deref(), Some("00"));
    assert_eq!(matched(r"\608", "08").as_deref(), Some("08"));
    assert_eq!(matched(r"\01", "\x01").as_deref(), Some("\x01"));
    assert_eq!(matched(r"\018", "\x018").as_deref(), Some("\x018"));
    assert_eq!(matched(r"[\141-\143]+", "xabcd").as_deref(), Some("abc"));
    // A lone digit would be a backreference, which RE2 does not have.
    assert!(
        error(r"\1").contains("unsupported escape"),
        "{}",
        error(r"\1")
    );
    assert!(error(r"(a)\1").contains("unsupported escape"));
    assert!(error(r"\8").contains("unsupported escape"));
}

#[test]
fn a_posix_class_opened_and_closed_at_once_is_refused() {
    // Found by fuzzing: `[:]` closed the class before its name began.
    assert!(
        error("[?[:]z]").contains("not closed by ':]'"),
        "{}",
        error("[?[:]z]")
    );
    assert!(error("[[:]").contains("not closed"));
    assert_eq!(matched("[[:digit:]]+", "ab12").as_deref(), Some("12"));
}

#[test]
fn a_loop_whose_body_may_match_empty_prefers_the_empty_pass_as_go_does() {
    // RE2's search table: leftmost-first takes the empty alternative first,
    // and a loop of it is done.
    assert_eq!(matched("(?:|a)*", "aaa").as_deref(), Some(""));
    assert_eq!(matched("(?:|a)+", "aaa").as_deref(), Some(""));
    assert_eq!(matched("^(?:(?:|a)*)$", "aaa").as_deref(), Some("aaa"));
    assert_eq!(matched("(?:a|)*", "aaa").as_deref(), Some("aaa"));
    assert_eq!(matched("(a*)*", "aa").as_deref(), Some("aa"));
    assert_eq!(
        find("(a*)+", "b"),
        Some(vec![Some(String::new()), Some(String::new())])
    );
    assert_eq!(matched("(?:|a)*?b", "aab").as_deref(), Some("aab"));
}
