//! The configuration on any TOML text: read and validated, or refused with a message — never a panic.
#![no_main]

use driftline::config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(err) = config::Config::from_toml(text) {
        assert!(!err.to_string().is_empty());
    }
});
