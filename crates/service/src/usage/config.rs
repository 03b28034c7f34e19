//! `[usage]` settings and the per-model prices of `[[providers]]` (issue 8).

use aigw_domain::usage::{ModelPrice, PriceError};
use serde::Deserialize;

/// `[usage]`: the usage ledger.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsageConfig {
    /// Meter chat completions (default true). Off: no records, and streamed requests reach
    /// the provider exactly as sent (aigw adds no `stream_options`).
    pub enabled: bool,
    /// Most milliseconds between two writes of the recorder (default 1000): the bound on
    /// what a crash can lose.
    pub flush_interval_ms: u64,
    /// Most records written in one transaction (default 1000).
    pub batch_size: usize,
    /// Records held in memory (in the channel from the request path, and again in the
    /// recorder's queue) before they go to the spool file (default 4096: at 25 000 calls a
    /// second, 0.16 s of a database that falls behind; a queued record costs about 1 KiB of
    /// memory, docs/performance.md).
    pub queue_capacity: usize,
    /// Days raw usage records are kept (default 30); daily rollups are kept for ever.
    pub retention_days: u32,
    /// Seconds between two retention sweeps (default 3600).
    pub prune_interval_secs: u64,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            flush_interval_ms: 1000,
            batch_size: 1000,
            queue_capacity: 4096,
            retention_days: 30,
            prune_interval_secs: 3600,
        }
    }
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
}

impl PriceConfig {
    /// The price in integer micro-USD per million tokens.
    ///
    /// # Errors
    /// [`PriceError`] for a negative, non-finite or absurd price.
    pub fn to_price(self) -> Result<ModelPrice, PriceError> {
        ModelPrice::from_usd_per_million(self.input_per_million, self.output_per_million)
    }
}
