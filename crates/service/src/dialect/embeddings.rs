//! Validation of an embeddings request body (`POST /api/v1/ai/embeddings`, OpenAI's shape)
//! without building a tree of it: `model`, and `input` as a string, an array of strings, an
//! array of token ids or an array of arrays of token ids. `dimensions`, `encoding_format`
//! and `user` are checked for their type and passed through with every other field.
//!
//! An embedding's only billed tokens are its input's: the worst case is the input's bytes
//! (one token per byte bounds any byte-level BPE encoding) or, for token ids, their number;
//! it has no output tokens.

use crate::dialect::summary::RequestSummary;
use aigw_domain::usage::Endpoint;
use aigw_domain::FieldError;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Most entries an `input` array may have (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// The largest `dimensions` accepted (no model offers more than a few thousand).
pub const MAX_DIMENSIONS: u64 = 65_536;

/// The fields the gateway checks, as raw slices of the body; every other field is skipped.
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    dimensions: Option<&'a RawValue>,
    #[serde(borrow, default)]
    encoding_format: Option<&'a RawValue>,
    #[serde(borrow, default)]
    user: Option<&'a RawValue>,
}

/// Checks an embeddings request and summarises it (no stream, no output tokens).
///
/// # Errors
/// [`FieldError`] on `body` (not valid JSON, or not an object), `model` (missing, not a
/// non-empty string), `input` (missing, empty, or not a string, an array of strings, an
/// array of token ids or an array of arrays of token ids; more than [`MAX_INPUTS`] entries),
/// `input[i]` (an entry of another kind than the first, an empty array of tokens),
/// `dimensions` (not an integer from 1 to [`MAX_DIMENSIONS`]), `encoding_format` (not
/// `float` or `base64`) and `user` (not a string), as the OpenAPI description's
/// `EmbeddingRequest` says.
pub fn validate_embeddings_request(body: &[u8]) -> Result<RequestSummary, FieldError> {
    // A derived struct would also take a JSON array (its fields in order): only an object is
    // a request.
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|b| *b != b'{') {
        return Err(if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
            FieldError::new("body", "must be a JSON object")
        } else {
            FieldError::new("body", "is not valid JSON")
        });
    }
    let top: Fields<'_> = serde_json::from_slice(body).map_err(|_| {
        if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
            FieldError::new("body", "must be a JSON object")
        } else {
            FieldError::new("body", "is not valid JSON")
        }
    })?;
    let model = match top.model.filter(|raw| raw.get() != "null") {
        None => return Err(FieldError::new("model", "is required")),
        Some(raw) => serde_json::from_str::<Cow<'_, str>>(raw.get())
            .ok()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| FieldError::new("model", "must be a non-empty string"))?
            .into_owned(),
    };
    let input = top
        .input
        .filter(|raw| raw.get() != "null")
        .ok_or_else(|| FieldError::new("input", "is required"))?;
    let prompt_bound = input_bound(input)?;
    if let Some(raw) = top.dimensions.filter(|raw| raw.get() != "null") {
        let valid = raw.get().parse::<u64>().is_ok_and(|d| (1..=MAX_DIMENSIONS).contains(&d));
        if !valid {
            return Err(FieldError::new(
                "dimensions",
                format!("must be an integer from 1 to {MAX_DIMENSIONS}"),
            ));
        }
    }
    if let Some(raw) = top.encoding_format.filter(|raw| raw.get() != "null") {
        if !matches!(raw.get(), "\"float\"" | "\"base64\"") {
            return Err(FieldError::new("encoding_format", "must be float or base64"));
        }
    }
    if let Some(raw) = top.user.filter(|raw| raw.get() != "null") {
        if serde_json::from_str::<Cow<'_, str>>(raw.get()).is_err() {
            return Err(FieldError::new("user", "must be a string"));
        }
    }
    Ok(RequestSummary {
        endpoint: Endpoint::Embeddings,
        model,
        stream: false,
        has_stream_options: false,
        include_usage: false,
        prompt_bound,
        prompt_floor: 0,
        images: 0,
        completion_cap: 0,
        unbounded_part: None,
    })
}

/// The kinds an `input` array's entries may be (all of one kind).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Entry {
    Text,
    Token,
    Tokens,
}

