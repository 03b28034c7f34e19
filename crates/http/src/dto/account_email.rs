//! Request and response shapes of e-mail verification, e-mail change and password reset.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /auth/email/verify` body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifyEmailRequest {
    /// The token of a verification or e-mail change link (`aigwe_…`, 50 characters).
    #[schema(max_length = 256, example = "aigwe_3hT9…")]
    pub(crate) token: String,
}

impl std::fmt::Debug for VerifyEmailRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyEmailRequest").field("token", &"***").finish()
    }
}

/// `POST /auth/email/change` body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChangeEmailRequest {
    /// The new address.
    #[schema(max_length = 254, example = "new@example.com")]
    pub(crate) email: String,
    /// The current password.
    #[schema(max_length = 256)]
    pub(crate) password: String,
}

impl std::fmt::Debug for ChangeEmailRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeEmailRequest")
            .field("email", &self.email)
            .field("password", &"***")
            .finish()
    }
}

/// A link on its way: `POST /auth/email/verification` and `POST /auth/email/change`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EmailSentData {
    /// The address the link goes to (normalised).
    pub(crate) email: String,
    /// When the link stops working, RFC 3339 UTC.
    pub(crate) expires_at: String,
}

/// `POST /auth/password-reset` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PasswordResetRequest {
    /// The account's address.
    #[schema(max_length = 254, example = "ann@example.com")]
    pub(crate) email: String,
}

/// `POST /auth/password-reset` answer: the same whether or not an account has the address.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PasswordResetAcceptedData {
    /// Always `true`: the request was taken.
    pub(crate) accepted: bool,
}

/// `POST /auth/password-reset/confirm` body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PasswordResetConfirmRequest {
    /// The token of the reset link (`aigwp_…`, 50 characters).
    #[schema(max_length = 256, example = "aigwp_Zq81…")]
    pub(crate) token: String,
    /// The new password: 8 to 256 Unicode code points (configurable minimum), not a common
    /// password.
    #[schema(min_length = 8, max_length = 256)]
    pub(crate) password: String,
}

impl std::fmt::Debug for PasswordResetConfirmRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordResetConfirmRequest")
            .field("token", &"***")
            .field("password", &"***")
            .finish()
    }
}

/// `POST /auth/password-reset/confirm` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PasswordResetDoneData {
    /// How many sessions of the account were ended (every one).
    pub(crate) ended_sessions: usize,
}
