//! What happens to a notification, one type each: emitting one writes its log line and counts its
//! metric in one place (Vector's internal events). Metrics are counted nowhere else in the crate (the
//! tidy test checks), and their label values are enums.

use std::time::Duration;

use driftline_schemas::Notification;

use crate::metrics;

/// Something that happened; `emit` logs it and counts it.
pub(crate) trait Emit {
    fn emit(self);
}

/// What became of one delivery: the `result` label of `driftline_notify_notifications_total`, and the
/// outcome stored for the notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    Sent,
    /// Not delivered; tried again after `wait`.
    Retried {
        wait: Duration,
    },
    /// Not delivered after the last attempt.
    Failed,
    /// Dropped unsent: the queue was full.
    Dropped,
}

impl Delivery {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Delivery::Sent => "sent",
            Delivery::Retried { .. } => "retried",
            Delivery::Failed => "failed",
            Delivery::Dropped => "dropped",
        }
    }
}

pub(crate) struct NotificationDelivered<'a> {
    pub webhook: &'a str,
    pub notification: &'a Notification,
    pub attempts: u32,
    pub delivery: Delivery,
    pub reason: Option<&'a dyn std::fmt::Display>,
}

impl Emit for NotificationDelivered<'_> {
    fn emit(self) {
        let NotificationDelivered { webhook, notification, attempts, delivery, reason } = self;
        let reason = reason.map(ToString::to_string).unwrap_or_default();
        let id = &notification.id;
        match delivery {
            Delivery::Sent => {
                tracing::info!(webhook, notification = %id, kind = notification.kind.as_str(), server = %notification.server_name, "notification sent")
            }
            Delivery::Retried { wait } => {
                tracing::warn!(webhook, notification = %id, attempts, retry_in_s = wait.as_secs(), %reason, "notification not delivered; retrying")
            }
            Delivery::Failed => {
                tracing::error!(webhook, notification = %id, attempts, %reason, "notification given up")
            }
            Delivery::Dropped => {
                tracing::warn!(webhook, notification = %id, "notification dropped: the queue is full")
            }
        }
        metrics::NOTIFICATIONS.with_label_values(&[webhook, delivery.as_str()]).inc();
    }
}

/// Notifications waiting for one webhook.
pub(crate) struct QueueMeasured<'a> {
    pub webhook: &'a str,
    pub depth: usize,
}

impl Emit for QueueMeasured<'_> {
    fn emit(self) {
        tracing::trace!(webhook = self.webhook, depth = self.depth, "notification queue measured");
        metrics::QUEUE_DEPTH.with_label_values(&[self.webhook]).set(self.depth as i64);
    }
}
