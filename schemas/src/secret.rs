//! Credentials read from configuration (passwords, webhook secrets): used as they are, never printed. A
//! settings tree that is logged or shown with `{:?}` shows `***` in their place.

use std::fmt;

use serde::Deserialize;

/// A credential. Its text is read only through [`Secret::expose`], where it is used.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: impl Into<String>) -> Self {
        Secret(text.into())
    }

    /// The credential itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// An optional credential, absent when unset or empty (a Kubernetes Secret key rendered as "").
    pub fn present(value: &Option<Secret>) -> Option<&Secret> {
        value.as_ref().filter(|secret| !secret.0.is_empty())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "Secret(\"\")" } else { "Secret(***)" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_used_whole_and_never_printed() {
        let secret: Secret = serde_json::from_str("\"hunter2\"").expect("a secret");
        assert_eq!(secret.expose(), "hunter2");
        assert_eq!(format!("{secret:?}"), "Secret(***)");
        assert_eq!(format!("{:?}", Some(&secret)), "Some(Secret(***))");
        assert_eq!(Secret::present(&Some(Secret::new(""))), None, "empty is absent");
        assert_eq!(Secret::present(&Some(secret.clone())), Some(&secret));
    }
}
