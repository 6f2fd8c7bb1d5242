//! Notifications (webhooks): every new drift event and every DOWN/UP transition of a server, as JSON or
//! as a Slack message, optionally signed. The detector records what to tell in the store, with its
//! outputs; the notifier follows the store, one task per webhook, and records per webhook what it sent
//! (its cursor), so a restart neither loses nor repeats more than the notification in flight, and a slow or
//! failing receiver never touches detection.

mod affected;
mod events;
mod format;
mod metrics;

use events::{Delivery, Emit, NotificationDelivered, QueueMeasured};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use driftline_schemas::{Classification, Notification, NotificationKind, Timestamp};
use driftline_store::{NotificationStore, Store};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

pub use format::{dashboard_url, json_body, signature, slack_body};

/// One receiver. Its URL is a credential too (a Slack webhook's path is its token): `Debug` shows only
/// where it goes.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    pub url: String,
    #[serde(default)]
    pub format: WebhookFormat,
    /// Drift events below this are not sent (DOWN/UP transitions always are).
    #[serde(default = "default_min")]
    pub min_classification: MinClassification,
    /// Signs each body: `X-Driftline-Signature: sha256=<hex HMAC-SHA256 of the body>`.
    #[serde(default)]
    pub secret: Option<driftline_schemas::Secret>,
    /// Only these projects; every project when empty.
    #[serde(default)]
    pub projects: Vec<driftline_schemas::ProjectName>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    #[default]
    Json,
    Slack,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MinClassification {
    #[serde(alias = "COMPATIBLE")]
    Compatible,
    #[serde(alias = "WARNING")]
    Warning,
    #[serde(alias = "BREAKING")]
    Breaking,
}

fn default_min() -> MinClassification {
    MinClassification::Warning
}

impl MinClassification {
    fn admits(self, classification: Option<Classification>) -> bool {
        let floor = match self {
            MinClassification::Compatible => Classification::Compatible,
            MinClassification::Warning => Classification::Warning,
            MinClassification::Breaking => Classification::Breaking,
        };
        classification.is_some_and(|c| c >= floor)
    }
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Scheme and host only: the rest of the URL may be the credential.
        let host = reqwest::Url::parse(&self.url)
            .ok()
            .map(|url| format!("{}://{}/…", url.scheme(), url.host_str().unwrap_or_default()));
        f.debug_struct("Webhook")
            .field("url", &host.unwrap_or_else(|| "…".to_owned()))
            .field("format", &self.format)
            .field("min_classification", &self.min_classification)
            .field("secret", &self.secret)
            .field("projects", &self.projects)
            .finish()
    }
}

impl Webhook {
    /// Checks the entry; the error names the key.
    pub fn check(&self) -> Result<(), String> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err("url must be an http:// or https:// address".into());
        }
        if reqwest::Url::parse(&self.url).is_err() {
            return Err("url is not a valid address".into());
        }
        if self.secret.as_ref().is_some_and(|secret| secret.expose().is_empty()) {
            return Err("secret is empty (leave it out to send unsigned)".into());
        }
        Ok(())
    }

    /// The name its cursor is stored under: a digest of where and how it sends, never the URL itself
    /// (a Slack webhook URL is a credential).
    pub fn id(&self) -> String {
        let format = match self.format {
            WebhookFormat::Json => "json",
            WebhookFormat::Slack => "slack",
        };
        let digest = Sha256::digest(format!("{format} {}", self.url).as_bytes());
        hex::encode(&digest[..8])
    }

    fn wants(&self, notification: &Notification) -> bool {
        let project = self.projects.is_empty() || self.projects.iter().any(|p| notification.project == *p);
        let level = match notification.kind {
            NotificationKind::Drift
            | NotificationKind::DeclaredOutputMismatch
            | NotificationKind::Upcoming => self.min_classification.admits(notification.classification),
            NotificationKind::Down | NotificationKind::Up => true,
        };
        project && level
    }

    fn body(&self, notification: &Notification, public_url: Option<&str>) -> Vec<u8> {
        let body = match self.format {
            WebhookFormat::Json => json_body(notification, public_url),
            WebhookFormat::Slack => slack_body(notification, public_url),
        };
        // A tree of strings and numbers always serializes.
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

#[derive(Debug, Clone)]
pub struct NotifySettings {
    /// The dashboard's address for links, e.g. `https://driftline.example.com`.
    pub public_url: Option<String>,
    /// Notifications waiting per webhook; beyond it the oldest is dropped (counted and logged).
    pub queue_capacity: usize,
    /// Attempts per notification before it is given up (counted and logged).
    pub max_attempts: u32,
    /// Notifications older than this when first seen are not sent.
    pub lookback: Duration,
    /// How often the store is asked for new notifications.
    pub poll: Duration,
    /// Per request.
    pub timeout: Duration,
}

impl Default for NotifySettings {
    fn default() -> Self {
        NotifySettings {
            public_url: None,
            queue_capacity: 1000,
            max_attempts: 8,
            lookback: Duration::from_secs(3600),
            poll: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
        }
    }
}

/// Retries wait 1 s, 2 s, 4 s … up to a minute.
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.saturating_sub(1).min(6)).min(Duration::from_secs(60))
}

