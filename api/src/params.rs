use std::collections::HashMap;

use crate::ApiError;

/// Query parameters, read with clear errors (`hours must be an integer in [1, 720]`).
pub struct Params(pub HashMap<String, String>);

impl Params {
    pub fn int(&self, name: &str, default: u32, min: u32, max: u32) -> Result<u32, ApiError> {
        let Some(raw) = self.0.get(name) else { return Ok(default) };
        match raw.parse::<u32>() {
            Ok(value) if (min..=max).contains(&value) => Ok(value),
            _ => Err(ApiError::bad_request(format!(
                "{name} must be an integer in [{min}, {max}], got {raw:?}"
            ))),
        }
    }

    pub fn required(&self, name: &str) -> Result<&str, ApiError> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| ApiError::bad_request(format!("query parameter {name} is required")))
    }
}

/// Server names: 1–256 of `A-Z a-z 0-9 . _ : @ -` (they appear in keys, paths and topics).
pub fn valid_server_name(name: &str) -> Result<(), ApiError> {
    driftline_schemas::check_server_name(name).map_err(ApiError::bad_request)
}
