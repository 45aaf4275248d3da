//! Every bound of the template engine, hit by the input that needs it: a
//! bomb per limit, each answered by an error that names the limit, on a
//! thread with the 2 MiB stack of a thread std starts without a size.

use std::sync::Arc;
use std::time::SystemTime;

use super::*;

/// The stack of a thread std starts without a size: csi-agent's starters,
/// its control-API handlers and `validate`'s CLI all parse or render on
/// one of these, or on a larger main thread, and so may any other user.
const DEFAULT_THREAD_STACK: usize = 2 << 20;

/// Parses and renders `text` with consul-template's functions on a
/// thread with the default stack, so a bound too loose for the stack
/// overflows it here rather than in a user's thread.
fn run(text: String) -> Result<String, Error> {
    std::thread::Builder::new()
        .stack_size(DEFAULT_THREAD_STACK)
        .spawn(move || {
            let functions = Arc::new(Functions::consul_template());
            let options = Options {
                error_on_missing_key: false,
                now: SystemTime::UNIX_EPOCH,
            };
            Template::parse(&text, "", "", &functions)?.render(&(), &options)
        })
        .unwrap()
        .join()
        .expect("the template thread panicked")
}

fn refused(text: String) -> String {
    match run(text.clone()) {
        Ok(out) => panic!("{} rendered {out:.80}", &text[..text.len().min(80)]),
        Err(e) => e.to_string(),
    }
}

/// `open` repeated `n` times around `inner`, each closed by `close`.
fn nest(open: &str, inner: &str, close: &str, n: usize) -> String {
    open.repeat(n) + inner + &close.repeat(n)
}

#[test]
fn every_block_nests_to_the_limit_and_no_deeper() {
    let n = MAX_NESTING;
    let cases = [
        ("{{ if 1 }}", "{{ end }}"),
        ("{{ with 1 }}", "{{ end }}"),
        ("{{ range 1 }}", "{{ end }}"),
    ];
    for (open, close) in cases {
        let deepest = nest(open, "x", close, n);
        let out = run(deepest).unwrap_or_else(|e| panic!("{open} x{n}: {e}"));
        assert_eq!(out, "x", "{open}");
        let err = refused(nest(open, "x", close, n + 1));
        assert!(err.contains("the template nesting limit"), "{open}: {err}");
        assert!(err.contains(&format!("deeper than {n} levels")), "{err}");
    }
}

#[test]
fn else_if_chains_count_as_nesting() {
    let chain = |n: usize| {
        format!(
            "{{{{ if 0 }}}}{}{{{{ else }}}}last{{{{ end }}}}",
            "{{ else if 0 }}".repeat(n)
        )
    };
    assert_eq!(run(chain(MAX_NESTING - 1)).unwrap(), "last");
    assert!(refused(chain(MAX_NESTING + 1)).contains("the template nesting limit"));
}

#[test]
fn parentheses_nest_to_the_limit_and_no_deeper() {
    let parens = |n: usize| format!("{{{{ {} }}}}", nest("(print ", "1", ")", n));
    assert_eq!(run(parens(MAX_NESTING)).unwrap(), "1");
    let err = refused(parens(MAX_NESTING + 1));
    assert!(err.contains("the template nesting limit"), "{err}");
}

#[test]
fn nesting_bombs_are_refused_not_overflowed() {
    // The reports: 600 and 800 `if`s aborted the agent and `validate`,
    // and so did parentheses. Far deeper ones are refused as fast.
    for n in [600, 800, 100_000] {
        assert!(refused(nest("{{if 1}}", "", "{{end}}", n)).contains("nesting limit"));
        let parens = format!("{{{{ {} }}}}", nest("(", "1", ")", n));
        assert!(refused(parens).contains("nesting limit"));
        let unclosed = "{{ if 1 }}".repeat(n);
        assert!(refused(unclosed).contains("nesting limit"));
    }
}

