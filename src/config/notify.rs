//! `[notify]`: webhooks and how hard each notification is tried.

use std::path::PathBuf;

use serde::Deserialize;

use super::{present, within, ConfigError};

/// Webhooks told of every new drift event and every DOWN/UP transition (`serve`, or `driftline notify`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// The dashboard's address, for links in messages: `https://driftline.example.com`.
    pub public_url: Option<String>,
    /// `[[notify.webhooks]] url = "…", format = "json" | "slack", min_classification = "warning",
    /// secret = "…" (signs each body), projects = ["…"] (all when empty)`.
    pub webhooks: Vec<driftline_notify::Webhook>,
    /// More webhooks, as `[[webhooks]]` tables in a TOML file of their own (a mounted Kubernetes Secret:
    /// webhook URLs and secrets are credentials).
    pub webhooks_file: Option<PathBuf>,
    /// Notifications waiting per webhook; beyond it the oldest is dropped (counted and logged). [1, 100000]
    pub queue_capacity: usize,
    /// Attempts per notification (1 s, 2 s, 4 s … up to a minute apart) before it is given up. [1, 100]
    pub max_attempts: u32,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        let defaults = driftline_notify::NotifySettings::default();
        NotifyConfig {
            public_url: None,
            webhooks: Vec::new(),
            webhooks_file: None,
            queue_capacity: defaults.queue_capacity,
            max_attempts: defaults.max_attempts,
        }
    }
}

impl NotifyConfig {
    pub fn settings(&self) -> driftline_notify::NotifySettings {
        driftline_notify::NotifySettings {
            public_url: present(&self.public_url).map(str::to_owned),
            queue_capacity: self.queue_capacity,
            max_attempts: self.max_attempts,
            ..driftline_notify::NotifySettings::default()
        }
    }
}

impl NotifyConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (index, webhook) in self.webhooks.iter().enumerate() {
            if let Err(reason) = webhook.check() {
                invalid!("notify.webhooks[{index}]: {reason}");
            }
        }
        if let Some(url) = present(&self.public_url) {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                invalid!("notify.public_url = {url:?} must be an http:// or https:// address");
            }
        }
        within("notify.queue_capacity", self.queue_capacity, 1..=100_000)?;
        within("notify.max_attempts", self.max_attempts, 1..=100)?;
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WebhooksFile {
    #[serde(default)]
    pub(super) webhooks: Vec<driftline_notify::Webhook>,
}
