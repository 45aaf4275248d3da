//! The engine's language, its built-ins and consul-template's functions,
//! with an `env` registered over the test's environment as a caller
//! registers its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;

/// What the tests' templates render with: an environment, which `env`
/// reads.
type Env = BTreeMap<String, String>;

fn env() -> Env {
    [
        ("NOMAD_ALLOC_ID", "0a1b2c3d"),
        ("PORT", "8080"),
        ("EMPTY", ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// consul-template's functions, and `env` over the context's environment.
fn functions() -> Arc<Functions<Env>> {
    let mut functions = Functions::consul_template();
    functions.register("env", 1, |a, env: &Env| {
        Ok(Value::Str(
            env.get(&a.string(0)?).cloned().unwrap_or_default(),
        ))
    });
    Arc::new(functions)
}

fn parse(text: &str, left: &str, right: &str) -> Result<Template<Env>, Error> {
    Template::parse(text, left, right, &functions())
}

fn try_render(text: &str) -> Result<String, Error> {
    let options = Options {
        error_on_missing_key: false,
        // 2009-02-13T23:31:30Z, a Friday.
        now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_234_567_890),
    };
    parse(text, "", "")?.render(&env(), &options)
}

fn render(text: &str) -> String {
    try_render(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn error(text: &str) -> String {
    match try_render(text) {
        Ok(out) => panic!("{text:?} rendered {out:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn text_without_actions_is_copied() {
    assert_eq!(render("plain ${NOMAD} text\n"), "plain ${NOMAD} text\n");
    assert_eq!(render(""), "");
}

#[test]
fn trim_markers_eat_the_space_beside_them() {
    assert_eq!(render("a  {{- \"b\" -}}  \n c"), "abc");
    assert_eq!(render("a {{-3}}"), "a -3");
    assert_eq!(render("x\n{{- /* a comment */ -}}\ny"), "xy");
    assert_eq!(render("x{{/* gone */}}y"), "xy");
}

#[test]
fn custom_delimiters_leave_braces_alone() {
    let options = Options {
        error_on_missing_key: false,
        now: SystemTime::UNIX_EPOCH,
    };
    let t = parse("{{ keep }} [[ env \"PORT\" ]] [[- \" x\" ]]", "[[", "]]").unwrap();
    assert_eq!(t.render(&env(), &options).unwrap(), "{{ keep }} 8080 x");
}

#[test]
fn literals_print_as_go_prints_them() {
    assert_eq!(
        render(
            r#"{{ "a\tb\u00e9" }}|{{ `raw\n` }}|{{ 42 }}|{{ -7 }}|{{ 0x1F }}|{{ 1.5 }}|{{ 1e21 }}|{{ true }}|{{ 'a' }}"#
        ),
        "a\tbé|raw\\n|42|-7|31|1.5|1e+21|true|97"
    );
    // As Go: nil is a value, never a command.
    assert_eq!(error("{{ nil }}"), "line 1:4: nil is not a command");
    assert_eq!(render("{{ print nil }}"), "<nil>");
}

#[test]
fn variables_declare_assign_and_scope() {
    assert_eq!(render("{{ $x := 1 }}{{ $x }}{{ $x = 2 }}{{ $x }}"), "12");
    assert_eq!(
        render("{{ $x := 1 }}{{ if true }}{{ $x = 3 }}{{ $y := 9 }}{{ end }}{{ $x }}"),
        "3"
    );
    assert!(
        error("{{ if true }}{{ $y := 9 }}{{ end }}{{ $y }}").contains("undefined variable \"$y\"")
    );
    assert!(error("{{ $z = 1 }}").starts_with("line 1:1: undefined variable"));
}

#[test]
fn if_else_if_else() {
    let t = r#"{{ if eq (env "PORT") "1" }}one{{ else if eq (env "PORT") "8080" }}web{{ else }}other{{ end }}"#;
    assert_eq!(render(t), "web");
    assert_eq!(
        render("{{ if \"\" }}y{{ else }}n{{ end }}{{ if 0 }}y{{ end }}{{ if 1 }}y{{ end }}"),
        "ny"
    );
    assert_eq!(
        render("{{ with $p := env \"PORT\" }}{{ . }}={{ $p }}{{ end }}"),
        "8080=8080"
    );
    assert_eq!(
        render("{{ with env \"NOPE\" }}x{{ else with env \"PORT\" }}{{ . }}{{ end }}"),
        "8080"
    );
}

#[test]
fn range_over_lists_maps_and_ints() {
    assert_eq!(
        render(r#"{{ range $i, $v := split "," "a,b,c" }}{{ $i }}={{ $v }} {{ end }}"#),
        "0=a 1=b 2=c "
    );
    assert_eq!(
        render(r#"{{ range parseJSON `{"b":2,"a":1}` }}{{ . }}{{ end }}"#),
        "12"
    );
    assert_eq!(
        render(r#"{{ range $k, $v := parseJSON `{"b":2,"a":1}` }}{{ $k }}{{ end }}"#),
        "ab"
    );
    assert_eq!(render("{{ range 3 }}{{ . }}{{ end }}"), "012");
    assert_eq!(
        render("{{ range loop 1 4 }}{{ . }}{{ end }}|{{ range loop 2 }}{{ . }}{{ end }}"),
        "123|01"
    );
    assert_eq!(
        render(r#"{{ range split "," "" }}x{{ else }}empty{{ end }}"#),
        "empty"
    );
    assert_eq!(render("{{ range loop 9 }}{{ if eq . 2 }}{{ continue }}{{ end }}{{ if eq . 4 }}{{ break }}{{ end }}{{ . }}{{ end }}"), "013");
    assert!(error("{{ break }}").contains("outside {{range}}"));
}

#[test]
fn fields_of_maps() {
    let t = r#"{{ with parseJSON `{"db":{"host":"h","port":5432}}` }}{{ .db.host }}:{{ .db.port }}{{ .db.none }}{{ end }}"#;
    assert_eq!(render(t), "h:5432<no value>");
    assert_eq!(
        render(r#"{{ $m := parseJSON `{"a":{"b":"c"}}` }}{{ $m.a.b }}{{ (index $m "a").b }}"#),
        "cc"
    );
    assert!(
        error(r#"{{ $s := "x" }}{{ $s.foo }}"#).contains("can't evaluate field foo in type string")
    );
}

#[test]
fn define_template_and_block() {
    assert_eq!(
        render(r#"{{ define "t" }}[{{ . }}]{{ end }}{{ template "t" "x" }}{{ template "t" 2 }}"#),
        "[x][2]"
    );
    assert_eq!(render(r#"{{ block "b" "y" }}<{{ . }}>{{ end }}"#), "<y>");
    assert!(error(r#"{{ template "nope" }}"#).contains("no such template \"nope\""));
}

#[test]
fn go_builtins() {
    assert_eq!(
        render(r#"{{ and 1 0 }} {{ or 0 "" "x" }} {{ not true }} {{ len "abc" }}"#),
        "0 x false 3"
    );
    assert_eq!(
        render(r#"{{ index (split "," "a,b") 1 }} {{ slice "hello" 1 3 }}"#),
        "b el"
    );
    assert_eq!(
        render(r#"{{ print "a" 1 2 "b" }}|{{ println "a" 1 }}|"#),
        "a1 2b|a 1\n|"
    );
    assert_eq!(
        render(
            r#"{{ printf "%s-%d-%5.2f-%q-%x-%v-%03d-%-3s|" "s" 7 3.14159 "q" 255 true 5 "l" }}"#
        ),
        "s-7- 3.14-\"q\"-ff-true-005-l  |"
    );
    assert_eq!(render(r#"{{ printf "%d %d" 1 }}"#), "1 %!d(MISSING)");
    // Go's printf takes a string format (its exec tests bug16a-d).
    for text in [
        "{{ true | printf }}",
        "{{ 1 | printf }}",
        "{{ 1.1 | printf }}",
        "{{ 'x' | printf }}",
    ] {
        assert!(
            error(text).contains("the format is a"),
            "{text}: {}",
            error(text)
        );
    }
    assert_eq!(render(r#"{{ "aaa" | printf }}"#), "aaa");
    // A width or precision past Go's bound ends the format, the arguments
    // left over listed, as in Go; one too large for a usize (found by
    // fuzzing) is no overflow.
    let huge = format!(
        "{{{{ printf \"%{}d|%.{}f|%d\" 1 2.0 3 }}}}",
        "9".repeat(30),
        7
    );
    assert_eq!(render(&huge), "%!(NOVERB)%!(EXTRA int=1, float64=2, int=3)");
    let over = format!("{{{{ printf \"%.{}f\" 2.0 }}}}", fmt::MAX_WIDTH + 1);
    assert_eq!(render(&over), "%!(NOVERB)%!(EXTRA float64=2)");
    let at = format!("{{{{ printf \"%{}d\" 1 }}}}", fmt::MAX_WIDTH);
    assert_eq!(render(&at).len(), fmt::MAX_WIDTH);
    assert_eq!(
        render(
            r#"{{ eq 1 2 1 }} {{ ne "a" "b" }} {{ lt 1 2 }} {{ le 2 2 }} {{ gt "b" "a" }} {{ ge 1.5 2 }}"#
        ),
        "true true true true true false"
    );
    assert_eq!(
        render(r#"{{ urlquery "a b&c" }} {{ html "<a href='x'>" }} {{ js "it's" }}"#),
        "a+b%26c &lt;a href=&#39;x&#39;&gt; it\\'s"
    );
    assert!(error(r#"{{ lt 1 "a" }}"#).contains("incompatible types for comparison"));
}

#[test]
fn pipelines_pass_the_value_last() {
    assert_eq!(render(r#"{{ "a,b" | split "," | join ";" }}"#), "a;b");
    assert_eq!(
        render(r#"{{ "Hello" | toUpper | printf "%s!" }}"#),
        "HELLO!"
    );
    assert_eq!(
        error(r#"{{ "x" | "y" }}"#),
        "line 1:10: non executable command in pipeline stage 2"
    );
    assert_eq!(
        error("{{ printf 3`x` }}"),
        "line 1:12: missing space before \"x\""
    );
}

#[test]
fn consul_template_string_functions() {
    assert_eq!(
        render(
            r#"{{ toLower "AbC" }} {{ toTitle "hello world" }} {{ trimSpace "  x " }} {{ "!!x!!" | trim "!" }}"#
        ),
        "abc Hello World x x"
    );
    assert_eq!(
        render(
            r#"{{ "pre-x" | trimPrefix "pre-" }} {{ "x.txt" | trimSuffix ".txt" }} {{ "a.b.c" | replaceAll "." "_" }}"#
        ),
        "x x a_b_c"
    );
    assert_eq!(render(r#"{{ "a\nb" | indent 2 }}"#), "  a\n  b");
    assert_eq!(
        render(
            r#"{{ split "," "a,b" | contains "b" }} {{ "hello" | contains "ell" }} {{ split "," "a,b" | containsAll (split "," "a,c") }} {{ split "," "a,b" | containsAny (split "," "c,b") }}"#
        ),
        "true true false true"
    );
}

#[test]
fn conversions_and_encodings() {
    assert_eq!(
        render(
            r#"{{ add 1 (parseInt "41") }} {{ parseFloat "1.5" }} {{ parseBool "true" }} {{ 10 | subtract 3 }} {{ multiply 2 2.5 }} {{ 7 | modulo 2 }}"#
        ),
        "42 1.5 true 7 5 1"
    );
    assert_eq!(
        render(r#"{{ parseJSON `{"a":[1,"x",true,null]}` | toJSON }}"#),
        r#"{"a":[1,"x",true,null]}"#
    );
    assert_eq!(
        render(r#"{{ parseJSON `{"a":[1]}` | toJSONPretty }}"#),
        "{\n  \"a\": [\n    1\n  ]\n}"
    );
    assert_eq!(
        render(
            r#"{{ base64Encode "hi!" }} {{ base64Decode "aGkh" }} {{ "hi?>" | base64URLEncode }}"#
        ),
        "aGkh hi! aGk_Pg=="
    );
    assert!(error(r#"{{ parseInt "x" }}"#)
        .contains("error calling parseInt: parsing \"x\": invalid syntax"));
    assert!(error(r#"{{ base64Decode "!" }}"#).contains("not valid base64"));
}

#[test]
fn timestamps_follow_go_layouts() {
    assert_eq!(render("{{ timestamp }}"), "2009-02-13T23:31:30Z");
    assert_eq!(render(r#"{{ timestamp "unix" }}"#), "1234567890");
    assert_eq!(
        render(r#"{{ timestamp "Mon Jan _2 15:04:05 MST 2006" }}"#),
        "Fri Feb 13 23:31:30 UTC 2009"
    );
    assert_eq!(
        render(r#"{{ timestamp "02/01/06 3:04PM" }}"#),
        "13/02/09 11:31PM"
    );
}

#[test]
fn syntax_errors_name_their_place() {
    let cases = [
        ("{{ if true }}x", "line 1:1: unexpected EOF"),
        ("x\n{{ end }}", "unexpected {{end}}"),
        ("{{ \"open }}", "line 1:4: unterminated quoted string"),
        ("{{ 1 ", "unclosed action"),
        ("{{/* x ", "unclosed comment"),
        ("{{ (1 }}", "unclosed left paren"),
        ("{{ else }}", "unexpected {{else}}"),
        ("{{ 1 | }}", "missing command after |"),
        ("{{ }}", "missing value for command"),
        (
            "{{ if true }}{{ else }}{{ else }}{{ end }}",
            "expected {{end}}",
        ),
        ("{{ # }}", "unexpected '#' in action"),
    ];
    for (text, want) in cases {
        let err = match parse(text, "", "") {
            Ok(t) => panic!("{text:?} parsed: {t:?}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(want), "{text:?}: {err} (want {want:?})");
    }
}

#[test]
fn errors_while_rendering_name_the_line() {
    let err = error("ok\n{{ index (split \",\" \"a\") 3 }}");
    assert_eq!(err, "line 2:4: error calling index: index out of range: 3");
    let options = Options {
        error_on_missing_key: true,
        now: SystemTime::UNIX_EPOCH,
    };
    let t = parse(r#"{{ with parseJSON `{"y":1}` }}{{ .x }}{{ end }}"#, "", "").unwrap();
    assert!(t
        .render(&env(), &options)
        .unwrap_err()
        .message
        .contains("map has no entry for key \"x\""));
}

#[test]
fn runaway_templates_stop() {
    let err = error(r#"{{ define "r" }}{{ template "r" }}{{ end }}{{ template "r" }}"#);
    assert!(err.contains("nest too deeply"), "{err}");
    let err = error("{{ range loop 2000000 }}{{ end }}");
    assert!(err.contains("at most 1000000"), "{err}");
}

#[test]
fn regex_functions_match_and_replace_as_go_does() {
    assert_eq!(render(r#"{{ "v1.2.3" | regexMatch "^v\\d+\\." }}"#), "true");
    assert_eq!(render(r#"{{ regexMatch "(?i)^ABC" "abcd" }}"#), "true");
    assert_eq!(
        render(r#"{{ if "x" | regexMatch "y" }}yes{{ else }}no{{ end }}"#),
        "no"
    );
    assert_eq!(
        render(r#"{{ "foo.bar.baz" | regexReplaceAll "\\." "-" }}"#),
        "foo-bar-baz"
    );
    assert_eq!(
        render(r#"{{ env "NOMAD_ALLOC_ID" | regexReplaceAll "^(?P<head>..)(..)" "${head}:$2:" }}"#),
        "0a:1b:2c3d"
    );
    assert_eq!(
        error(r#"{{ regexMatch "a(" "a" }}"#),
        "line 1:4: error calling regexMatch: invalid pattern \"a(\" at character 2: the group opened here is not closed: missing ')'"
    );
}
