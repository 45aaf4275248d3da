//! csi-agent's functions in a template: the task's environment and files,
//! and the names refused at parse. The engine's own tests are the
//! template crate's (`crates/template`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use template::{Error, Options, MAX_OUTPUT};

use super::*;

fn env() -> BTreeMap<String, String> {
    [
        ("NOMAD_ALLOC_ID", "0a1b2c3d"),
        ("PORT", "8080"),
        ("EMPTY", ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn render_in(text: &str, dir: Option<&Path>) -> Result<String, Error> {
    let env = env();
    let ctx = Context {
        env: &env,
        task_dir: dir,
        services: &[],
    };
    let options = Options {
        error_on_missing_key: false,
        // 2009-02-13T23:31:30Z, a Friday.
        now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_234_567_890),
    };
    parse(text, "", "")?.render(&ctx, &options)
}

fn render(text: &str) -> String {
    render_in(text, None).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn error(text: &str) -> String {
    match render_in(text, None) {
        Ok(out) => panic!("{text:?} rendered {out:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn env_functions_read_the_task_s_environment() {
    assert_eq!(
        render(r#"{{ env "NOMAD_ALLOC_ID" }}|{{ env "NOPE" }}|{{ envOrDefault "EMPTY" "d" }}"#),
        "0a1b2c3d||d"
    );
    assert!(error(r#"{{ mustEnv "NOPE" }}"#).contains("is not set"));
}

#[test]
fn file_reads_inside_the_task_dir_only() {
    let dir = std::env::temp_dir().join(format!("tmpl-file-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("local")).unwrap();
    std::fs::write(dir.join("local/in.txt"), "inside").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", dir.join("local/out")).unwrap();
    let ok = render_in(
        r#"{{ file "local/in.txt" }}{{ file "/local/in.txt" }}"#,
        Some(&dir),
    )
    .unwrap();
    assert_eq!(ok, "insideinside");
    for path in ["../../etc/passwd", "local/out"] {
        let err = render_in(&format!("{{{{ file {path:?} }}}}"), Some(&dir)).unwrap_err();
        assert!(
            err.message.contains("outside the task dir") || err.message.contains("No such file"),
            "{err}"
        );
    }
    let err = render_in(r#"{{ file "local/nope" }}"#, Some(&dir)).unwrap_err();
    assert!(err.message.contains("local/nope"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn file_refuses_a_file_past_the_value_limit() {
    let dir =
        std::env::temp_dir().join(format!("csi-agent-template-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(MAX_OUTPUT as u64 + 1)
        .unwrap();
    std::fs::write(dir.join("small"), "ok").unwrap();
    let result = render_in(r#"{{ file "big" }}"#, Some(&dir));
    let small = render_in(r#"{{ file "small" }}"#, Some(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
    let err = result.unwrap_err().to_string();
    assert!(err.contains("the template value limit"), "{err}");
    assert_eq!(small.unwrap(), "ok");
}

#[test]
fn consul_vault_and_nomad_functions_are_refused_at_parse() {
    let err = parse("a\nb {{ key \"x\" }}", "", "").unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2:6: function \"key\" needs Consul, which csi-agent does not have"
    );
    let err = parse("{{ with secret \"kv/x\" }}{{ end }}", "", "").unwrap_err();
    assert!(err.message.contains("needs Vault"), "{err}");
    let err = parse("{{ range nomadVarList }}{{ end }}", "", "").unwrap_err();
    assert!(err.message.contains("needs Nomad's variables"), "{err}");
    let err = parse("{{ writeToFile \"a\" }}", "", "").unwrap_err();
    assert!(err.message.contains("denied"), "{err}");
    let err = parse("\n\n  {{ frobnicate }}", "", "").unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 3:6: function \"frobnicate\" not defined"
    );
}
