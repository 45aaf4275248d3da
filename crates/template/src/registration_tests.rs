//! Functions a caller registers: called with their arguments and the
//! context, their errors and unknown names at the template's line, and
//! the bounds their values keep.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;

/// A caller's context: what its functions read.
struct Inventory {
    hosts: Vec<&'static str>,
}

fn options() -> Options {
    Options {
        error_on_missing_key: false,
        now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_234_567_890),
    }
}

/// consul-template's functions and the inventory's: `hosts` lists them,
/// `host N` picks one, failing past the end.
fn functions() -> Arc<Functions<Inventory>> {
    let mut functions = Functions::consul_template();
    functions
        .register("hosts", 0, |_, inventory: &Inventory| {
            let hosts = inventory.hosts.iter().map(|h| Value::Str(h.to_string()));
            Ok(Value::List(hosts.collect()))
        })
        .register("host", 1..=2, |a, inventory: &Inventory| {
            let i = a.int(0)?;
            let host = usize::try_from(i)
                .ok()
                .and_then(|i| inventory.hosts.get(i))
                .ok_or_else(|| format!("no host {i}: there are {}", inventory.hosts.len()))?;
            let suffix = if a.values.len() == 2 {
                a.string(1)?
            } else {
                String::new()
            };
            Ok(Value::Str(format!("{host}{suffix}")))
        });
    Arc::new(functions)
}

fn render(text: &str) -> Result<String, Error> {
    let inventory = Inventory {
        hosts: vec!["a.example", "b.example"],
    };
    Template::parse(text, "", "", &functions())?.render(&inventory, &options())
}

#[test]
fn a_registered_function_is_called_with_its_arguments_and_the_context() {
    assert_eq!(render("{{ host 1 }}").unwrap(), "b.example");
    // The piped value comes last, as for every function.
    assert_eq!(render(r#"{{ ":80" | host 0 }}"#).unwrap(), "a.example:80");
    assert_eq!(
        render(r#"{{ range hosts }}{{ . | toUpper }};{{ end }}"#).unwrap(),
        "A.EXAMPLE;B.EXAMPLE;"
    );
    assert_eq!(render("{{ len hosts }}").unwrap(), "2");
}

#[test]
fn an_unknown_function_is_refused_at_parse_naming_it_and_its_line() {
    let err = Template::parse("\n\n  {{ frobnicate }}", "", "", &functions()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 3:6: function \"frobnicate\" not defined"
    );
    // Go's built-ins alone do not hold consul-template's functions.
    let go = Arc::new(Functions::<()>::go());
    let err = Template::parse("{{ \"x\" | toUpper }}", "", "", &go).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 1:10: function \"toUpper\" not defined"
    );
}

#[test]
fn the_caller_may_say_why_a_name_is_unknown() {
    let mut functions = Functions::<()>::consul_template();
    functions.explain_unknown(|name| {
        name.starts_with("vault")
            .then(|| "needs Vault, which this program does not have".to_string())
    });
    let functions = Arc::new(functions);
    let err = Template::parse("a\n{{ vaultRead \"x\" }}", "", "", &functions).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2:4: function \"vaultRead\" needs Vault, which this program does not have"
    );
    let err = Template::parse("{{ other }}", "", "", &functions).unwrap_err();
    assert_eq!(err.to_string(), "line 1:4: function \"other\" not defined");
}

#[test]
fn a_failing_function_s_error_names_it_and_the_line() {
    let err = render("ok\n{{ host 7 }}").unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2:4: error calling host: no host 7: there are 2"
    );
    let err = render("{{ host 1 2 3 }}").unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 1:4: error calling host: wrong number of args: got 3, want 1 to 2"
    );
    let err = render("{{ hosts 1 }}").unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 1:4: error calling hosts: wrong number of args: got 1, want 0"
    );
}

#[test]
fn a_registered_function_s_value_keeps_the_bounds() {
    let mut functions = Functions::<()>::go();
    functions
        .register("huge", 0, |_, _| Ok(Value::Str("x".repeat(MAX_OUTPUT + 1))))
        .register("many", 0, |_, _| {
            Ok(Value::List(vec![Value::Nil; MAX_ITEMS + 1]))
        });
    let functions = Arc::new(functions);
    for (name, limit) in [
        ("huge", "the template value limit"),
        ("many", "the template limit of 1000000"),
    ] {
        let text = format!("{{{{ {name} }}}}");
        let t = Template::parse(&text, "", "", &functions).unwrap();
        let err = t.render(&(), &options()).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("line 1:4: error calling {name}: ")),
            "{err}"
        );
        assert!(err.contains(limit), "{err}");
    }
}

#[test]
fn a_function_may_render_a_template_of_its_own_with_the_same_options() {
    // As csi-agent's `sockaddr` does: its argument is a template over
    // other functions, rendered with the caller's clock.
    static INNER: std::sync::OnceLock<Arc<Functions<()>>> = std::sync::OnceLock::new();
    let mut functions = Functions::<()>::go();
    functions.register("inner", 1, |a, _| {
        let inner = INNER.get_or_init(|| Arc::new(Functions::consul_template()));
        let t = Template::parse(&a.string(0)?, "", "", inner).map_err(|e| e.to_string())?;
        let out = t
            .render_with_dot(&(), a.options(), &Value::Int(7))
            .map_err(|e| e.to_string())?;
        Ok(Value::Str(out))
    });
    let functions = Arc::new(functions);
    let t = Template::parse(
        r#"{{ inner "{{ . }} {{ timestamp \"2006\" }}" }}"#,
        "",
        "",
        &functions,
    )
    .unwrap();
    assert_eq!(t.render(&(), &options()).unwrap(), "7 2009");
    let t = Template::parse(r#"{{ inner "{{ nope }}" }}"#, "", "", &functions).unwrap();
    let err = t.render(&(), &options()).unwrap_err().to_string();
    assert_eq!(
        err,
        "line 1:4: error calling inner: line 1:4: function \"nope\" not defined"
    );
}

#[test]
fn the_context_may_be_a_trait_object() {
    trait Clock {
        fn hour(&self) -> i64;
    }
    struct Noon;
    impl Clock for Noon {
        fn hour(&self) -> i64 {
            12
        }
    }
    let mut functions = Functions::<dyn Clock>::go();
    functions.register("hour", 0, |_, clock| Ok(Value::Int(clock.hour())));
    let t = Template::parse("{{ hour }}", "", "", &Arc::new(functions)).unwrap();
    assert_eq!(t.render(&Noon, &options()).unwrap(), "12");
}

#[test]
#[should_panic(expected = "function \"len\" is defined twice")]
fn a_taken_name_cannot_be_registered() {
    Functions::<()>::go().register("len", 1, |_, _| Ok(Value::Nil));
}

#[test]
#[should_panic(expected = "function name \"range\" is a keyword")]
fn a_keyword_cannot_be_registered() {
    Functions::<()>::go().register("range", 1, |_, _| Ok(Value::Nil));
}

#[test]
#[should_panic(expected = "function name \"a-b\" is not an identifier")]
fn a_name_that_is_not_an_identifier_cannot_be_registered() {
    Functions::<()>::go().register("a-b", 1, |_, _| Ok(Value::Nil));
}
