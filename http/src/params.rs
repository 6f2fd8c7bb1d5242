//! Query parameters and path names read with errors that name the parameter and its rule.

use std::collections::HashMap;

use driftline_schemas::{ServerName, ToolName};

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

/// A server name from a request path, checked (400 naming the rule when it is not one).
pub fn server_name(name: &str) -> Result<ServerName, ApiError> {
    ServerName::parse(name).map_err(|err| ApiError::bad_request(err.to_string()))
}

/// A tool name from a request path or query, checked.
pub fn tool_name(name: &str) -> Result<ToolName, ApiError> {
    ToolName::parse(name).map_err(|err| ApiError::bad_request(err.to_string()))
}