#[test]
fn rendering_stops_at_the_render_depth_limit() {
    // A template that calls itself, and one whose calls each nest a body:
    // both run out of depth, not stack.
    let err = refused(r#"{{ define "r" }}{{ template "r" }}{{ end }}{{ template "r" }}"#.into());
    assert!(err.contains("the template render depth limit"), "{err}");
    let body = nest(
        "{{ if 1 }}",
        "{{ template \"r\" }}",
        "{{ end }}",
        MAX_NESTING - 1,
    );
    let err = refused(format!(
        "{{{{ define \"r\" }}}}{body}{{{{ end }}}}{{{{ template \"r\" }}}}"
    ));
    assert!(
        err.contains(&format!("more than {MAX_RENDER_DEPTH} levels")),
        "{err}"
    );
}

#[test]
fn a_template_calling_others_within_the_depth_renders() {
    let defines: String = (0..MAX_RENDER_DEPTH / 2 - 1)
        .map(|i| {
            format!(
                "{{{{ define \"t{i}\" }}}}{{{{ template \"t{}\" }}}}{{{{ end }}}}",
                i + 1
            )
        })
        .collect();
    let last = MAX_RENDER_DEPTH / 2 - 1;
    let text =
        format!("{defines}{{{{ define \"t{last}\" }}}}done{{{{ end }}}}{{{{ template \"t0\" }}}}");
    assert_eq!(run(text).unwrap(), "done");
}

#[test]
fn a_range_over_a_huge_number_ends_at_the_step_limit() {
    // Before, `range N` made a list of N pairs first: memory, then time.
    let err = refused("{{ range 100000000000000 }}{{ end }}".into());
    assert!(err.contains("the template step limit"), "{err}");
    let err = refused("{{ range loop 1000000 }}{{ range loop 1000000 }}{{ end }}{{ end }}".into());
    assert!(
        err.contains(&format!("more than {MAX_STEPS} steps")),
        "{err}"
    );
}

#[test]
fn values_that_grow_in_a_loop_stop_at_the_value_limit() {
    let doubling = r#"{{ $x := "ab" }}{{ range 64 }}{{ $x = replaceAll "a" $x $x }}{{ end }}"#;
    let err = refused(doubling.into());
    assert!(err.contains("the template value limit"), "{err}");
    let printed = r#"{{ $x := "ab" }}{{ range 64 }}{{ $x = print $x $x }}{{ end }}"#;
    assert!(refused(printed.into()).contains("the template value limit"));
    let joined =
        r#"{{ $x := "ab" }}{{ range 64 }}{{ $x = join $x (split "" (print $x $x)) }}{{ end }}"#;
    let err = refused(joined.into());
    assert!(err.contains("limit"), "{err}");
}

#[test]
fn functions_refuse_results_past_the_bounds_before_building_them() {
    let err = refused(r#"{{ indent 100000000000000 "x" }}"#.into());
    assert!(err.contains("the template value limit"), "{err}");
    let err =
        refused(r#"{{ "abcdefghijklmnopqrst" | replaceAll "" (printf "%1000000s" "") }}"#.into());
    assert!(err.contains("the template value limit"), "{err}");
    let err = refused(format!(
        "{{{{ printf \"{}\" {}}}}}",
        "%1000000s".repeat(17),
        "\"\" ".repeat(17)
    ));
    assert!(err.contains("the template value limit"), "{err}");
    let err = refused(r#"{{ range loop 1000001 }}{{ end }}"#.into());
    assert!(err.contains("the template list limit"), "{err}");
    let err = refused(r#"{{ split "" (printf "%1000000s%1000000s" "" "") }}"#.into());
    assert!(err.contains("the template list limit"), "{err}");
    let err = refused(format!(
        "{{{{ regexReplaceAll \".\" \"{}\" (printf \"%1000000s\" \"\") }}}}",
        "$0".repeat(20)
    ));
    assert!(err.contains("the replacement size limit"), "{err}");
}

#[test]
fn printf_widths_past_go_s_bound_end_the_format_as_go_does() {
    assert_eq!(
        run(r#"{{ printf "%99999999999999999999d" 1 }}"#.into()).unwrap(),
        "%!(NOVERB)%!(EXTRA int=1)"
    );
    assert_eq!(
        run(r#"{{ printf "%.99999999999999999999f" 1.5 }}"#.into()).unwrap(),
        "%!(NOVERB)%!(EXTRA float64=1.5)"
    );
    assert_eq!(run(r#"{{ printf "%5d|" 1 }}"#.into()).unwrap(), "    1|");
}

#[test]
fn output_stops_at_the_output_limit() {
    let err = refused(r#"{{ range 100 }}{{ printf "%1000000s" "" }}{{ end }}"#.into());
    assert!(err.contains("the template output limit"), "{err}");
}

#[test]
fn a_long_line_of_actions_lexes_in_one_pass() {
    // Each token's column was counted from its line's start: a one-line
    // template of 200,000 actions took minutes.
    let n = 200_000;
    let out = run("{{ 1 }}".repeat(n)).unwrap();
    assert_eq!(out.len(), n);
    let err = refused(format!("{}{{{{ nope }}}}", "{{ 1 }}".repeat(n)));
    assert!(err.starts_with(&format!("line 1:{}:", n * 7 + 4)), "{err}");
}

#[test]
fn many_variables_are_each_found_at_once() {
    // A reference looked for its variable down the whole stack: 50,000
    // declarations and as many references to the first took minutes.
    let n = 50_000;
    let decls: String = (0..n).map(|i| format!("{{{{ $v{i} := {i} }}}}")).collect();
    let refs = "{{ $v0 }}".repeat(n);
    let out = run(decls + &refs).unwrap();
    assert_eq!(out, "0".repeat(n));
}
