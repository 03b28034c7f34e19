//! `budget_mode = "clamp"`: a call whose worst case does not fit in what is left of a budget
//! is sent with its `max_tokens` lowered to what is left, instead of being refused.
//!
//! What is left pays first for the prompt (at its upper bound, one token per byte of the
//! body, whatever the model's tokenizer: a clamped call runs at the budget's very edge, where
//! a tokenizer's count a little below the upstream's bill would pass it; images at the
//! model's `image_tokens`) and for what cannot be lowered (a `prediction`'s tokens); the rest
//! buys completion tokens at the model's output price, shared by the `n` choices. When not
//! even one completion token per choice fits, the call is refused as in `refuse` mode. The
//! lowered body is admitted like any call, so the clamp can never pass the budget.

use crate::dialect::chat::DEFAULT_COMPLETION_CAP;
use crate::governance::budget::Budgets;
use aigw_domain::usage::TokenUsage;
use bytes::Bytes;
use serde_json::Value;

/// Bytes the lowering adds to a body that sets no cap: `,"max_tokens":1048576` at most.
const ADDED_BYTES: u64 = 21;

/// The body of a call of `model` with `body` (`bound`: its prompt's upper bound and its
/// completion tokens at most, [`crate::dialect::chat::ChatRequestSummary`]'s `prompt_bound`
/// and `completion_cap`; `images` images) whose
/// `max_tokens` (and `max_completion_tokens`, where set) is lowered so that its worst case
/// costs at most `left` micro-USD; `None` when not even one completion token per choice fits,
/// or the model's completions are free (nothing to lower).
pub(crate) fn clamped_body(
    budgets: &Budgets,
    model: &str,
    body: &[u8],
    bound: &TokenUsage,
    images: u64,
    left: i64,
) -> Option<Bytes> {
    let completion_cap = bound.completion_tokens;
    let mut parsed: Value = serde_json::from_slice(body).ok()?;
    let object = parsed.as_object_mut()?;
    let n = object.get("n").and_then(Value::as_u64).unwrap_or(1).max(1);
    let asked = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|field| object.get(*field).and_then(Value::as_u64))
        .unwrap_or(DEFAULT_COMPLETION_CAP);
    // What the cap holds beyond the choices' tokens (a prediction's) cannot be lowered.
    let fixed = completion_cap.saturating_sub(asked.saturating_mul(n));
    let image_prompt = budgets.image_prompt(model, images);
    // The lowered body's bound: longer than this body's by the cap added to it, if any (its
    // admission counts the bytes of a model without a tokenizer).
    let capped = object.contains_key("max_tokens") || object.contains_key("max_completion_tokens");
    let prompt_bound = bound.prompt_tokens.saturating_add(if capped { 0 } else { ADDED_BYTES });
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
    let has_completion_cap = object.contains_key("max_completion_tokens");
    if has_completion_cap {
        object.insert("max_completion_tokens".to_owned(), Value::from(per_choice));
    }
    if object.contains_key("max_tokens") || !has_completion_cap {
        object.insert("max_tokens".to_owned(), Value::from(per_choice));
    }
    serde_json::to_vec(&parsed).ok().map(Bytes::from)
}
