//! `[usage]` settings and the per-model prices of `[[providers]]`.

use aigw_domain::usage::{ModelPrice, PriceError};
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

/// One model's price in `[[providers]] prices = { "MODEL" = { … } }`, in USD per million
/// tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// USD per million prompt tokens, e.g. `0.15`.
    pub input_per_million: f64,
    /// USD per million completion tokens, e.g. `0.60`.
    pub output_per_million: f64,
    /// Most prompt tokens the provider bills for one image (`image_url` part), e.g. `1445`
    /// for GPT-4o at high detail; the budget's and `tpm_limit`'s worst case adds it per
    /// image (default [`DEFAULT_IMAGE_TOKENS`]).
    #[serde(default)]
    pub image_tokens: Option<u64>,
}

/// Prompt tokens one image is assumed to cost at most when its model's price sets no
/// `image_tokens`: GPT-4o's and GPT-4.1's largest images cost 1 445 and 1 536 tokens, the
/// o-series' and GPT-4.1-mini's up to about 2 700 (their patch multipliers). Models that
/// bill images as many more tokens at a lower price (GPT-4o-mini: up to 48 169) need their
/// own `image_tokens`.
pub const DEFAULT_IMAGE_TOKENS: u64 = 2_800;

/// The most `image_tokens` a price may set.
pub const MAX_IMAGE_TOKENS: u64 = 1 << 20;

impl PriceConfig {
    /// The price in integer micro-USD per million tokens.
    ///
    /// # Errors
    /// [`PriceError`] for a negative, non-finite or absurd price.
    pub fn to_price(self) -> Result<ModelPrice, PriceError> {
        ModelPrice::from_usd_per_million(self.input_per_million, self.output_per_million)
    }
}
