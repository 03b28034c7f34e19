//! `[usage]` settings, and the per-model prices and tokenizers of `[[providers]]`.

use serde::Deserialize;

/// `[usage]`: the usage ledger.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsageConfig {
    /// Meter chat completions (default true). Off: no records, and streamed requests reach
    /// the provider exactly as sent (aigw adds no `stream_options`).
    pub enabled: bool,
    /// Most milliseconds between two flushes of the recorder (default 1000): the bound on
    /// what a crash can lose.
    pub flush_interval_ms: u64,
    /// Most per-request records held in memory while the database is behind (default 65536,
    /// about 300 bytes each; they are written in batches of about 1024 per worker thread):
    /// beyond, further records are dropped and counted (`records_dropped`), their calls still
    /// summed.
    pub queue_capacity: usize,
    /// Whether only the sums are written (`"none"`, the default) or also one record per call,
    /// stored in batches in `usage_record_batches` (`"database"`, read back by
    /// `GET /usage/requests`).
    pub request_records: RequestRecords,
    /// Also write every call as one structured log line, target `aigw::usage` (default
    /// false): per-request detail for a log pipeline, without the database.
    pub request_log: bool,
    /// Days raw usage records are kept (default 30); daily rollups are kept for ever.
    pub retention_days: u32,
    /// Seconds between two retention sweeps (default 3600).
    pub prune_interval_secs: u64,
    /// Seconds a node may go without reporting to the change feed before the other nodes (or
    /// itself, restarted) bill its calls in flight at their reservation, as `interrupted`
    /// (default 30: a node that is only slow must not be taken for a stopped one).
    pub interrupted_after_secs: u64,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            flush_interval_ms: 1000,
            queue_capacity: 65_536,
            request_records: RequestRecords::None,
            request_log: false,
            retention_days: 30,
            prune_interval_secs: 3600,
            interrupted_after_secs: 30,
        }
    }
}

/// `usage.request_records`: where per-request records are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestRecords {
    /// One record per call, in batches in `usage_record_batches`.
    Database,
    /// None: the daily sums only (`GET /usage/requests` answers an empty page).
    None,
}

pub use crate::config::{
    PriceConfig, TokenizerConfig, TokenizerName, DEFAULT_IMAGE_TOKENS, MAX_IMAGE_TOKENS,
};
