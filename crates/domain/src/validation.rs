//! The `field` / `issue` pair carried by every `invalid_request` error (seed §7).

use std::fmt;

/// A client error in one request field: which field (`field`, a JSON path such as
/// `permissions[1]` or `email`) and what is wrong with it (`issue`, plain English that never
/// quotes a submitted secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FieldError {
    /// Name (JSON path) of the offending field, e.g. `"email"` or `"permissions[2]"`.
    pub field: String,
    /// What is wrong, e.g. `"is not a valid e-mail address"`.
    pub issue: String,
}

impl FieldError {
    /// A field error for `field` with `issue`.
    pub fn new(field: impl Into<String>, issue: impl Into<String>) -> Self {
        Self { field: field.into(), issue: issue.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.issue)
    }
}
