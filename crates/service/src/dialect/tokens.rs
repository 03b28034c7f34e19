//! Token estimates with OpenAI's own byte-pair encodings (tiktoken-rs, whose BPE tables are
//! compiled into the binary: no download, works offline), used when a provider reports no
//! `usage`, and by a budget's worst case for the models whose upstream is known to count
//! with them ([`PromptCounting`]).
//!
//! - Encoding by model family: `o200k_base` for `gpt-4o*`, `chatgpt-4o*`, `gpt-4.1*`,
//!   `gpt-5*`, `o1*`, `o3*` and `o4*`; `cl100k_base` for everything else (`gpt-4`,
//!   `gpt-3.5-turbo`, `echo`, other vendors' models, for which it is an approximation). A
//!   `vendor/` prefix is ignored (`openai/gpt-4o` is `gpt-4o`).
//! - Prompt: OpenAI's documented chat format: 3 tokens per message, plus the tokens of its
//!   `role`, `content` (a string, or the `text` of content parts) and `name` (+1), plus 3 that
//!   prime the reply; plus the tokens of the compact JSON of every other field a provider
//!   bills as prompt (`tools`, `functions`, `response_format`, `tool_choice`,
//!   `function_call`), [`TOKENS_PER_FIELD`] for each and [`TOKENS_PER_DEFINITION`] for each tool or function. Images
//!   and audio are not counted, so estimates of such prompts are low (the budget's worst
//!   case adds a bound per image, docs/budgets.md).
//! - Completion: the tokens of the answer's text (content, refusal, tool-call names and
//!   arguments).
//!
//! Encoding is CPU work (about a microsecond per token); callers on an async runtime keep it
//! off request paths where texts can be large. The tables load on first use (tens of
//! milliseconds); [`warm_up`] does that ahead of time.

use aigw_domain::usage::Endpoint;
use serde_json::Value;
use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

/// Tokens added per chat message by OpenAI's chat format.
pub(crate) const TOKENS_PER_MESSAGE: u64 = 3;
/// Tokens added for a message's `name`.
pub(crate) const TOKENS_PER_NAME: u64 = 1;
/// Tokens that prime the assistant's reply.
pub(crate) const REPLY_PRIMING_TOKENS: u64 = 3;
/// Tokens added for each tool or function definition: the words a provider wraps a
/// definition in (`type name = (_: {…}) => any;`), which its JSON does not contain.
pub(crate) const TOKENS_PER_DEFINITION: u64 = 12;
/// Tokens added for each prompt-bearing field besides `messages` (`namespace functions {`).
pub(crate) const TOKENS_PER_FIELD: u64 = 4;

/// The request fields besides `messages` that a provider renders into the prompt.
const PROMPT_FIELDS: [&str; 5] =
    ["tools", "functions", "response_format", "tool_choice", "function_call"];

/// An OpenAI byte-pair encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `cl100k_base` (GPT-4, GPT-3.5).
    Cl100k,
    /// `o200k_base` (GPT-4o, GPT-4.1, GPT-5, the o-series).
    O200k,
}

/// How the prompt of a model's call is counted in the call's worst case, before the call
/// (docs/budgets.md "Whose tokenizer counts the prompt"). Never used for what a call is
/// billed: that is the upstream's `usage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptCounting {
    /// With `Encoding`, the tokenizer the upstream is known to count with.
    Tokenizer(Encoding),
    /// From the request body's bytes: the chat format's fixed tokens plus `per_million`
    /// millionths of a token per byte (1 000 000: one token per byte, the bound no byte-level
    /// BPE tokenizer can pass).
    Bytes {
        /// Millionths of a token per byte, 1 to 1 000 000.
        per_million: u32,
    },
}

impl PromptCounting {
    /// One token per byte of the body: the bound that holds whatever the upstream's tokenizer.
    pub const ONE_PER_BYTE: Self = Self::Bytes { per_million: 1_000_000 };

