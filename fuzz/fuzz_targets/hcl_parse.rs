//! Fuzzes the HCL parser: no input may panic it or overflow its stack, and
//! every error must point inside the input.

#![no_main]

use libfuzzer_sys::fuzz_target;

// The parser, compiled from the crate's own source; only `parse` is used.
#[allow(dead_code, unused_imports)]
#[path = "../../src/hcl/mod.rs"]
mod hcl;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    if let Err(err) = hcl::parse(&src, "fuzz.hcl") {
        let lines = src.split('\n').count();
        assert!(
            err.pos.line >= 1 && err.pos.line <= lines && err.pos.col >= 1,
            "{err} points outside the input"
        );
        assert!(!err.message.is_empty());
    }
});
