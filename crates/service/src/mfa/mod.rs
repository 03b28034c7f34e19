//! The TOTP second factor (RFC 6238) of an account, end to end: what this module owns.
//!
//! - [`enrollment`]: starting an enrollment (a fresh secret, its `otpauth://` URI and QR
//!   code), confirming it with a first code (the factor is on from then, and ten recovery
//!   codes are shown once), its status, and disabling it (password and a code).
//! - [`recovery`]: the recovery codes: generated, stored as SHA-256 digests, each usable
//!   once; a regeneration (password and a code) replaces them all.
//! - `crate::accounts::mfa_login`: login with the factor on: a right password answers an MFA challenge
//!   instead of tokens; a code completes it into a session whose access tokens carry
//!   `amr: ["pwd", "otp"]`. A challenge is stored as a digest (any node completes it),
//!   expires after `auth.mfa_challenge_ttl_secs`, completes once and dies after five tries.
//! - [`totp`]: the codes themselves: secret, time steps read from [`crate::Clock`], the
//!   window of ±1 step, and the single use of a step (the last accepted step per user, moved
//!   forward by a compare-and-set in the database, so a code works once across nodes).
//! - [`admins`]: `auth.require_mfa_for_admins`, checked where every administrative request
//!   is authorized ([`crate::admin::Administration::authorize_admin`]).
//!
//! The secret must be read back to check a code, so it is stored sealed (XChaCha20-Poly1305,
//! [`crate::seal::Sealer`] with a key derived for this purpose from the signing keys, bound to
//! the user's id); recovery codes and challenge tokens carry 80 and 262 random bits and are
//! stored as SHA-256 digests only.

pub mod admins;
pub mod enrollment;
pub(crate) mod proof;
pub mod recovery;
pub mod totp;

use crate::auth::{Authorized, Principal};
use crate::config::AuthConfig;
use crate::context::ServiceContext;
use crate::credential_cache::CredentialCache;
use crate::db::Db;
use crate::error::ServiceError;
use crate::password::PasswordHasher;
use crate::tokens::TokenIssuer;
use crate::views::TokenSet;
use crate::Clock;
use aigw_domain::access::op;
use aigw_domain::mfa::{RecoveryCode, TotpCode};
use aigw_domain::PasswordPolicy;
use aigw_domain::{FieldError, UserId};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// The TOTP second factor of accounts: enrollment, status, disabling, recovery codes, and
/// the checks that login and the administrative endpoints make with it. Built from the
/// [`ServiceContext`].
#[derive(Debug, Clone)]
pub struct Mfa {
    pub(crate) db: Db,
    pub(crate) clock: Clock,
    pub(crate) cache: CredentialCache,
    pub(crate) config: Arc<AuthConfig>,
    pub(crate) tokens: Arc<TokenIssuer>,
    pub(crate) passwords: PasswordHasher,
    pub(crate) password_policy: PasswordPolicy,
}

/// The answer to every refused password-and-code check (disable, regenerate): it never says
/// which of the two was wrong.
pub(crate) const WRONG_PASSWORD_OR_CODE: &str =
    "the password or the second-factor code is wrong, or the code was already used";

/// A second factor as presented: a TOTP code or a recovery code (validated in form only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecondFactor {
    /// A code of the authenticator app.
    Totp(TotpCode),
    /// One of the recovery codes.
    RecoveryCode(RecoveryCode),
}

impl SecondFactor {
    /// The factor of a request carrying `code` or `recovery_code`, exactly one of them.
    ///
    /// # Errors
    /// [`FieldError`] on `code` when neither is given or it is not 6 digits, on
    /// `recovery_code` when both are given or it is not a recovery code.
    pub fn from_fields(
        code: Option<&str>,
        recovery_code: Option<&str>,
    ) -> Result<Self, FieldError> {
        match (code, recovery_code) {
            (Some(_), Some(_)) => Err(FieldError::new(
                "recovery_code",
                "must not be given together with code; send one of them",
            )),
            (Some(code), None) => Ok(Self::Totp(TotpCode::parse("code", code)?)),
            (None, Some(raw)) => Ok(Self::RecoveryCode(RecoveryCode::parse("recovery_code", raw)?)),
            (None, None) => Err(FieldError::new(
                "code",
                "is required (or recovery_code, one of the recovery codes)",
            )),
        }
    }