    /// `tokens_per_byte` (0 excluded to 1) as a [`PromptCounting::Bytes`], rounded up to the
    /// next millionth; `None` outside that range.
    pub fn per_byte(tokens_per_byte: f64) -> Option<Self> {
        if !(tokens_per_byte > 0.0 && tokens_per_byte <= 1.0) {
            return None;
        }
        // Within 1..=1e6 after the check: the cast cannot truncate.
        let per_million = (tokens_per_byte * 1_000_000.0).ceil() as u32;
        Some(Self::Bytes { per_million: per_million.clamp(1, 1_000_000) })
    }

    /// The prompt tokens of a request `body` to `endpoint` counted this way, given its upper
    /// bound `prompt_bound` ([`crate::dialect::RequestSummary::prompt_bound`]). Never above
    /// `prompt_bound`.
    ///
    /// - A tokenizer counts a chat prompt ([`count_prompt`]: the body parsed once) and an
    ///   embeddings input ([`count_embeddings_input`]); for the Responses and Messages
    ///   dialects, whose prompt format no tokenizer here reproduces, the bound itself.
    /// - Bytes scale the body's bytes and keep the dialect's fixed tokens; an embeddings
    ///   input's token ids count one each, unscaled.
    pub fn prompt_tokens(self, endpoint: Endpoint, body: &[u8], prompt_bound: u64) -> u64 {
        match (self, endpoint) {
            (Self::Tokenizer(encoding), Endpoint::Chat) => {
                let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
                count_prompt(encoding, &parsed).min(prompt_bound)
            }
            (Self::Tokenizer(encoding), Endpoint::Embeddings) => {
                let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
                count_embeddings_input(Some(encoding), &parsed).min(prompt_bound)
            }
            (Self::Tokenizer(_), Endpoint::Responses | Endpoint::Messages) => prompt_bound,
            (Self::Bytes { per_million }, Endpoint::Embeddings) => {
                let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
                let (text_bytes, token_ids) = embeddings_input_parts(&parsed);
                scale(text_bytes, per_million).saturating_add(token_ids).min(prompt_bound)
            }
            (Self::Bytes { per_million }, _) => {
                let bytes = u64::try_from(body.len()).unwrap_or(u64::MAX).min(prompt_bound);
                let fixed = prompt_bound - bytes;
                fixed.saturating_add(scale(bytes, per_million)).min(prompt_bound)
            }
        }
    }
}

