//! The price of each priced model, from `[[providers]] prices`, and what a call's worst case
//! assumes of each model: its images' tokens and how its prompt is counted
//! (`[[providers]] tokenizers`).

use crate::config::{ProviderConfig, ProviderKind};
use crate::config::{TokenizerName, DEFAULT_IMAGE_TOKENS, MAX_IMAGE_TOKENS};
use crate::dialect::tokens::{encoding_for_model, Encoding, PromptCounting};
use crate::error::ServiceError;
use aigw_domain::usage::ModelPrice;
use std::collections::HashMap;
use std::sync::Arc;

/// The built-in model's name (`crate::gateway::ECHO_MODEL`, not imported: the
/// gateway sits above this file). Its answers count with OpenAI's tokenizer.
const ECHO_MODEL: &str = "echo";

/// The host of OpenAI's own API, whose models count with OpenAI's tokenizers.
const OPENAI_API_HOST: &str = "api.openai.com";

/// Model name -> price, in integer micro-USD per million tokens. Models without an entry are
/// unpriced: they cost 0 and their usage says `priced: false`.
/// A model served by several deployments (providers) is reserved at the highest of their
/// prices ([`PriceTable::get`]: any of them may serve a call) and billed at the price of the
/// one that served ([`PriceTable::served`]).
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    /// Per model, the highest price of each kind among its deployments.
    prices: Arc<HashMap<String, ModelPrice>>,
    /// Per provider, per model: that deployment's price.
    served: Arc<HashMap<String, HashMap<String, ModelPrice>>>,
    /// Models whose price sets `image_tokens`.
    image_tokens: Arc<HashMap<String, u64>>,
    /// How each model's prompt is counted in a worst case; a model not listed: one token per
    /// byte.
    prompt_counting: Arc<HashMap<String, PromptCounting>>,
    /// Models whose provider sets their context window, in tokens.
    context_windows: Arc<HashMap<String, u64>>,
}

/// The largest context window a model may be given, in tokens (2^24: several times the
/// largest offered today, small enough that a worst case priced with it never overflows).
pub const MAX_CONTEXT_WINDOW: u64 = 1 << 24;

/// Adds `provider`'s `context_windows` to `windows`.
///
/// # Errors
/// A start-up error's text when an entry names a model the provider does not serve or a
/// window outside 1 to [`MAX_CONTEXT_WINDOW`].
fn read_context_windows(
    provider: &ProviderConfig,
    windows: &mut HashMap<String, u64>,
) -> Result<(), String> {
    for (model, tokens) in &provider.context_windows {
        let at = format!("provider {}: context_windows.{model}", provider.name);
        if !provider.models.contains(model) {
            return Err(format!("{at} names a model not in its models list"));
        }
        if !(1..=MAX_CONTEXT_WINDOW).contains(tokens) {
            return Err(format!("{at} must be from 1 to {MAX_CONTEXT_WINDOW} tokens"));
        }
        // Several deployments: the largest window bounds what any of them reads.
        let window = windows.entry(model.clone()).or_insert(0);
        *window = (*window).max(*tokens);
    }
    Ok(())
}

/// How `provider` counts `model`'s prompt when its `tokenizers` say nothing of it: with
/// OpenAI's tokenizer of the model's family for OpenAI's own API and for `echo` (both count
/// their `usage` with it), else one token per byte of the body.
fn default_counting(provider: &ProviderConfig, model: &str) -> PromptCounting {
    let openai_own = provider
        .base_url
        .as_deref()
        .and_then(|url| reqwest::Url::parse(url).ok())
        .is_some_and(|url| url.host_str() == Some(OPENAI_API_HOST));
    if provider.kind == ProviderKind::Echo || openai_own {
        PromptCounting::Tokenizer(encoding_for_model(model))
    } else {
        PromptCounting::ONE_PER_BYTE
    }
}

/// `provider`'s `tokenizers` entry for `model`, as a [`PromptCounting`].
///
/// # Errors
/// A start-up error's text when the entry names neither a tokenizer nor `tokens_per_byte`,
/// a `tokens_per_byte` beside a tokenizer other than `none`, or one outside (0, 1].
fn configured_counting(
    provider: &ProviderConfig,
    model: &str,
    entry: &crate::config::TokenizerConfig,
) -> Result<PromptCounting, String> {
    let at = format!("provider {}: tokenizers.{model}", provider.name);
    match (entry.tokenizer, entry.tokens_per_byte) {
        (None, None) => Err(format!("{at} sets neither tokenizer nor tokens_per_byte")),
        (Some(TokenizerName::O200kBase | TokenizerName::Cl100kBase), Some(_)) => {
            Err(format!("{at}: tokens_per_byte applies only with tokenizer = \"none\""))
        }
        (Some(TokenizerName::O200kBase), None) => Ok(PromptCounting::Tokenizer(Encoding::O200k)),
        (Some(TokenizerName::Cl100kBase), None) => Ok(PromptCounting::Tokenizer(Encoding::Cl100k)),
        (Some(TokenizerName::None) | None, per_byte) => {
            PromptCounting::per_byte(per_byte.unwrap_or(1.0))
                .ok_or_else(|| format!("{at}.tokens_per_byte must be above 0 and at most 1"))
        }
    }
}