/// The input's upper bound in tokens: its texts' bytes (decoded), or its token ids' number.
fn input_bound(input: &RawValue) -> Result<u64, FieldError> {
    const SHAPES: &str = "must be a string, an array of strings, an array of token ids or an \
                          array of arrays of token ids";
    let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    match input.get().as_bytes().first() {
        Some(b'"') => {
            let text = serde_json::from_str::<Cow<'_, str>>(input.get())
                .map_err(|_| FieldError::new("input", SHAPES))?;
            if text.is_empty() {
                return Err(FieldError::new("input", "must not be empty"));
            }
            Ok(as_u64(text.len()))
        }
        Some(b'[') => {
            let entries = serde_json::from_str::<Vec<&RawValue>>(input.get())
                .map_err(|_| FieldError::new("input", SHAPES))?;
            if entries.is_empty() {
                return Err(FieldError::new("input", "must not be empty"));
            }
            if entries.len() > MAX_INPUTS {
                return Err(FieldError::new(
                    "input",
                    format!("must have at most {MAX_INPUTS} entries"),
                ));
            }
            let mut kind = None;
            let mut bound = 0_u64;
            for (i, entry) in entries.iter().enumerate() {
                let (this, tokens) = entry_bound(entry).ok_or_else(|| {
                    FieldError::new(
                        format!("input[{i}]"),
                        "must be a non-empty string, a token id or a non-empty array of token ids",
                    )
                })?;
                if *kind.get_or_insert(this) != this {
                    return Err(FieldError::new(
                        format!("input[{i}]"),
                        "must be of the same kind as input[0] (strings, token ids or arrays of \
                         token ids)",
                    ));
                }
                bound = bound.saturating_add(tokens);
            }
            Ok(bound)
        }
        _ => Err(FieldError::new("input", SHAPES)),
    }
}

/// One entry of an `input` array: its kind and its bound in tokens; `None` when it is none of
/// the kinds (or an empty string or array).
fn entry_bound(entry: &RawValue) -> Option<(Entry, u64)> {
    let text = entry.get();
    match text.as_bytes().first()? {
        b'"' => {
            let decoded = serde_json::from_str::<Cow<'_, str>>(text).ok()?;
            let n = u64::try_from(decoded.len()).ok()?;
            (n > 0).then_some((Entry::Text, n))
        }
        b'[' => {
            let tokens = serde_json::from_str::<Vec<u32>>(text).ok()?;
            let n = u64::try_from(tokens.len()).ok()?;
            (n > 0).then_some((Entry::Tokens, n))
        }
        _ => text.parse::<u32>().ok().map(|_| (Entry::Token, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(body: &str) -> Result<u64, String> {
        validate_embeddings_request(body.as_bytes()).map(|s| s.prompt_bound).map_err(|e| e.field)
    }

    #[test]
    fn every_input_shape_is_bounded() {
        assert_eq!(bound(r#"{"model":"m","input":"hello"}"#), Ok(5));
        assert_eq!(bound(r#"{"model":"m","input":"h\u00e9"}"#), Ok(3), "decoded UTF-8 bytes");
        assert_eq!(bound(r#"{"model":"m","input":["ab","cde"]}"#), Ok(5));
        assert_eq!(bound(r#"{"model":"m","input":[1,2,3]}"#), Ok(3));
        assert_eq!(bound(r#"{"model":"m","input":[[1,2],[3]],"dimensions":8}"#), Ok(3));
        let summary = validate_embeddings_request(br#"{"model":"m","input":"x","user":"u"}"#);
        assert!(summary.is_ok_and(|s| s.completion_cap == 0 && !s.stream));
    }

    #[test]
    fn bad_input_names_the_field() {
        for (body, field) in [
            ("[]", "body"),
            ("{", "body"),
            (r#"{"input":"x"}"#, "model"),
            (r#"{"model":"","input":"x"}"#, "model"),
            (r#"{"model":"m"}"#, "input"),
            (r#"{"model":"m","input":""}"#, "input"),
            (r#"{"model":"m","input":[]}"#, "input"),
            (r#"{"model":"m","input":{"a":1}}"#, "input"),
            (r#"{"model":"m","input":7}"#, "input"),
            (r#"{"model":"m","input":["a",1]}"#, "input[1]"),
            (r#"{"model":"m","input":[[1],[]]}"#, "input[1]"),
            (r#"{"model":"m","input":[-1]}"#, "input[0]"),
            (r#"{"model":"m","input":[null]}"#, "input[0]"),
            (r#"{"model":"m","input":"x","dimensions":0}"#, "dimensions"),
            (r#"{"model":"m","input":"x","dimensions":"8"}"#, "dimensions"),
            (r#"{"model":"m","input":"x","encoding_format":"int8"}"#, "encoding_format"),
            (r#"{"model":"m","input":"x","user":5}"#, "user"),
        ] {
            assert_eq!(bound(body).err().as_deref(), Some(field), "{body}");
        }
        let many = format!(r#"{{"model":"m","input":[{}]}}"#, vec!["1"; MAX_INPUTS + 1].join(","));
        assert_eq!(bound(&many).err().as_deref(), Some("input"));
    }
}