/// `bytes` at `per_million` millionths of a token each, rounded up.
fn scale(bytes: u64, per_million: u32) -> u64 {
    let scaled = u128::from(bytes) * u128::from(per_million);
    u64::try_from(scaled.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// The bytes of an embeddings request's text inputs and the number of its token ids.
fn embeddings_input_parts(body: &Value) -> (u64, u64) {
    let (mut text, mut ids) = (0_u64, 0_u64);
    let mut add = |value: &Value| match value {
        Value::String(s) => text = text.saturating_add(s.len() as u64),
        Value::Number(_) => ids = ids.saturating_add(1),
        Value::Array(tokens) => ids = ids.saturating_add(tokens.len() as u64),
        _ => {}
    };
    match body.get("input") {
        Some(Value::Array(entries)) => entries.iter().for_each(&mut add),
        Some(other) => add(other),
        None => {}
    }
    (text, ids)
}

/// The tokens of an embeddings request's `input`: its texts counted with `encoding` (at one
/// token per byte without one), its token ids one each.
pub fn count_embeddings_input(encoding: Option<Encoding>, body: &Value) -> u64 {
    let mut tokens = 0_u64;
    let mut add = |value: &Value| {
        let n = match value {
            Value::String(s) => encoding.map_or(s.len() as u64, |e| count_text(e, s)),
            Value::Number(_) => 1,
            Value::Array(ids) => ids.len() as u64,
            _ => 0,
        };
        tokens = tokens.saturating_add(n);
    };
    match body.get("input") {
        Some(Value::Array(entries)) => entries.iter().for_each(&mut add),
        Some(other) => add(other),
        None => {}
    }
    tokens
}

/// The encoding used to estimate `model`'s tokens.
pub fn encoding_for_model(model: &str) -> Encoding {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    const O200K: [&str; 7] = ["gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4"];
    if O200K.iter().any(|p| name.starts_with(p)) {
        Encoding::O200k
    } else {
        Encoding::Cl100k
    }
}

fn bpe(encoding: Encoding) -> Option<&'static CoreBPE> {
    static CL100K: OnceLock<Option<CoreBPE>> = OnceLock::new();
    static O200K: OnceLock<Option<CoreBPE>> = OnceLock::new();
    let cell = match encoding {
        Encoding::Cl100k => &CL100K,
        Encoding::O200k => &O200K,
    };
    cell.get_or_init(|| {
        let loaded = match encoding {
            Encoding::Cl100k => tiktoken_rs::cl100k_base(),
            Encoding::O200k => tiktoken_rs::o200k_base(),
        };
        loaded
            .map_err(|e| {
                tracing::error!(error = %e, ?encoding, "loading the tokenizer failed; estimating 4 bytes per token");
            })
            .ok()
    })
    .as_ref()
}

/// Loads `encoding`'s tables now (blocking, tens of milliseconds), so the first estimate
/// does not pay for it.
pub fn warm_up(encoding: Encoding) {
    let _ = bpe(encoding);
}

/// Tokens of `text` (special-token text counts as ordinary text).
pub fn count_text(encoding: Encoding, text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    let n = match bpe(encoding) {
        Some(bpe) => bpe.encode_ordinary(text).len(),
        None => text.len().div_ceil(4),
    };
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Tokens of a chat request's `messages` in OpenAI's chat format (see the module docs);
/// 0 when the body has no messages.
pub fn count_prompt(encoding: Encoding, body: &Value) -> u64 {
    prompt_with(body, |text| count_parts(encoding, text))
}

/// The chat format's tokens of `body`'s `messages`, counting each message's text (role,
/// content, name and tool calls, newline-separated) with `count_text`.
fn prompt_with(body: &Value, count_text: impl Fn(&str) -> u64) -> u64 {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return 0;
    };
    let mut tokens = REPLY_PRIMING_TOKENS;
    for message in messages {
        tokens = tokens.saturating_add(TOKENS_PER_MESSAGE);
        let mut text = String::new();
        if let Some(role) = message.get("role").and_then(Value::as_str) {
            text.push_str(role);
            text.push('\n');
        }
        push_content(&mut text, message.get("content"));
        if let Some(name) = message.get("name").and_then(Value::as_str) {
            tokens = tokens.saturating_add(TOKENS_PER_NAME);
            text.push_str(name);
            text.push('\n');
        }
        push_tool_calls(&mut text, message.get("tool_calls"));
        tokens = tokens.saturating_add(count_text(&text));
    }
    for field in PROMPT_FIELDS {
        let Some(value) = body.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        let definitions = value.as_array().map_or(0, Vec::len) as u64;
        tokens = tokens
            .saturating_add(TOKENS_PER_FIELD)
            .saturating_add(TOKENS_PER_DEFINITION.saturating_mul(definitions))
            .saturating_add(count_text(&value.to_string()));
    }
    tokens
}

/// Tokens of the texts of a non-streamed answer's choices (`message.content`, `refusal`,
/// tool calls).
pub fn count_completion_json(encoding: Encoding, body: &Value) -> u64 {
    let mut text = String::new();
    for choice in body.get("choices").and_then(Value::as_array).into_iter().flatten() {
        if let Some(message) = choice.get("message") {
            push_content(&mut text, message.get("content"));
            push_content(&mut text, message.get("refusal"));
            push_tool_calls(&mut text, message.get("tool_calls"));
        }
    }
    count_parts(encoding, &text)
}

/// Counts newline-separated parts one by one (the separators are not tokens of their own).
fn count_parts(encoding: Encoding, text: &str) -> u64 {
    text.split('\n').map(|part| count_text(encoding, part)).sum()
}

/// Appends a `content` value: a string, or the `text` of each content part.
fn push_content(out: &mut String, content: Option<&Value>) {
    match content {
        Some(Value::String(s)) => {
            out.push_str(s);
            out.push('\n');
        }
        Some(Value::Array(parts)) => {
            for text in parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)) {
                out.push_str(text);
                out.push('\n');
            }
        }
        _ => {}
    }
}

