//! The policy fields of an API key request (create and PATCH), parsed and validated into
//! the stored [`ApiKeyPolicy`] / [`ApiKeyChanges`]. Every error names its field.

use aigw_domain::key_policy::{rate_limit, usd_to_micros};
use aigw_domain::{
    BudgetMode, BudgetPeriod, FieldError, KeyMetadata, ModelPatterns, PermissionSet, UserName,
};
use aigw_persistence::models::{ApiKeyChanges, ApiKeyPolicy};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// The limits of a key as requested (still unvalidated); `None`: not set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyPolicyRequest {
    /// Model names or `*` globs.
    pub allowed_models: Option<Vec<String>>,
    /// Spend allowed per period, USD.
    pub max_budget_usd: Option<f64>,
    /// `daily`, `weekly`, `monthly` or `total`.
    pub budget_period: Option<String>,
    /// Requests per minute.
    pub rpm_limit: Option<i64>,
    /// Tokens per minute.
    pub tpm_limit: Option<i64>,
    /// String metadata.
    pub metadata: Option<BTreeMap<String, String>>,
    /// `refuse` (default) or `clamp`: what the budget does with a call whose worst case does
    /// not fit.
    pub budget_mode: Option<String>,
}

impl KeyPolicyRequest {
    /// Validates every field.
    ///
    /// # Errors
    /// [`FieldError`] naming the first invalid field.
    pub(crate) fn parse(self) -> Result<ApiKeyPolicy, FieldError> {
        Ok(ApiKeyPolicy {
            allowed_models: self.allowed_models.as_deref().map(ModelPatterns::parse).transpose()?,
            max_budget_micros: self.max_budget_usd.map(usd_to_micros).transpose()?,
            budget_period: self.budget_period.as_deref().map(BudgetPeriod::parse).transpose()?,
            rpm_limit: self.rpm_limit.map(|l| rate_limit(l, "rpm_limit")).transpose()?,
            tpm_limit: self.tpm_limit.map(|l| rate_limit(l, "tpm_limit")).transpose()?,
            metadata: self.metadata.map(KeyMetadata::parse).transpose()?,
            budget_mode: self.budget_mode.as_deref().map(BudgetMode::parse).transpose()?,
        })
    }
}

/// A PATCH of a key as requested: `None` leaves a field alone, `Some(None)` (JSON `null`)
/// clears it. `name` and `permissions` cannot be cleared.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiKeyPatch {
    /// New label.
    pub name: Option<Option<String>>,
    /// New permissions.
    pub permissions: Option<Option<Vec<String>>>,
    /// New expiry (RFC 3339, in the future), or `null` for none.
    pub expires_at: Option<Option<String>>,
    /// See [`KeyPolicyRequest::allowed_models`].
    pub allowed_models: Option<Option<Vec<String>>>,
    /// See [`KeyPolicyRequest::max_budget_usd`].
    pub max_budget_usd: Option<Option<f64>>,
    /// See [`KeyPolicyRequest::budget_period`].
    pub budget_period: Option<Option<String>>,
    /// See [`KeyPolicyRequest::rpm_limit`].
    pub rpm_limit: Option<Option<i64>>,
    /// See [`KeyPolicyRequest::tpm_limit`].
    pub tpm_limit: Option<Option<i64>>,
    /// See [`KeyPolicyRequest::metadata`].
    pub metadata: Option<Option<BTreeMap<String, String>>>,
    /// See [`KeyPolicyRequest::budget_mode`].
    pub budget_mode: Option<Option<String>>,
}

/// Applies `parse` to a present, non-null value.
fn each<T, U>(
    value: Option<Option<T>>,
    parse: impl FnOnce(T) -> Result<U, FieldError>,
) -> Result<Option<Option<U>>, FieldError> {
    value.map(|v| v.map(parse).transpose()).transpose()
}

fn not_null<T>(value: Option<Option<T>>, field: &str) -> Result<Option<T>, FieldError> {
    match value {
        Some(None) => Err(FieldError::new(field, "must not be null")),
        Some(Some(v)) => Ok(Some(v)),
        None => Ok(None),
    }
}

impl ApiKeyPatch {
    /// Validates every present field; `parse_expiry` checks `expires_at` as create does.
    ///
    /// # Errors
    /// [`FieldError`] naming the first invalid field (`null` for `name` or `permissions`).
    pub(crate) fn parse(
        self,
        parse_expiry: impl FnOnce(&str) -> Result<DateTime<Utc>, FieldError>,
    ) -> Result<ApiKeyChanges, FieldError> {
        let name = not_null(self.name, "name")?
            .map(|n| UserName::parse(&n, "name").map(UserName::into_string))
            .transpose()?;
        let permissions = not_null(self.permissions, "permissions")?
            .map(|p| PermissionSet::parse_request(&p))
            .transpose()?;
        Ok(ApiKeyChanges {
            name,
            permissions,
            expires_at: each(self.expires_at, |raw| parse_expiry(&raw))?,
            allowed_models: each(self.allowed_models, |m| ModelPatterns::parse(&m))?,
            max_budget_micros: each(self.max_budget_usd, usd_to_micros)?,
            budget_period: each(self.budget_period, |p| BudgetPeriod::parse(&p))?,
            rpm_limit: each(self.rpm_limit, |l| rate_limit(l, "rpm_limit"))?,
            tpm_limit: each(self.tpm_limit, |l| rate_limit(l, "tpm_limit"))?,
            metadata: each(self.metadata, KeyMetadata::parse)?,
            budget_mode: each(self.budget_mode, |m| BudgetMode::parse(&m))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_expiry(_: &str) -> Result<DateTime<Utc>, FieldError> {
        Err(FieldError::new("expires_at", "test"))
    }

    #[test]
    fn null_clears_and_absent_keeps() {
        let patch = ApiKeyPatch {
            max_budget_usd: Some(None),
            rpm_limit: Some(Some(60)),
            ..ApiKeyPatch::default()
        };
        let changes = patch.parse(no_expiry).unwrap_or_default();
        assert_eq!(changes.max_budget_micros, Some(None));
        assert_eq!(changes.rpm_limit, Some(Some(60)));
        assert_eq!(changes.tpm_limit, None);
        assert!(ApiKeyPatch::default().parse(no_expiry).is_ok_and(|c| c.is_empty()));
    }

    #[test]
    fn name_and_permissions_cannot_be_cleared() {
        let field = |patch: ApiKeyPatch| patch.parse(no_expiry).err().map(|e| e.field);
        assert_eq!(
            field(ApiKeyPatch { name: Some(None), ..Default::default() }),
            Some("name".into())
        );
        assert_eq!(
            field(ApiKeyPatch { permissions: Some(None), ..Default::default() }),
            Some("permissions".into())
        );
        assert_eq!(
            field(ApiKeyPatch { tpm_limit: Some(Some(0)), ..Default::default() }),
            Some("tpm_limit".into())
        );
    }
}
