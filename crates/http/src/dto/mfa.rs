//! Bodies of the second-factor endpoints (`/auth/mfa…`, `POST /auth/login/mfa`) and the
//! login answer's two shapes, with their OpenAPI schemas. `Debug` never prints a password,
//! code, secret or token.

use crate::dto::TokenSetDto;
use aigw_domain::time::format_timestamp;
use aigw_service::mfa::{Enrollment, MfaStatus, RecoveryCodes};
use aigw_service::{MfaChallenge, SecondFactor};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /auth/mfa/totp/confirm` body.
#[derive(Deserialize, ToSchema)]
pub(crate) struct MfaConfirmRequest {
    /// The 6 digits the authenticator app shows now (spaces ignored).
    #[schema(example = "123456", max_length = 16)]
    pub(crate) code: String,
}

/// `POST /auth/mfa/totp/disable` and `POST /auth/mfa/recovery-codes` body: the password and
/// exactly one of `code` and `recovery_code`.
#[derive(Deserialize, ToSchema)]
pub(crate) struct MfaVerifyRequest {
    /// The account's password.
    #[schema(max_length = 256)]
    pub(crate) password: String,
    /// A current code of the authenticator app (6 digits).
    #[schema(example = "123456", max_length = 16)]
    pub(crate) code: Option<String>,
    /// One of the unused recovery codes (`xxxx-xxxx-xxxx-xxxx`; hyphens, spaces and case
    /// ignored), instead of `code`.
    #[schema(example = "7hq2-x9kd-3mnp-4rtv", max_length = 64)]
    pub(crate) recovery_code: Option<String>,
}

impl MfaVerifyRequest {
    /// The second factor the body carries.
    ///
    /// # Errors
    /// 400 naming `code` or `recovery_code` (neither, both, or malformed).
    pub(crate) fn factor(&self) -> Result<SecondFactor, aigw_domain::FieldError> {
        SecondFactor::from_fields(self.code.as_deref(), self.recovery_code.as_deref())
    }
}

/// `POST /auth/login/mfa` body: the challenge's token and exactly one of `code` and
/// `recovery_code`.
#[derive(Deserialize, ToSchema)]
pub(crate) struct LoginMfaRequest {
    /// The `mfa_token` of the login's answer (`aigwm_…`).
    pub(crate) mfa_token: String,
    /// A current code of the authenticator app (6 digits).
    #[schema(example = "123456", max_length = 16)]
    pub(crate) code: Option<String>,
    /// One of the unused recovery codes, instead of `code`.
    #[schema(example = "7hq2-x9kd-3mnp-4rtv", max_length = 64)]
    pub(crate) recovery_code: Option<String>,
}

impl LoginMfaRequest {
    /// The second factor the body carries.
    ///
    /// # Errors
    /// 400 naming `code` or `recovery_code` (neither, both, or malformed).
    pub(crate) fn factor(&self) -> Result<SecondFactor, aigw_domain::FieldError> {
        SecondFactor::from_fields(self.code.as_deref(), self.recovery_code.as_deref())
    }
}

/// `POST /auth/mfa/totp/enroll` answer: the new secret, shown once.
#[derive(Serialize, ToSchema)]
pub(crate) struct MfaEnrollmentData {
    /// The TOTP secret, base32 (RFC 4648, no padding), for typing into an app.
    pub(crate) secret: String,
    /// `otpauth://totp/<issuer>:<email>?secret=…&issuer=…` (SHA-1, 6 digits, 30 s).
    pub(crate) otpauth_uri: String,
    /// The URI as a QR code: an SVG document.
    pub(crate) qr_svg: String,
    /// Always `false`: the factor is on once `POST /auth/mfa/totp/confirm` took a code.
    pub(crate) enabled: bool,
}

impl From<Enrollment> for MfaEnrollmentData {
    fn from(e: Enrollment) -> Self {
        Self { secret: e.secret, otpauth_uri: e.otpauth_uri, qr_svg: e.qr_svg, enabled: false }
    }
}

/// `POST /auth/mfa/totp/confirm` and `POST /auth/mfa/recovery-codes` answer: the recovery
/// codes, shown once.
#[derive(Serialize, ToSchema)]
pub(crate) struct MfaRecoveryCodesData {
    /// Always `true`.
    pub(crate) enabled: bool,
    /// When the factor was turned on, RFC 3339 UTC.
    pub(crate) enabled_at: String,
    /// Ten single-use recovery codes (`xxxx-xxxx-xxxx-xxxx`); earlier ones no longer work.
    pub(crate) recovery_codes: Vec<String>,
}

