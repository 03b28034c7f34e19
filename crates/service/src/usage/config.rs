//! `[usage]` settings, and the per-model prices and tokenizers of `[[providers]]`.

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

/// One model's entry in `[[providers]] tokenizers = { "MODEL" = { … } }`: how its prompt is
/// counted in the worst case a budget and a `tpm_limit` reserve before the call
/// (docs/budgets.md "Whose tokenizer counts the prompt"). What a call is billed is always
/// the upstream's `usage`, whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerConfig {
    /// The tokenizer the upstream counts the model's tokens with: `"o200k_base"` or
    /// `"cl100k_base"`; `"none"` when it is not one of these (the prompt is then counted from
    /// the request body's bytes). Default: by the model's family for a provider whose
    /// `base_url` is on `api.openai.com` and for `echo`, else `"none"`.
    #[serde(default)]
    pub tokenizer: Option<TokenizerName>,
    /// With no tokenizer: prompt tokens counted per byte of the request body, above 0 and at
    /// most 1 (default 1: no byte-level BPE tokenizer makes more tokens than bytes), e.g.
    /// `0.5` for an upstream whose tokenizer is known never to make more than one token of two
    /// bytes.
    #[serde(default)]
    pub tokens_per_byte: Option<f64>,
}

/// A tokenizer `tokenizers` may name: `tokenizer = "o200k_base"`, `"cl100k_base"` or
/// `"none"` (any other value is refused with a message listing these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerName {
    /// OpenAI's `o200k_base` (GPT-4o, GPT-4.1, GPT-5, the o-series, gpt-oss).
    O200kBase,
    /// OpenAI's `cl100k_base` (GPT-4, GPT-3.5).
    Cl100kBase,
    /// Not known: the prompt is counted from the body's bytes.
    None,
}

impl<'de> Deserialize<'de> for TokenizerName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        match name.as_str() {
            "o200k_base" => Ok(Self::O200kBase),
            "cl100k_base" => Ok(Self::Cl100kBase),
            "none" => Ok(Self::None),
            other => Err(serde::de::Error::custom(format!(
                "unknown tokenizer {other:?}; valid tokenizers: \"o200k_base\", \"cl100k_base\" \
                 (where the upstream counts with it), \"none\" (count the body's bytes)"
            ))),
        }
    }
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