impl PriceTable {
    /// Reads the `prices` and `tokenizers` of every provider.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] (a start-up error) when a price or a tokenizer entry names a
    /// model its provider does not serve (a typo would silently leave the model unpriced or
    /// counted otherwise), a price is negative, not finite or absurd, or a tokenizer entry sets
    /// neither `tokenizer` nor `tokens_per_byte`, a `tokens_per_byte` beside a tokenizer other
    /// than `none`, or one outside (0, 1]; or a context window names a model not served or is
    /// outside 1 to [`MAX_CONTEXT_WINDOW`].
    pub fn from_providers(providers: &[ProviderConfig]) -> Result<Self, ServiceError> {
        let mut prices: HashMap<String, ModelPrice> = HashMap::new();
        let mut served: HashMap<String, HashMap<String, ModelPrice>> = HashMap::new();
        let mut image_tokens: HashMap<String, u64> = HashMap::new();
        let mut prompt_counting: HashMap<String, PromptCounting> = HashMap::new();
        let mut context_windows = HashMap::new();
        for provider in providers {
            read_context_windows(provider, &mut context_windows).map_err(ServiceError::Internal)?;
            let mut countings: HashMap<&str, PromptCounting> = HashMap::new();
            for model in &provider.models {
                countings.insert(model, default_counting(provider, model));
            }
            for (model, entry) in &provider.tokenizers {
                if !provider.models.contains(model) {
                    return Err(ServiceError::Internal(format!(
                        "provider {}: tokenizers.{model} names a model not in its models list",
                        provider.name
                    )));
                }
                let counting =
                    configured_counting(provider, model, entry).map_err(ServiceError::Internal)?;
                countings.insert(model, counting);
            }
            for (model, counting) in countings {
                // Deployments that count a model's prompt differently: one token per byte,
                // which bounds every tokenizer's count.
                prompt_counting
                    .entry(model.to_owned())
                    .and_modify(|c| {
                        if *c != counting {
                            *c = PromptCounting::ONE_PER_BYTE;
                        }
                    })
                    .or_insert(counting);
            }
            for (model, price_config) in &provider.prices {
                if !provider.models.contains(model) {
                    return Err(ServiceError::Internal(format!(
                        "provider {}: prices.{model} names a model not in its models list",
                        provider.name
                    )));
                }
                let price = price_config.to_price().map_err(|e| {
                    ServiceError::Internal(format!(
                        "provider {}: prices.{model}: {e}",
                        provider.name
                    ))
                })?;
                served.entry(provider.name.clone()).or_default().insert(model.clone(), price);
                prices.entry(model.clone()).and_modify(|p| *p = p.highest(&price)).or_insert(price);
                if let Some(tokens) = price_config.image_tokens {
                    if tokens > MAX_IMAGE_TOKENS {
                        return Err(ServiceError::Internal(format!(
                            "provider {}: prices.{model}.image_tokens must be at most \
                             {MAX_IMAGE_TOKENS}",
                            provider.name
                        )));
                    }
                    let most = image_tokens.entry(model.clone()).or_insert(0);
                    *most = (*most).max(tokens);
                }
            }
        }
        // The built-in model, unless a provider serves a model of that name.
        prompt_counting
            .entry(ECHO_MODEL.to_owned())
            .or_insert_with(|| PromptCounting::Tokenizer(encoding_for_model(ECHO_MODEL)));
        Ok(Self {
            prices: Arc::new(prices),
            served: Arc::new(served),
            image_tokens: Arc::new(image_tokens),
            prompt_counting: Arc::new(prompt_counting),
            context_windows: Arc::new(context_windows),
        })
    }

    /// How `model`'s prompt is counted in a call's worst case (one token per byte of the body
    /// for a model no provider serves).
    pub fn prompt_counting(&self, model: &str) -> PromptCounting {
        self.prompt_counting.get(model).copied().unwrap_or(PromptCounting::ONE_PER_BYTE)
    }

    /// The most prompt tokens one image costs with `model`: its price's `image_tokens`, else
    /// [`DEFAULT_IMAGE_TOKENS`].
    pub fn image_tokens(&self, model: &str) -> u64 {
        self.image_tokens.get(model).copied().unwrap_or(DEFAULT_IMAGE_TOKENS)
    }

