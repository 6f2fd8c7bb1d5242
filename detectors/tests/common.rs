//! Loading the peer projects' test data from `../shared/conformance/` (DRIFTLINE_CONFORMANCE_DIR overrides).

use std::path::PathBuf;

pub fn conformance_file(name: &str) -> serde_json::Value {
    let dir = std::env::var_os("DRIFTLINE_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance"));
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!(
            "conformance data {} is missing ({err}); it sits in shared/ beside the repository",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{} is not JSON: {err}", path.display()))
}

pub fn str_field<'a>(value: &'a serde_json::Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or_else(|| panic!("field {key} missing in {value}"))
}
