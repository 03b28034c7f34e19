//! The price of each priced model, from `[[providers]] prices` (issue 8).

use crate::config::ProviderConfig;
use crate::error::ServiceError;
use aigw_domain::usage::ModelPrice;
use std::collections::HashMap;
use std::sync::Arc;

/// Model name -> price, in integer micro-USD per million tokens. Models without an entry are
/// unpriced: they cost 0 and their usage says `priced: false`.
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    prices: Arc<HashMap<String, ModelPrice>>,
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
        for provider in providers {
            for (model, price) in &provider.prices {
                if !provider.models.contains(model) {
                    return Err(ServiceError::Internal(format!(
                        "provider {}: prices.{model} names a model not in its models list",
                        provider.name
                    )));
                }
                let price = price.to_price().map_err(|e| {
                    ServiceError::Internal(format!(
                        "provider {}: prices.{model}: {e}",
                        provider.name
                    ))
                })?;
                prices.insert(model.clone(), price);
            }
        }
        Ok(Self { prices: Arc::new(prices) })
    }

    /// The price of `model`, if it has one.
    pub fn get(&self, model: &str) -> Option<&ModelPrice> {
        self.prices.get(model)
    }
}
