//! Fuzzes the template engine (`src/template/`): every input is parsed
//! with Go's delimiters and, when it parses, rendered with a small
//! environment and no task dir. No input may panic either step or
//! overflow the stack; an error must point inside the input.

#![no_main]

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;

// The engine and the ground modules it uses, compiled from the crate's
// own source.
#[allow(dead_code, unused_imports)]
#[path = "../../src/template/mod.rs"]
mod template;
#[allow(dead_code)]
#[path = "../../src/units.rs"]
mod units;
#[allow(dead_code)]
#[path = "shim/sys.rs"]
mod sys;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = text.split('\n').count();
    let tmpl = match template::Template::parse(&text, "", "") {
        Ok(tmpl) => tmpl,
        Err(err) => {
            assert!(err.pos.line >= 1 && err.pos.line <= lines, "{err}");
            return;
        }
    };
    let env = BTreeMap::from([
        ("NOMAD_TASK_NAME".to_string(), "web".to_string()),
        ("LIST".to_string(), "a,b,c".to_string()),
    ]);
    let ctx = template::Context {
        env: &env,
        task_dir: None,
        error_on_missing_key: false,
        now: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        services: &[],
    };
    if let Err(err) = tmpl.render(&ctx) {
        assert!(err.pos.line >= 1 && err.pos.line <= lines, "{err}");
    }
});
