//! Token estimates with OpenAI's own byte-pair encodings (tiktoken-rs, whose BPE tables are
//! compiled into the binary: no download, works offline), used when a provider reports no
//! `usage`.
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
