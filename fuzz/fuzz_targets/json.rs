//! Fuzzes the JSON reader (`crates/json`): no input may panic it or
//! overflow its stack, and what it accepts must survive a round trip
//! through the writer unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = json::parse_bytes(data) else {
        return;
    };
    let text = json::to_string(&value);
    let again = json::parse(&text).expect("the writer's output must read back");
    assert_eq!(again, value, "round trip changed {text}");
});
