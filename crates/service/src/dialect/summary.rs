//! What a validated request of any dialect asks for ([`RequestSummary`]): the one shape the
//! later stages (routing, admission, metering) read, whichever endpoint the call came to.

use aigw_domain::usage::Endpoint;

/// What a validated request asks for: enough to route it, price its worst case and meter it,
/// without parsing the body again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSummary {
    /// The endpoint (API dialect) the request came to.
    pub endpoint: Endpoint,
    /// The `model` field.
    pub model: String,
    /// The `stream` field (default false; always false for embeddings).
    pub stream: bool,
    /// Chat only: whether the body has a `stream_options` member (of any value).
    pub has_stream_options: bool,
    /// Chat only: whether the caller asked for a final usage chunk
    /// (`stream_options.include_usage` is `true`). The other dialects always report usage.
    pub include_usage: bool,
    /// An upper bound of the prompt's text tokens under any byte-level BPE encoding, without
    /// a tokenizer: the dialect's fixed tokens plus one token per byte of the whole request
    /// body (a byte-level BPE token stands for at least one byte, and every text a provider
    /// bills as input is in the body). For embeddings with token arrays: their length.
    /// Images are billed by size, not by bytes: see [`Self::images`].
    pub prompt_bound: u64,
    /// The fewest prompt tokens the call's worst case counts, whatever a tokenizer makes of
    /// its body: 0, or the model's context window when the call holds input the gateway
    /// cannot see (set by the gateway, never by a dialect's validator).
    pub prompt_floor: u64,
    /// The image content parts of the request: each is billed as up to a model's image
    /// tokens (`image_tokens` of its price), which are added to the prompt.
    pub images: u64,
    /// The output tokens the call can be billed at most: the dialect's output cap (chat:
    /// `max_completion_tokens`, else `max_tokens`, else [`crate::dialect::chat::DEFAULT_COMPLETION_CAP`],
    /// times `n`, plus a `prediction`'s bytes; Responses: `max_output_tokens`; Messages:
    /// `max_tokens`); 0 for embeddings.
    pub completion_cap: u64,
    /// The JSON path of the first part whose input cannot be bounded before the call (a file
    /// sent by id, a previous response or conversation the gateway cannot see): a key with
    /// a budget or a `tpm_limit` cannot send it unless the model's context window bounds it.
    pub unbounded_part: Option<String>,
}
