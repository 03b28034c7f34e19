//! `last_used_at`, recorded off the request path.
//!
//! A request only notes "key K used at T" in memory (at most once a minute per key and node);
//! the background flush writes the notes in one transaction every `last_used_flush_secs` and at
//! shutdown, with the same once-a-minute condition as before in the `UPDATE`, so several nodes
//! do not all write. Until a note is written, this node's key list shows it anyway (see
//! [`LastUsed::pending`]). A failed flush keeps the notes for the next one; nothing blocks.

use crate::db::Db;
use crate::error::ServiceError;
use aigw_domain::ApiKeyId;
use aigw_persistence::{api_keys, transaction};
use chrono::{DateTime, Duration, Utc};
use std::collections::HashMap;
use std::sync::Mutex;

/// How often `last_used_at` is written for a busy key, in seconds.
pub(crate) const RESOLUTION_SECS: i64 = 60;

/// Most notes written by one flush transaction.
const BATCH: usize = 500;

/// Uses noted but not yet written, by key id.
#[derive(Debug, Default)]
pub(crate) struct LastUsed {
    pending: Mutex<HashMap<String, DateTime<Utc>>>,
}

impl LastUsed {
    /// Notes that key `key_id` was used at `at`.
    pub(crate) fn record(&self, key_id: &str, at: DateTime<Utc>) {
        if let Ok(mut pending) = self.pending.lock() {
            let slot = pending.entry(key_id.to_owned()).or_insert(at);
            if *slot < at {
                *slot = at;
            }
        }
    }

    /// The use of `key_id` noted on this node and not yet written, if any.
    pub(crate) fn pending(&self, key_id: &str) -> Option<DateTime<Utc>> {
        self.pending.lock().ok()?.get(key_id).copied()
    }

    /// Writes the noted uses. Notes written are forgotten; on failure they stay for the next
    /// flush. Returns how many were written.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] (or another database error) when the write failed.
    pub(crate) async fn flush(&self, db: &Db) -> Result<usize, ServiceError> {
        let batch: Vec<(String, DateTime<Utc>)> = match self.pending.lock() {
            Ok(pending) => pending.iter().take(BATCH).map(|(k, v)| (k.clone(), *v)).collect(),
            Err(_) => return Ok(0),
        };
        if batch.is_empty() {
            return Ok(0);
        }
        let written = batch.clone();
        db.run(move |conn| {
            transaction(conn, |conn| {
                for (id, at) in &written {
                    let not_before = *at - Duration::seconds(RESOLUTION_SECS);
                    api_keys::touch_last_used(conn, &ApiKeyId::from(id.as_str()), *at, not_before)?;
                }
                Ok::<_, ServiceError>(())
            })
        })
        .await?;
        if let Ok(mut pending) = self.pending.lock() {
            for (id, at) in &batch {
                if pending.get(id) == Some(at) {
                    pending.remove(id);
                }
            }
        }
        Ok(batch.len())
    }
}
