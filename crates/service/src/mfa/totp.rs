//! TOTP codes (RFC 6238: HMAC-SHA-1, 6 digits, 30-second steps, ±1 step of skew) through
//! `totp-rs`, with the time read from [`crate::Clock`], never the system clock directly.
//!
//! A code is checked against the steps around now and the *latest* step it matches is the
//! one it uses: [`aigw_persistence::mfa::claim_step`] then accepts it only if it is later
//! than the last step the user used, which makes a code single-use.

use crate::error::ServiceError;
use crate::seal::Sealer;
use aigw_domain::mfa::{
    totp_step, TotpCode, TOTP_DIGITS, TOTP_SECRET_BYTES, TOTP_SKEW_STEPS, TOTP_STEP_SECS,
};
use chrono::{DateTime, Utc};
use rand::RngCore;
use totp_rs::{Algorithm, Secret, TOTP};

/// HKDF info of the sealer of TOTP secrets (see [`Sealer::derive`]).
pub(crate) const SEAL_INFO: &[u8] = b"aigw totp secret seal v1";

/// A TOTP secret (20 random bytes). `Debug` never shows it.
#[derive(Clone)]
pub(crate) struct TotpSecret(Vec<u8>);

impl std::fmt::Debug for TotpSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TotpSecret(…)")
    }
}

impl TotpSecret {
    /// A new secret from the operating system's RNG.
    pub(crate) fn generate() -> Self {
        let mut bytes = vec![0u8; TOTP_SECRET_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Self(bytes)
    }

    /// The secret in base32 (RFC 4648, no padding), as authenticator apps take it.
    pub(crate) fn base32(&self) -> String {
        match Secret::Raw(self.0.clone()).to_encoded() {
            Secret::Encoded(base32) => base32,
            Secret::Raw(_) => String::new(),
        }
    }

    /// Seals the secret for `user_id` (the associated data binds it to the user's row).
    pub(crate) fn seal(&self, sealer: &Sealer, user_id: &str) -> Result<String, ServiceError> {
        sealer
            .seal(&aad(user_id), &self.base32())
            .ok_or_else(|| ServiceError::Internal("no key to seal a TOTP secret".to_owned()))
    }

    /// Opens a secret sealed for `user_id`.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] (a code cannot be checked: use a recovery code) when no
    /// signing key opens it (the key that sealed it was removed from `auth.signing_keys`);
    /// the operator is told in the log, at `error`.
    pub(crate) fn open(sealer: &Sealer, user_id: &str, sealed: &str) -> Result<Self, ServiceError> {
        let base32 = sealer.open(&aad(user_id), sealed).ok_or_else(|| {
            tracing::error!(
                user_id,
                "a TOTP secret opens with no signing key: keep the key that sealed it in \
                 auth.signing_keys; the user can log in only with a recovery code"
            );
            ServiceError::rejected(
                "codes of this account cannot be checked right now; use a recovery code",
            )
        })?;
        Secret::Encoded(base32)
            .to_bytes()
            .map(Self)
            .map_err(|_| ServiceError::Internal("a stored TOTP secret is not base32".to_owned()))
    }

    fn totp(&self, issuer: Option<String>, account: String) -> TOTP {
        // SHA-1, 6 digits, 30 s: what every authenticator app supports (RFC 6238 §5.2). No
        // skew here: the steps around now are tried one by one, to know which one matched.
        let step = u64::try_from(TOTP_STEP_SECS).unwrap_or(30);
        TOTP::new_unchecked(Algorithm::SHA1, TOTP_DIGITS, 0, step, self.0.clone(), issuer, account)
    }

    /// The latest time step around `now` (±[`TOTP_SKEW_STEPS`]) whose code is `code`, if any.
    pub(crate) fn matching_step(&self, code: &TotpCode, now: DateTime<Utc>) -> Option<i64> {
        let totp = self.totp(None, String::new());
        let current = totp_step(now.timestamp());
        ((current - TOTP_SKEW_STEPS)..=(current + TOTP_SKEW_STEPS)).rev().find(|step| {
            // `check` compares in constant time.
            u64::try_from(step * TOTP_STEP_SECS).is_ok_and(|t| totp.check(code.as_str(), t))
        })
    }

    /// `otpauth://totp/<issuer>:<account>?secret=…&issuer=…` (the Key Uri Format authenticator
    /// apps read; label and issuer percent-encoded). A `:` in `issuer` would split the label,
    /// so it is replaced by `-`.
    pub(crate) fn otpauth_uri(&self, issuer: &str, account: &str) -> String {
        let issuer = issuer.replace(':', "-");
        self.totp(Some(issuer), account.to_owned()).get_url()
    }
}

fn aad(user_id: &str) -> String {
    format!("mfa_totp:{user_id}")
}

/// `text` as a QR code, an SVG document (black modules on white, at least 240 px).
///
/// # Errors
/// [`ServiceError::Internal`] when the text is too long for a QR code (an `otpauth://` URI
/// never is).
pub(crate) fn qr_svg(text: &str) -> Result<String, ServiceError> {
    let code = qrcode::QrCode::new(text.as_bytes())
        .map_err(|e| ServiceError::Internal(format!("QR code: {e}")))?;
    Ok(code
        .render::<qrcode::render::svg::Color<'_>>()
        .min_dimensions(240, 240)
        .quiet_zone(true)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_their_step_and_its_neighbours_only() {
        let secret = TotpSecret::generate();
        let now = DateTime::from_timestamp(1_800_000_015, 0).unwrap_or_default();
        let step = totp_step(now.timestamp());
        let code_at = |s: i64| {
            let code =
                secret.totp(None, String::new()).generate(u64::try_from(s * 30).unwrap_or(0));
            TotpCode::parse("code", &code).ok()
        };
        let matching = |s: i64| code_at(s).and_then(|c| secret.matching_step(&c, now));
        assert_eq!(matching(step), Some(step));
        assert_eq!(matching(step - 1), Some(step - 1));
        assert_eq!(matching(step + 1), Some(step + 1));
        let far = code_at(step + 5);
        if far != code_at(step) && far != code_at(step - 1) && far != code_at(step + 1) {
            assert_eq!(matching(step + 5), None);
        }
    }

    #[test]
    fn sealed_secrets_open_for_their_user_only() {
        let sealer = Sealer::derive(SEAL_INFO, [b"key material of at least 32 bytes!".as_slice()]);
        let secret = TotpSecret::generate();
        let sealed = secret.seal(&sealer, "u1").unwrap_or_default();
        let opened = TotpSecret::open(&sealer, "u1", &sealed).map(|s| s.0);
        assert_eq!(opened.ok(), Some(secret.0.clone()));
        assert!(TotpSecret::open(&sealer, "u2", &sealed).is_err());
        let other = Sealer::new([b"key material of at least 32 bytes!".as_slice()]);
        assert!(TotpSecret::open(&other, "u1", &sealed).is_err());
    }

    #[test]
    fn uri_and_qr_code() {
        let secret = TotpSecret::generate();
        let uri = secret.otpauth_uri("aigw", "ann@example.com");
        assert!(uri.starts_with("otpauth://totp/aigw:ann%40example.com?secret="), "{uri}");
        assert!(uri.contains(&format!("secret={}", secret.base32())), "{uri}");
        assert!(uri.ends_with("&issuer=aigw"), "{uri}");
        let svg = qr_svg(&uri).unwrap_or_default();
        assert!(svg.contains("<svg") && svg.ends_with("</svg>"), "{svg}");
    }
}
