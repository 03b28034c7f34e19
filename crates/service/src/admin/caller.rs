//! The proof that a caller may administer ([`Admin`]), which the administrative use cases
//! and the audit trail's administrative reads take.

/// Proof that a caller may administer: made only by [`Administration::authorize_admin`](crate::admin::Administration::authorize_admin), taken
/// by every administrative use case, so the check happens once per request and cannot be
/// forgotten.
#[derive(Debug, Clone)]
pub struct Admin {
    pub(super) user_id: String,
    pub(super) actor: String,
}

impl Admin {
    /// The acting administrator's user id.
    pub fn user_id(&self) -> &str {
        &self.user_id
    }

    /// Who acts, for the audit trail: the API key's id, or the user's for an access token.
    pub fn actor(&self) -> &str {
        &self.actor
    }
}
