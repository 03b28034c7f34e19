//! The price of each priced model, from `[[providers]] prices`.

use crate::config::ProviderConfig;
use crate::config::{DEFAULT_IMAGE_TOKENS, MAX_IMAGE_TOKENS};
use crate::error::ServiceError;
use aigw_domain::usage::ModelPrice;
use std::collections::HashMap;
use std::sync::Arc;

/// Model name -> price, in integer micro-USD per million tokens. Models without an entry are
/// unpriced: they cost 0 and their usage says `priced: false`.
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    prices: Arc<HashMap<String, ModelPrice>>,
    /// Models whose price sets `image_tokens`.
    image_tokens: Arc<HashMap<String, u64>>,
}

impl PriceTable {
    /// Reads the `prices` of every provider.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] (a start-up error) when a price names a model its provider
    /// does not serve (a typo would silently leave the model unpriced), or is negative, not
    /// finite or absurd.
    pub fn from_providers(providers: &[ProviderConfig]) -> Result<Self, ServiceError> {
        let mut prices = HashMap::new();
        let mut image_tokens = HashMap::new();
        for provider in providers {
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
                prices.insert(model.clone(), price);
                if let Some(tokens) = price_config.image_tokens {
                    if tokens > MAX_IMAGE_TOKENS {
                        return Err(ServiceError::Internal(format!(
                            "provider {}: prices.{model}.image_tokens must be at most \
                             {MAX_IMAGE_TOKENS}",
                            provider.name
                        )));
                    }
                    image_tokens.insert(model.clone(), tokens);
                }
            }
        }
        Ok(Self { prices: Arc::new(prices), image_tokens: Arc::new(image_tokens) })
    }

    /// The most prompt tokens one image costs with `model`: its price's `image_tokens`, else
    /// [`DEFAULT_IMAGE_TOKENS`].
    pub fn image_tokens(&self, model: &str) -> u64 {
        self.image_tokens.get(model).copied().unwrap_or(DEFAULT_IMAGE_TOKENS)
    }

    /// The price of `model`, if it has one.
    pub fn get(&self, model: &str) -> Option<&ModelPrice> {
        self.prices.get(model)
    }
}
