//! The spec decoders through the public API: each spec type decoded from
//! our fixtures (Nomad's documented examples, rewritten), round trips
//! through `to_hcl`, one test per validation rule, the same files in HCL's
//! JSON syntax, and a property test that no input makes decoding panic.

mod agent;
mod decoding;
mod job;
mod json;
mod lifecycle;
mod robustness;
mod rules;
mod volume;

use csi_agent::spec::{AgentConfig, Decoded, Invalid, Job, SpecFile, VolumeSpec, Warning};

/// The file name every inline test source is decoded as.
pub const FILE: &str = "test.hcl";

/// The file name inline sources in HCL's JSON syntax are decoded as.
pub const JSON_FILE: &str = "test.json";

/// The fixtures under `tests/fixtures`, by file name.
pub const FIXTURES: &[(&str, &str)] = &[
    ("agent.hcl", include_str!("../../fixtures/agent.hcl")),
    (
        "agent-chroot.hcl",
        include_str!("../../fixtures/agent-chroot.hcl"),
    ),
    (
        "volume-register.hcl",
        include_str!("../../fixtures/volume-register.hcl"),
    ),
    (
        "volume-create.hcl",
        include_str!("../../fixtures/volume-create.hcl"),
    ),
    (
        "volume-ebs.hcl",
        include_str!("../../fixtures/volume-ebs.hcl"),
    ),
    (
        "job-per-alloc.hcl",
        include_str!("../../fixtures/job-per-alloc.hcl"),
    ),
    (
        "job-plugin.hcl",
        include_str!("../../fixtures/job-plugin.hcl"),
    ),
    ("job-web.hcl", include_str!("../../fixtures/job-web.hcl")),
    (
        "agent-cluster.hcl",
        include_str!("../../fixtures/agent-cluster.hcl"),
    ),
    (
        "nomad-docker-job.hcl",
        include_str!("../../fixtures/nomad-docker-job.hcl"),
    ),
    (
        "nomad-podman-job.hcl",
        include_str!("../../fixtures/nomad-podman-job.hcl"),
    ),
    ("agent.json", include_str!("../../fixtures/agent.json")),
    (
        "agent-chroot.json",
        include_str!("../../fixtures/agent-chroot.json"),
    ),
    (
        "volume-register.json",
        include_str!("../../fixtures/volume-register.json"),
    ),
    (
        "volume-create.json",
        include_str!("../../fixtures/volume-create.json"),
    ),
    (
        "volume-ebs.json",
        include_str!("../../fixtures/volume-ebs.json"),
    ),
    (
        "job-per-alloc.json",
        include_str!("../../fixtures/job-per-alloc.json"),
    ),
    (
        "job-plugin.json",
        include_str!("../../fixtures/job-plugin.json"),
    ),
    ("job-web.json", include_str!("../../fixtures/job-web.json")),
];

/// The file name a fixture is decoded as in tests that mutate it: its
/// syntax's, as the decoders tell the syntax by the name.
pub fn file_for(fixture: &str) -> &'static str {
    if fixture.ends_with(".json") {
        JSON_FILE
    } else {
        FILE
    }
}

/// The text of a fixture.
pub fn fixture(name: &str) -> &'static str {
    match FIXTURES.iter().find(|(file, _)| *file == name) {
        Some((_, src)) => src,
        None => panic!("no fixture {name}"),
    }
}

/// Unwraps a decoded spec, failing the test with every error.
pub fn ok<T>(result: Result<Decoded<T>, Invalid>) -> Decoded<T> {
    match result {
        Ok(decoded) => decoded,
        Err(invalid) => panic!("expected the spec to decode, got:\n{invalid}"),
    }
}

/// The errors of a spec that must not decode, as displayed.
pub fn errors<T: std::fmt::Debug>(result: Result<Decoded<T>, Invalid>) -> Vec<String> {
    match result {
        Ok(decoded) => panic!("expected errors, got {:?}", decoded.spec),
        Err(invalid) => invalid.errors.iter().map(|e| e.to_string()).collect(),
    }
}

/// The warnings, as displayed.
pub fn warnings(warnings: &[Warning]) -> Vec<String> {
    warnings.iter().map(|w| w.to_string()).collect()
}

pub fn agent(src: &str) -> Result<Decoded<AgentConfig>, Invalid> {
    AgentConfig::decode(src, FILE)
}

pub fn volume(src: &str) -> Result<Decoded<VolumeSpec>, Invalid> {
    VolumeSpec::decode(src, FILE)
}

pub fn job(src: &str) -> Result<Decoded<Job>, Invalid> {
    Job::decode(src, FILE)
}

/// Asserts that `src` fails to decode with exactly one error, `expected`
/// (as displayed, `test.hcl:line:col: message`).
pub fn assert_one_error(src: &str, expected: &str) {
    let found = errors(SpecFile::decode(src, FILE));
    assert_eq!(found, vec![expected.to_string()], "in:\n{src}");
}
