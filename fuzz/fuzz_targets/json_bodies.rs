//! `aigw_http::extract::parse_json` never panics on any body for each JSON request DTO, and its
//! errors never echo a string value (>= 8 chars) of the body; the chat completion validator
//! never panics and always names a field.
#![no_main]

use aigw_domain::FieldError;
use aigw_http::dto::{
    CreateApiKeyRequest, LoginRequest, LogoutRequest, RefreshRequest, RegisterRequest,
};
use aigw_http::extract::parse_json;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Shortest string value whose contents must never show up in an error.
const MIN_SECRET_CHARS: usize = 8;

/// Issue texts `parse_json` writes itself; a piece of a string value that happens to be part
/// of one of them is not counted as an echo.
const FIXED_ISSUES: [&str; 6] = [
    "is invalid",
    "is required",
    "must be a JSON object",
    "is not valid JSON",
    "must not contain the NUL character (U+0000)",
    "is a number out of range",
];

/// Replaces every string value of at least [`MIN_SECRET_CHARS`] characters by as many `x`
/// (object keys are kept: they pick the fields) and returns the replaced strings.
fn mask(value: &mut Value, secrets: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            let n = s.chars().count();
            if n >= MIN_SECRET_CHARS {
                secrets.push(std::mem::replace(s, "x".repeat(n)));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| mask(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| mask(v, secrets)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// A run of at least [`MIN_SECRET_CHARS`] characters of `secret` that `text` contains but
/// `reference` (the same error for the masked body) and the fixed issue texts do not.
fn echoed<'a>(secret: &'a str, text: &str, reference: &str) -> Option<&'a str> {
    let starts: Vec<usize> = secret.char_indices().map(|(i, _)| i).collect();
    (0..starts.len().saturating_sub(MIN_SECRET_CHARS - 1)).find_map(|k| {
        let end = starts.get(k + MIN_SECRET_CHARS).copied().unwrap_or(secret.len());
        let window = &secret[starts[k]..end];
        (text.contains(window)
            && !reference.contains(window)
            && !FIXED_ISSUES.iter().any(|f| f.contains(window)))
        .then_some(window)
    })
}

/// `parse(bytes)` is `parse_json::<Dto>(bytes)` with the value dropped.
type Parse = fn(&[u8]) -> Result<(), FieldError>;

fn check(name: &str, parse: Parse, data: &[u8], masked: Option<(&[u8], &[String])>) {
    let original = parse(data);
    let err = match original {
        Ok(_) => {
            let value = serde_json::from_slice::<Value>(data).ok();
            assert!(value.is_some_and(|v| v.is_object()), "{name}: accepted a non-object");
            return;
        }
        Err(err) => err,
    };
    assert!(!err.field.is_empty() && !err.issue.is_empty(), "{name}: empty error {err:?}");
    let Some((masked, secrets)) = masked else { return };
    let Err(reference) = parse(masked) else {
        // Accepting the masked body but not the original would mean a long string's contents
        // decide acceptance; none of these DTOs has such a field. Not an echo: no assertion.
        return;
    };
    if reference == err {
        return; // The error does not depend on the strings' contents at all.
    }
    for secret in secrets {
        for (part, text, refer) in
            [("issue", &err.issue, &reference.issue), ("field", &err.field, &reference.field)]
        {
            if let Some(window) = echoed(secret, text, refer) {
                panic!(
                    "{name}: error {part} echoes input {window:?} of string value {secret:?}: \
                     {err:?} (with the string masked: {reference:?})"
                );
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let masked = serde_json::from_slice::<Value>(data).ok().and_then(|mut value| {
        let mut secrets = Vec::new();
        mask(&mut value, &mut secrets);
        let bytes = serde_json::to_vec(&value).ok()?;
        (!secrets.is_empty()).then_some((bytes, secrets))
    });
    let masked = masked.as_ref().map(|(b, s)| (b.as_slice(), s.as_slice()));
    let dtos: [(&str, Parse); 5] = [
        ("register", |b| parse_json::<RegisterRequest>(b).map(drop)),
        ("login", |b| parse_json::<LoginRequest>(b).map(drop)),
        ("refresh", |b| parse_json::<RefreshRequest>(b).map(drop)),
        ("logout", |b| parse_json::<LogoutRequest>(b).map(drop)),
        ("create_api_key", |b| parse_json::<CreateApiKeyRequest>(b).map(drop)),
    ];
    for (name, parse) in dtos {
        check(name, parse, data, masked);
    }
    // The chat completion body is read raw and validated borrowed, not by `parse_json`.
    if let Err(err) = aigw_service::gateway::validate_chat_request(data) {
        assert!(!err.field.is_empty() && !err.issue.is_empty(), "chat: empty error {err:?}");
    }
});
