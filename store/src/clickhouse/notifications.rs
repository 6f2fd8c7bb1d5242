//! The notifier's side of the ClickHouse store: pending notifications and what each webhook sent.

use async_trait::async_trait;
use driftline_schemas::{Notification, Timestamp};

use super::rows::NotifiedRow;
use super::ClickHouseStore;
use crate::views::ms;
use crate::{NotificationStore, StoreError};

#[async_trait]
impl NotificationStore for ClickHouseStore {
    async fn pending_notifications(
        &self,
        webhook: &str,
        since: Timestamp,
        limit: usize,
    ) -> Result<Vec<Notification>, StoreError> {
        let bodies: Vec<String> = self
            .client
            .query(
                "SELECT body FROM notifications FINAL
                 WHERE at >= fromUnixTimestamp64Milli(toInt64(?))
                   AND id NOT IN (SELECT id FROM notifications_sent WHERE webhook = ?)
                 ORDER BY at, id LIMIT ?",
            )
            .bind(ms(since))
            .bind(webhook)
            .bind(limit as u64)
            .fetch_all()
            .await?;
        bodies.iter().map(|body| serde_json::from_str(body).map_err(StoreError::from)).collect()
    }

    async fn record_notified(
        &self,
        webhook: &str,
        id: &str,
        outcome: &str,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let row = NotifiedRow {
            webhook: webhook.to_owned(),
            id: id.to_owned(),
            outcome: outcome.to_owned(),
            sent_at: ms(at),
        };
        self.insert("notifications_sent", &[row]).await
    }
}
