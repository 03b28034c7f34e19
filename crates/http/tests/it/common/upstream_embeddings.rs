//! The fake upstream's `POST /embeddings` (OpenAI's shape), by the request's `model`:
//!
//! - `emb-nousage`: an answer without `usage`;
//! - `emb-400`: OpenAI's 400 for an input too long;
//! - anything else: one embedding of [`DIMENSIONS`] numbers per input, and `usage` billing
//!   one prompt token per byte of the input's texts, or one per token id
//!   ([`billed_input`]): the most an upstream can bill.

use serde_json::{json, Value};

/// Numbers in each fake embedding.
pub const DIMENSIONS: usize = 3;

/// The prompt tokens the fake bills for `request`'s `input`: one per byte of its texts, one
/// per token id.
pub fn billed_input(request: &Value) -> u64 {
    fn entry(value: &Value) -> u64 {
        match value {
            Value::String(s) => s.len() as u64,
            Value::Number(_) => 1,
            Value::Array(ids) => ids.len() as u64,
            _ => 0,
        }
    }
    match &request["input"] {
        Value::Array(entries) if entries.iter().all(Value::is_number) => entries.len() as u64,
        Value::Array(entries) => entries.iter().map(entry).sum(),
        other => entry(other),
    }
}

/// The number of embeddings `request` asks for.
fn inputs(request: &Value) -> usize {
    match &request["input"] {
        Value::Array(entries) if entries.iter().all(Value::is_number) => 1,
        Value::Array(entries) => entries.len(),
        _ => 1,
    }
}

/// The whole HTTP answer to `request` for `model`.
pub fn answer(model: &str, request: &Value) -> String {
    let (status, body) = match model {
        "emb-400" => (
            "400 Bad Request",
            json!({"error": {"message": "This model's maximum context length is 8192 tokens",
                "type": "invalid_request_error", "param": "input", "code": null}}),
        ),
        _ => {
            let data: Vec<Value> = (0..inputs(request))
                .map(|i| {
                    json!({"object": "embedding", "index": i,
                    "embedding": vec![0.25_f64; DIMENSIONS]})
                })
                .collect();
            let billed = billed_input(request);
            let mut body = json!({"object": "list", "data": data, "model": model,
                "usage": {"prompt_tokens": billed, "total_tokens": billed}});
            if model == "emb-nousage" {
                body.as_object_mut().map(|o| o.remove("usage"));
            }
            ("200 OK", body)
        }
    };
    let body = body.to_string();
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