fn now() -> Timestamp {
    Timestamp::from(chrono::Utc::now())
}

struct Pending {
    notification: Notification,
    attempts: u32,
}

/// Sends to one webhook until `shutdown` turns true.
pub async fn run(
    webhook: Webhook,
    settings: NotifySettings,
    traffic: Arc<dyn Store>,
    mut shutdown: watch::Receiver<bool>,
) {
    let store: Arc<dyn NotificationStore> = traffic.clone();
    let id = webhook.id();
    let client = match reqwest::Client::builder().timeout(settings.timeout).build() {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(webhook = %id, error = %err, "webhook client cannot be built");
            return;
        }
    };
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let mut queued: HashSet<String> = HashSet::new();
    tracing::info!(webhook = %id, format = ?webhook.format, "notifier started");
    while !*shutdown.borrow() {
        // Follow the store: what this webhook has no record of and does not hold yet.
        let since = Timestamp::from(chrono::Utc::now() - settings.lookback);
        match store.pending_notifications(&id, since, settings.queue_capacity).await {
            Ok(found) => {
                for notification in found {
                    if queued.contains(&notification.id) {
                        continue;
                    }
                    if !webhook.wants(&notification) {
                        // Recorded, so the next poll does not read it again.
                        record(store.as_ref(), &id, &notification.id, "skipped").await;
                        continue;
                    }
                    queued.insert(notification.id.clone());
                    queue.push_back(Pending { notification, attempts: 0 });
                }
            }
            Err(err) => {
                tracing::warn!(webhook = %id, error = %err, "notifications cannot be read; trying again")
            }
        }
        while queue.len() > settings.queue_capacity {
            if let Some(oldest) = queue.pop_front() {
                let delivery = Delivery::Dropped;
                NotificationDelivered {
                    webhook: &id,
                    notification: &oldest.notification,
                    attempts: oldest.attempts,
                    delivery,
                    reason: None,
                }
                .emit();
                record(store.as_ref(), &id, &oldest.notification.id, delivery.as_str()).await;
                queued.remove(&oldest.notification.id);
            }
        }
        QueueMeasured { webhook: &id, depth: queue.len() }.emit();
        let wait = match queue.front_mut() {
            None => settings.poll,
            Some(head) => {
                head.attempts += 1;
                if head.attempts == 1 {
                    let now = Timestamp::from(chrono::Utc::now());
                    head.notification.affected_agents =
                        affected::affected_agents(traffic.as_ref(), &head.notification, now).await;
                }
                let sent =
                    deliver(&client, &webhook, &head.notification, settings.public_url.as_deref()).await;
                let delivery = match &sent {
                    Ok(()) => Delivery::Sent,
                    Err(_) if head.attempts >= settings.max_attempts => Delivery::Failed,
                    Err(_) => Delivery::Retried { wait: backoff(head.attempts) },
                };
                let reason = sent.as_ref().err().map(|reason| reason as &dyn std::fmt::Display);
                let attempts = head.attempts;
                NotificationDelivered {
                    webhook: &id,
                    notification: &head.notification,
                    attempts,
                    delivery,
                    reason,
                }
                .emit();
                match delivery {
                    Delivery::Retried { wait } => wait,
                    // Sent, or given up: recorded, and the next one's turn.
                    _ => {
                        let done = head.notification.id.clone();
                        record(store.as_ref(), &id, &done, delivery.as_str()).await;
                        queue.pop_front();
                        queued.remove(&done);
                        Duration::ZERO
                    }
                }
            }
        };
        if wait > Duration::ZERO {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
    tracing::info!(webhook = %id, waiting = queue.len(), "notifier stopped");
}

async fn record(store: &dyn NotificationStore, webhook: &str, id: &str, outcome: &str) {
    if let Err(err) = store.record_notified(webhook, id, outcome, now()).await {
        // Not recorded: the next poll reads it again, and it may be sent twice.
        tracing::warn!(webhook, notification = id, outcome, error = %err, "notification outcome not stored");
    }
}

async fn deliver(
    client: &reqwest::Client,
    webhook: &Webhook,
    notification: &Notification,
    public_url: Option<&str>,
) -> Result<(), String> {
    let body = webhook.body(notification, public_url);
    let mut request = client
        .post(&webhook.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("X-Driftline-Event", notification.kind.as_str())
        .header("X-Driftline-Delivery", notification.id.as_str());
    if let Some(secret) = &webhook.secret {
        request = request.header("X-Driftline-Signature", signature(secret.expose(), &body));
    }
    let response = request.body(body).send().await.map_err(|err| err.to_string())?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("the receiver answered HTTP {}", status.as_u16()))
    }
}