    /// The method's name in audit details: `totp` or `recovery_code`.
    pub(crate) fn method(&self) -> &'static str {
        match self {
            Self::Totp(_) => "totp",
            Self::RecoveryCode(_) => "recovery_code",
        }
    }
}

/// The second factor of an account as its owner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MfaStatus {
    /// Whether the factor is on (confirmed with a code).
    pub enabled: bool,
    /// When it was turned on, UTC.
    pub enabled_at: Option<DateTime<Utc>>,
    /// Whether an enrollment waits for its confirming code.
    pub pending: bool,
    /// Unused recovery codes (0 when the factor is off).
    pub recovery_codes_left: u32,
}

/// What a started enrollment shows, once: the secret in its three forms.
#[derive(Clone)]
pub struct Enrollment {
    /// The secret, base32 (RFC 4648, no padding), for typing into an app.
    pub secret: String,
    /// `otpauth://totp/<issuer>:<email>?secret=…&issuer=…`.
    pub otpauth_uri: String,
    /// The URI as a QR code, an SVG document.
    pub qr_svg: String,
}

impl std::fmt::Debug for Enrollment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enrollment").finish_non_exhaustive()
    }
}

/// Recovery codes shown once (after a confirmation or a regeneration). `Debug` never shows
/// them.
#[derive(Clone)]
pub struct RecoveryCodes {
    /// The codes, as `xxxx-xxxx-xxxx-xxxx`.
    pub codes: Vec<String>,
    /// When the factor was turned on, UTC.
    pub enabled_at: DateTime<Utc>,
}

impl std::fmt::Debug for RecoveryCodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoveryCodes").field("count", &self.codes.len()).finish()
    }
}

/// An MFA challenge handed out instead of tokens. `Debug` never shows the token.
#[derive(Clone)]
pub struct MfaChallenge {
    /// The challenge token (`aigwm_…`), sent back with the code.
    pub mfa_token: String,
    /// When it expires, UTC.
    pub expires_at: DateTime<Utc>,
    /// Its lifetime, in seconds.
    pub expires_in: u64,
}

impl std::fmt::Debug for MfaChallenge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MfaChallenge")
            .field("mfa_token", &"***")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// What a right password leads to.
#[derive(Debug, Clone)]
pub enum LoginOutcome {
    /// No second factor: a session and its tokens.
    Tokens(TokenSet),
    /// The second factor is on: a challenge to complete with a code
    /// ([`crate::accounts::Accounts::complete_mfa_login`]).
    MfaRequired(MfaChallenge),
}

/// The user id of a caller the table let change their account (an access token; the table
/// refuses keys, so the error arm is never taken).
fn account_owner(principal: &Authorized<op::ManageAccount>) -> Result<UserId, ServiceError> {
    match principal.principal() {
        Principal::User { user_id, .. } => Ok(user_id.clone()),
        Principal::ApiKey { .. } => Err(ServiceError::Forbidden {
            required: "access_token".to_owned(),
            current: "api_key".to_owned(),
        }),
    }
}

impl Mfa {
    /// The second factor's use cases on `ctx`.
    pub fn new(ctx: &ServiceContext) -> Self {
        Self {
            db: ctx.db.clone(),
            clock: ctx.clock.clone(),
            cache: ctx.cache.clone(),
            config: ctx.config.clone(),
            tokens: ctx.tokens.clone(),
            passwords: ctx.passwords.clone(),
            password_policy: ctx.password_policy,
        }
    }

    /// The sealer of TOTP secrets: keys derived from the signing keys for this purpose only.
    pub(crate) fn totp_sealer(&self) -> crate::seal::Sealer {
        crate::seal::Sealer::derive(totp::SEAL_INFO, self.tokens.key_materials())
    }
}
