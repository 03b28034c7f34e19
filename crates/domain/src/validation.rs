//! The `field` / `issue` pair carried by every `invalid_request` error.

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

/// The issue of a string that contains U+0000 (NUL): PostgreSQL `text` cannot hold it, so no
/// field of any request may carry it.
pub const NUL_ISSUE: &str = "must not contain the NUL character (U+0000)";

/// Checks that request field `field` holds no U+0000 (NUL).
///
/// # Errors
/// [`FieldError`] on `field` with [`NUL_ISSUE`] when `value` contains U+0000.
pub fn refuse_nul(field: &str, value: &str) -> Result<(), FieldError> {
    if value.contains('\0') {
        Err(FieldError::new(field, NUL_ISSUE))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_refused_naming_the_field() {
        assert_eq!(refuse_nul("email", "ann@example.com"), Ok(()));
        let err = refuse_nul("email", "a\u{0}@x.io").err();
        assert_eq!(err, Some(FieldError::new("email", NUL_ISSUE)));
    }
}
