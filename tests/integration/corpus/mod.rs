//! External test corpora, copied as data under `tests/corpora/` (each with
//! a README naming its origin and licence), run against the hand-written
//! engines: RE2's search table against the regex engine, JSONTestSuite's
//! parsing files against the JSON reader, HCL's specsuite against the HCL
//! parser and evaluator, and Go's `text/template` test tables against the
//! template engine.
//!
//! Where an engine differs from the reference on purpose or by a known
//! limit, the case is listed in the test's table of known differences with
//! why; the test fails when a listed case starts to agree, so the lists
//! only shrink. Each test prints how many cases ran, were refused or were
//! skipped (`cargo test --test integration corpus:: -- --nocapture`).

mod go_template;
mod hcl_specsuite;
mod json_suite;
mod re2;

use std::path::PathBuf;

/// The directory of one corpus under `tests/corpora/`.
fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpora")
        .join(name)
}

/// Fails listing every entry of `known` that did not happen (`seen`):
/// a known difference that went away must leave its list.
fn check_known(what: &str, known: &[&str], seen: &[String]) {
    let stale: Vec<&&str> = known
        .iter()
        .filter(|k| !seen.iter().any(|s| s == *k))
        .collect();
    assert!(
        stale.is_empty(),
        "{what}: these known differences no longer happen, remove them from the list: {stale:?}"
    );
}
