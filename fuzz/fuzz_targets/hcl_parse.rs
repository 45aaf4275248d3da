//! Fuzzes the HCL parsers (`crates/hcl`), of the native and of the JSON
//! syntax: no input may panic them or overflow their stack, and every
//! error must point inside the input. Blocks are read out of every JSON property, both ways.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    for parsed in [
        hcl::parse(&src, "fuzz.hcl"),
        hcl::json::parse(&src, "fuzz.json"),
    ] {
        match parsed {
            Ok(body) => read_every_property(&body),
            Err(err) => {
                let lines = src.split('\n').count();
                assert!(
                    err.pos.line >= 1 && err.pos.line <= lines && err.pos.col >= 1,
                    "{err} points outside the input"
                );
                assert!(!err.message.is_empty());
            }
        }
    }
});

/// Reads every attribute of `body` as JSON blocks, with and without a
/// label, and the bodies of those blocks in turn.
fn read_every_property(body: &hcl::Body) {
    for attr in body.attributes() {
        for labeled in [false, true] {
            for block in &attr.json_blocks(labeled).blocks {
                read_every_property(&block.body);
            }
        }
    }
}
