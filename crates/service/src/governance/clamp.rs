//! `budget_mode = "clamp"`: a call whose worst case does not fit in what is left of a budget
//! is sent with its output cap lowered to what is left, instead of being refused. The cap is
//! the dialect's: chat's `max_tokens` (and `max_completion_tokens`, where set), shared by its
//! `n` choices; the Responses API's `max_output_tokens`; Anthropic's `max_tokens`. An
//! embeddings call has no output to lower and is refused as in `refuse` mode.
//!
//! What is left pays first for the prompt (at its upper bound, one token per byte of the
//! body, whatever the model's tokenizer: a clamped call runs at the budget's very edge, where
//! a tokenizer's count a little below the upstream's bill would pass it; images at the
//! model's `image_tokens`) and for what cannot be lowered (a `prediction`'s tokens); the rest
//! buys output tokens at the model's output price. When not even one output token per choice
//! fits, the call is refused as in `refuse` mode. The lowered body is admitted like any
//! call, so the clamp can never pass the budget.

use crate::dialect::chat::DEFAULT_COMPLETION_CAP;
use crate::dialect::RequestSummary;
use crate::governance::budget::Budgets;
use aigw_domain::usage::{Endpoint, TokenUsage};
use bytes::Bytes;
use serde_json::Value;

/// Bytes the lowering adds to a body that sets no cap: `,"max_tokens":1048576` at most.
const ADDED_BYTES: u64 = 21;

/// The output cap fields of `endpoint`, the one a lowered body always sets first; `None` for
/// a dialect without one.
fn cap_fields(endpoint: Endpoint) -> Option<&'static [&'static str]> {
    match endpoint {
        Endpoint::Chat => Some(&["max_completion_tokens", "max_tokens"]),
        Endpoint::Responses => Some(&["max_output_tokens"]),
        Endpoint::Messages => Some(&["max_tokens"]),
        Endpoint::Embeddings => None,
    }
}

/// The body of a call (`summary`, `body`) whose output cap is lowered so that its worst case
/// costs at most `left` micro-USD; `None` when not even one output token per choice fits,
/// the model's output is free (nothing to lower), or the dialect has no output cap.
pub(crate) fn clamped_body(
    budgets: &Budgets,
    summary: &RequestSummary,
    body: &[u8],
    left: i64,
) -> Option<Bytes> {
    let fields = cap_fields(summary.endpoint)?;
    let model = summary.model.as_str();
    let mut parsed: Value = serde_json::from_slice(body).ok()?;
    let object = parsed.as_object_mut()?;
    let n = match summary.endpoint {
        Endpoint::Chat => object.get("n").and_then(Value::as_u64).unwrap_or(1).max(1),
        _ => 1,
    };
    let asked = fields
        .iter()
        .find_map(|field| object.get(*field).and_then(Value::as_u64))
        .unwrap_or(DEFAULT_COMPLETION_CAP);
    // What the cap holds beyond the choices' tokens (a prediction's) cannot be lowered.
    let fixed = summary.completion_cap.saturating_sub(asked.saturating_mul(n));
    let image_prompt = budgets.image_prompt(model, summary.images);
    // The lowered body's bound: longer than this body's by the cap added to it, if any (its
    // admission counts the bytes of a model without a tokenizer).
    let capped = fields.iter().any(|field| object.contains_key(*field));
    let prompt_bound = summary.prompt_bound.saturating_add(if capped { 0 } else { ADDED_BYTES });
    let prompt = TokenUsage::new(prompt_bound.saturating_add(image_prompt), fixed);
    let left = left.saturating_sub(budgets.cost_micros(model, &prompt));
    let per_million = budgets.cost_micros(model, &TokenUsage::new(0, 1_000_000));
    if left <= 0 || per_million <= 0 {
        return None;
    }
    let affordable = i128::from(left) * 1_000_000 / i128::from(per_million);
    let per_choice = u64::try_from(affordable / i128::from(n)).ok()?.min(asked);
    if per_choice == 0 || per_choice >= asked {
        return None;
    }
    // Every cap field the caller set is lowered; the last (chat's `max_tokens`) is set when
    // none was.
    let mut lowered = false;
    for field in fields {
        if object.contains_key(*field) {
            object.insert((*field).to_owned(), Value::from(per_choice));
            lowered = true;
        }
    }
    if !lowered {
        let field = fields.last()?;
        object.insert((*field).to_owned(), Value::from(per_choice));
    }
    serde_json::to_vec(&parsed).ok().map(Bytes::from)
}
