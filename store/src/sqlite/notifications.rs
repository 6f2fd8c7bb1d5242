//! The notifier's side of the SQLite store: pending notifications and what each webhook sent.

use async_trait::async_trait;
use driftline_schemas::{Notification, Timestamp};
use rusqlite::params;

use super::SqliteStore;
use crate::views::ms;
use crate::{NotificationStore, StoreError};

#[async_trait]
impl NotificationStore for SqliteStore {
    async fn pending_notifications(
        &self,
        webhook: &str,
        since: Timestamp,
        limit: usize,
    ) -> Result<Vec<Notification>, StoreError> {
        let webhook = webhook.to_owned();
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT body FROM notifications n WHERE at >= ?1
                 AND NOT EXISTS (SELECT 1 FROM notifications_sent s WHERE s.webhook = ?2 AND s.id = n.id)
                 ORDER BY at, id LIMIT ?3",
            )?;
            let bodies: Vec<String> = select
                .query_map(params![ms(since), webhook, limit as i64], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            bodies.iter().map(|body| serde_json::from_str(body).map_err(StoreError::from)).collect()
        })
        .await
    }

    async fn record_notified(
        &self,
        webhook: &str,
        id: &str,
        outcome: &str,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let (webhook, id, outcome) = (webhook.to_owned(), id.to_owned(), outcome.to_owned());
        Self::with(&self.writer, move |connection| {
            connection.execute(
                "INSERT OR REPLACE INTO notifications_sent (webhook, id, outcome, sent_at) VALUES (?1, ?2, ?3, ?4)",
                params![webhook, id, outcome, ms(at)],
            )?;
            Ok(())
        })
        .await
    }
}