/// Appends the function names and arguments of `tool_calls`.
fn push_tool_calls(out: &mut String, tool_calls: Option<&Value>) {
    for call in tool_calls.and_then(Value::as_array).into_iter().flatten() {
        for field in ["name", "arguments"] {
            if let Some(s) = call.pointer(&format!("/function/{field}")).and_then(Value::as_str) {
                out.push_str(s);
                out.push('\n');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encodings_follow_the_model_family() {
        assert_eq!(encoding_for_model("gpt-4o-mini"), Encoding::O200k);
        assert_eq!(encoding_for_model("openai/o3-mini"), Encoding::O200k);
        assert_eq!(encoding_for_model("gpt-4-turbo"), Encoding::Cl100k);
        assert_eq!(encoding_for_model("echo"), Encoding::Cl100k);
    }

    #[test]
    fn prompt_counting_by_bytes_scales_the_body_not_the_fixed_tokens() {
        assert_eq!(PromptCounting::per_byte(1.0), Some(PromptCounting::ONE_PER_BYTE));
        assert_eq!(
            PromptCounting::per_byte(0.25),
            Some(PromptCounting::Bytes { per_million: 250_000 })
        );
        assert_eq!(PromptCounting::per_byte(1e-9), Some(PromptCounting::Bytes { per_million: 1 }));
        for bad in [0.0, -0.5, 1.01, f64::NAN, f64::INFINITY] {
            assert_eq!(PromptCounting::per_byte(bad), None, "{bad}");
        }
        let body = [b'x'; 101];
        // 101 bytes and 10 fixed tokens of the chat format.
        assert_eq!(PromptCounting::ONE_PER_BYTE.prompt_tokens(Endpoint::Chat, &body, 111), 111);
        let quarter = PromptCounting::Bytes { per_million: 250_000 };
        assert_eq!(quarter.prompt_tokens(Endpoint::Chat, &body, 111), 10 + 26);
        // Never above the bound, whatever it is given.
        assert!(quarter.prompt_tokens(Endpoint::Chat, &body, 5) <= 5);
        assert_eq!(PromptCounting::ONE_PER_BYTE.prompt_tokens(Endpoint::Chat, &body, 5), 5);
        assert_eq!(
            PromptCounting::Tokenizer(Encoding::Cl100k).prompt_tokens(
                Endpoint::Chat,
                b"not json",
                3
            ),
            0
        );
    }

    #[test]
    fn counts_match_openai_tokenizers() {
        // Reference counts from OpenAI's tokenizer (tiktoken): "hello world" is 2 tokens in
        // both encodings; the o200k vocabulary splits this sentence differently from cl100k.
        assert_eq!(count_text(Encoding::Cl100k, "hello world"), 2);
        assert_eq!(count_text(Encoding::O200k, "hello world"), 2);
        assert_eq!(count_text(Encoding::Cl100k, ""), 0);
        // One user message "hello world": 3 (priming) + 3 (message) + 1 ("user") + 2 = 9, the
        // prompt_tokens OpenAI reports for it.
        let body =
            json!({"model": "gpt-4", "messages": [{"role": "user", "content": "hello world"}]});
        assert_eq!(count_prompt(Encoding::Cl100k, &body), 9);
        let parts = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "hello world"}, {"type": "image_url", "image_url": {"url": "x"}}
        ]}]});
        assert_eq!(count_prompt(Encoding::Cl100k, &parts), 9);
        let answer =
            json!({"choices": [{"message": {"role": "assistant", "content": "hello world"}}]});
        assert_eq!(count_completion_json(Encoding::Cl100k, &answer), 2);
    }
}