impl From<RecoveryCodes> for MfaRecoveryCodesData {
    fn from(r: RecoveryCodes) -> Self {
        Self { enabled: true, enabled_at: format_timestamp(r.enabled_at), recovery_codes: r.codes }
    }
}

/// `GET /auth/mfa` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MfaStatusData {
    /// Whether the TOTP factor is on.
    pub(crate) enabled: bool,
    /// When it was turned on, RFC 3339 UTC, or null.
    pub(crate) enabled_at: Option<String>,
    /// Whether an enrollment waits for its confirming code.
    pub(crate) pending: bool,
    /// Unused recovery codes (0 when the factor is off).
    pub(crate) recovery_codes_left: u32,
    /// The methods a login may complete with: `["totp", "recovery_code"]` when on, else `[]`.
    pub(crate) methods: Vec<String>,
}

impl From<MfaStatus> for MfaStatusData {
    fn from(s: MfaStatus) -> Self {
        let methods = if s.enabled { mfa_methods() } else { Vec::new() };
        Self {
            enabled: s.enabled,
            enabled_at: s.enabled_at.map(format_timestamp),
            pending: s.pending,
            recovery_codes_left: s.recovery_codes_left,
            methods,
        }
    }
}

/// `POST /auth/mfa/totp/disable` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MfaDisabledData {
    /// Always `false`.
    pub(crate) enabled: bool,
}

/// `POST /auth/login` answer for an account whose second factor is on: no tokens yet;
/// complete with `POST /auth/login/mfa`.
#[derive(Serialize, ToSchema)]
pub(crate) struct MfaChallengeData {
    /// Always `true`.
    pub(crate) mfa_required: bool,
    /// The challenge's token (`aigwm_…`), single-use, for `POST /auth/login/mfa`.
    pub(crate) mfa_token: String,
    /// Seconds until the challenge expires (`auth.mfa_challenge_ttl_secs`, 300 by default).
    pub(crate) expires_in: u64,
    /// When it expires, RFC 3339 UTC.
    pub(crate) expires_at: String,
    /// What may complete it: `totp` (`code`) and `recovery_code`.
    pub(crate) methods: Vec<String>,
}

impl From<MfaChallenge> for MfaChallengeData {
    fn from(c: MfaChallenge) -> Self {
        Self {
            mfa_required: true,
            mfa_token: c.mfa_token,
            expires_in: c.expires_in,
            expires_at: format_timestamp(c.expires_at),
            methods: mfa_methods(),
        }
    }
}

/// `POST /auth/login` answer: the token set, or (second factor on) an MFA challenge.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum LoginData {
    /// Logged in: the token set.
    Tokens(TokenSetDto),
    /// The password was right and the second factor is on: complete the login with a code.
    MfaRequired(MfaChallengeData),
}

fn mfa_methods() -> Vec<String> {
    vec!["totp".to_owned(), "recovery_code".to_owned()]
}

impl std::fmt::Debug for MfaConfirmRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MfaConfirmRequest").field("code", &"***").finish()
    }
}

impl std::fmt::Debug for MfaVerifyRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MfaVerifyRequest")
            .field("password", &"***")
            .field("code", &self.code.as_ref().map(|_| "***"))
            .field("recovery_code", &self.recovery_code.as_ref().map(|_| "***"))
            .finish()
    }
}

impl std::fmt::Debug for LoginMfaRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginMfaRequest")
            .field("mfa_token", &"***")
            .field("code", &self.code.as_ref().map(|_| "***"))
            .field("recovery_code", &self.recovery_code.as_ref().map(|_| "***"))
            .finish()
    }
}

impl std::fmt::Debug for MfaEnrollmentData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MfaEnrollmentData").field("secret", &"***").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for MfaRecoveryCodesData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MfaRecoveryCodesData")
            .field("enabled_at", &self.enabled_at)
            .field("recovery_codes", &self.recovery_codes.len())
            .finish()
    }
}

impl std::fmt::Debug for MfaChallengeData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MfaChallengeData")
            .field("mfa_token", &"***")
            .field("expires_in", &self.expires_in)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_secrets() {
        let body = MfaVerifyRequest {
            password: "TOPSECRET".into(),
            code: Some("123456".into()),
            recovery_code: None,
        };
        let shown = format!("{body:?}");
        assert!(!shown.contains("TOPSECRET") && !shown.contains("123456"), "{shown}");
        let login = LoginMfaRequest {
            mfa_token: "aigwm_TOPSECRET".into(),
            code: None,
            recovery_code: Some("abcd-TOPSECRET".into()),
        };
        assert!(!format!("{login:?}").contains("TOPSECRET"));
    }
}