    /// The context window of `model` in tokens, when its provider sets one.
    pub fn context_window(&self, model: &str) -> Option<u64> {
        self.context_windows.get(model).copied()
    }

    /// The price `model` is reserved at, if it has one: of each kind, the highest among its
    /// deployments.
    pub fn get(&self, model: &str) -> Option<&ModelPrice> {
        self.prices.get(model)
    }

    /// The price of `provider`'s deployment of `model`, which a call it served is billed at;
    /// `None` when that deployment has none.
    pub fn served(&self, provider: &str, model: &str) -> Option<&ModelPrice> {
        self.served.get(provider)?.get(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TokenizerConfig;
    use std::collections::BTreeMap;

    fn provider(base_url: &str, tokenizers: &[(&str, TokenizerConfig)]) -> ProviderConfig {
        ProviderConfig {
            name: "p".into(),
            kind: ProviderKind::Openai,
            base_url: Some(base_url.into()),
            api_key: None,
            models: vec!["gpt-4o".into(), "gpt-4".into(), "llama".into()],
            prices: BTreeMap::new(),
            tokenizers: tokenizers.iter().map(|(m, c)| ((*m).to_owned(), *c)).collect(),
            ..ProviderConfig::default()
        }
    }

    fn table(providers: &[ProviderConfig]) -> Result<PriceTable, String> {
        PriceTable::from_providers(providers).map_err(|e| e.to_string())
    }

    #[test]
    fn only_openai_s_own_api_and_echo_count_with_a_tokenizer_by_default() {
        let own = table(&[provider("https://api.openai.com/v1", &[])]).unwrap_or_default();
        assert_eq!(own.prompt_counting("gpt-4o"), PromptCounting::Tokenizer(Encoding::O200k));
        assert_eq!(own.prompt_counting("gpt-4"), PromptCounting::Tokenizer(Encoding::Cl100k));
        assert_eq!(own.prompt_counting("echo"), PromptCounting::Tokenizer(Encoding::Cl100k));
        assert_eq!(own.prompt_counting("unknown"), PromptCounting::ONE_PER_BYTE);
        for other in [
            "https://openrouter.ai/api/v1",
            "http://127.0.0.1:8000/v1",
            "https://api.openai.com.evil.example/v1",
            "https://x.api.openai.com/v1",
        ] {
            let compatible = table(&[provider(other, &[])]).unwrap_or_default();
            assert_eq!(
                compatible.prompt_counting("gpt-4o"),
                PromptCounting::ONE_PER_BYTE,
                "{other}"
            );
        }
    }

    #[test]
    fn a_model_s_entry_names_its_tokenizer_or_its_tokens_per_byte() {
        let entry = |tokenizer, tokens_per_byte| TokenizerConfig { tokenizer, tokens_per_byte };
        let declared = table(&[provider(
            "http://127.0.0.1:8000/v1",
            &[
                ("gpt-4o", entry(Some(TokenizerName::O200kBase), None)),
                ("gpt-4", entry(Some(TokenizerName::None), None)),
                ("llama", entry(None, Some(0.5))),
            ],
        )])
        .unwrap_or_default();
        assert_eq!(declared.prompt_counting("gpt-4o"), PromptCounting::Tokenizer(Encoding::O200k));
        assert_eq!(declared.prompt_counting("gpt-4"), PromptCounting::ONE_PER_BYTE);
        assert_eq!(
            declared.prompt_counting("llama"),
            PromptCounting::Bytes { per_million: 500_000 }
        );
        let own = table(&[provider(
            "https://api.openai.com/v1",
            &[("gpt-4o", entry(Some(TokenizerName::None), None))],
        )])
        .unwrap_or_default();
        assert_eq!(own.prompt_counting("gpt-4o"), PromptCounting::ONE_PER_BYTE);
        for (model, bad, says) in [
            ("mistral", entry(Some(TokenizerName::O200kBase), None), "not in its models list"),
            ("llama", entry(None, None), "neither"),
            ("llama", entry(Some(TokenizerName::Cl100kBase), Some(0.5)), "only with"),
            ("llama", entry(None, Some(0.0)), "above 0"),
            ("llama", entry(Some(TokenizerName::None), Some(1.5)), "at most 1"),
            ("llama", entry(None, Some(f64::NAN)), "above 0"),
        ] {
            let error = table(&[provider("http://127.0.0.1:8000/v1", &[(model, bad)])])
                .err()
                .unwrap_or_default();
            assert!(error.contains(says), "{model} {bad:?}: {error}");
        }
    }
}
