//! Fuzzes the template engine (`crates/template`) as csi-agent runs it:
//! with csi-agent's functions registered (`src/nomad_template/`, compiled
//! from the agent's own source), every input is parsed with Go's
//! delimiters and, when it parses, rendered with a small environment, no
//! task dir and no services. No input may panic either step or overflow
//! the stack; an error must point inside the input.

#![no_main]

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;

// csi-agent's functions and the ground module they use (`sockaddr` reads
// the host's interface addresses), compiled from the agent's source.
#[allow(dead_code, unused_imports)]
#[path = "../../src/nomad_template/mod.rs"]
mod nomad_template;
#[allow(dead_code)]
#[path = "shim/sys.rs"]
mod sys;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = text.split('\n').count();
    let tmpl = match nomad_template::parse(&text, "", "") {
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
    let ctx = nomad_template::Context {
        env: &env,
        task_dir: None,
        services: &[],
    };
    let options = template::Options {
        error_on_missing_key: false,
        now: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    };
    if let Err(err) = tmpl.render(&ctx, &options) {
        assert!(err.pos.line >= 1 && err.pos.line <= lines, "{err}");
    }
});