/// Starts one notifier task per webhook.
pub fn spawn(
    webhooks: Vec<Webhook>,
    settings: NotifySettings,
    store: Arc<dyn Store>,
    shutdown: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    webhooks
        .into_iter()
        .map(|webhook| tokio::spawn(run(webhook, settings.clone(), store.clone(), shutdown.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn webhook(entry: &str) -> Result<Webhook, String> {
        let webhook: Webhook = toml::from_str(entry).map_err(|err| err.to_string())?;
        webhook.check()?;
        Ok(webhook)
    }

    #[test]
    fn webhook_entries_are_checked() {
        let ok = webhook("url = 'https://hooks.example/x'").expect("valid");
        assert_eq!((ok.format, ok.min_classification), (WebhookFormat::Json, MinClassification::Warning));
        let slack = webhook(
            "url = 'https://h/x'\nformat = 'slack'\nmin_classification = 'BREAKING'\nprojects = ['a']",
        );
        assert!(slack.is_ok(), "{slack:?}");
        for (entry, problem) in [
            ("url = 'ftp://h'", "http"),
            ("url = 'https://h'\nsecret = ''", "secret"),
            ("url = 'https://h'\nprojects = ['a/b']", "projects"),
            ("url = 'https://h'\nformat = 'teams'", "unknown variant"),
            ("url = 'https://h'\nchannel = 'x'", "unknown field"),
        ] {
            let err = webhook(entry).expect_err(entry);
            assert!(err.contains(problem), "{entry}: {err}");
        }
    }

    #[test]
    fn min_classification_filters_drift_and_never_transitions() {
        let hook =
            webhook("url = 'https://h'\nmin_classification = 'warning'\nprojects = ['a']").expect("valid");
        let at = Timestamp::from(chrono::Utc::now());
        let mut drift =
            Notification::transition("n".into(), "a", "s", NotificationKind::Drift, at, String::new());
        for (classification, wanted) in [
            (None, false),
            (Some(Classification::Compatible), false),
            (Some(Classification::Warning), true),
            (Some(Classification::Breaking), true),
        ] {
            drift.classification = classification;
            assert_eq!(hook.wants(&drift), wanted, "{classification:?}");
        }
        let down =
            Notification::transition("d".into(), "a", "s", NotificationKind::Down, at, "timeout".into());
        assert!(hook.wants(&down));
        let elsewhere = Notification { project: "b".into(), ..down };
        assert!(!hook.wants(&elsewhere));
    }

    #[test]
    fn debug_shows_neither_the_urls_path_nor_the_secret() {
        let hook =
            webhook("url = 'https://hooks.slack.com/services/T/B/token'\nsecret = 'hunter2'").expect("valid");
        let shown = format!("{hook:?}");
        assert!(shown.contains("https://hooks.slack.com/…") && shown.contains("Secret(***)"), "{shown}");
        assert!(!shown.contains("token") && !shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn ids_do_not_reveal_the_url_and_differ_by_format() {
        let json = webhook("url = 'https://hooks.slack.com/services/T/B/secret'").expect("valid");
        let slack = Webhook { format: WebhookFormat::Slack, ..json.clone() };
        assert!(!json.id().contains("secret"));
        assert_ne!(json.id(), slack.id());
        assert_eq!(json.id().len(), 16);
    }

    #[test]
    fn retries_back_off_to_a_minute() {
        let waits: Vec<u64> = (1..10).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }
}
