//! The second factor's formats (TOTP, RFC 6238): the codes a user types, the recovery codes
//! shown once at enrollment, the MFA challenge token that stands between a right password and
//! a session, and how a session was made (RFC 8176 `amr` values).
//!
//! - A TOTP code is 6 ASCII digits (spaces between them are ignored, as authenticator apps
//!   show `123 456`).
//! - A recovery code is 16 characters of the lower-case Crockford base32 alphabet (80 random
//!   bits), shown as four groups of four (`abcd-efgh-jkmn-pqrs`); hyphens, spaces and case are
//!   ignored when one is typed back. Only its SHA-256 digest is stored: 80 random bits make a
//!   fast unsalted hash the right tool, as for API keys (ASVS 5.0 6.5.2).
//! - An MFA challenge token is `aigwm_` + 44 random base62 characters (~262 bits), stored as
//!   its SHA-256 digest. Its prefix differs from an API key's (`aigw_`) and a refresh token's
//!   (`aigwr_`) at the fifth character, so none can stand in for another.

use crate::base62_random::{is_base62, random_base62};
use crate::digest::TokenDigest;
use crate::validation::FieldError;
use rand_core::{CryptoRng, RngCore};
use std::fmt;

/// Digits of a TOTP code (RFC 6238 with SHA-1, as every authenticator app supports).
pub const TOTP_DIGITS: usize = 6;
/// Length of a TOTP time step, in seconds (RFC 6238 §5.2).
pub const TOTP_STEP_SECS: i64 = 30;
/// Steps before and after the current one whose codes are also accepted (clock skew, RFC
/// 6238 §5.2).
pub const TOTP_SKEW_STEPS: i64 = 1;
/// Length of a TOTP secret, in bytes (160 bits, RFC 4226 §4).
pub const TOTP_SECRET_BYTES: usize = 20;
/// How many recovery codes an enrollment (or a regeneration) gives.
pub const RECOVERY_CODE_COUNT: usize = 10;
/// Failed attempts after which an MFA challenge is dead.
pub const MAX_CHALLENGE_ATTEMPTS: i64 = 5;
/// Wrong codes an account may get in [`FAILED_CODES_WINDOW_SECS`], across all its
/// challenges; past it a right password gets no new challenge until the window moves on. A
/// challenge's own limit alone would let whoever knows the password try five codes per login.
pub const MAX_FAILED_CODES_PER_WINDOW: i64 = 10;
/// The window of [`MAX_FAILED_CODES_PER_WINDOW`], in seconds.
pub const FAILED_CODES_WINDOW_SECS: i64 = 3600;

/// The prefix of every MFA challenge token.
pub const MFA_TOKEN_PREFIX: &str = "aigwm_";
/// Length of the random part of an MFA challenge token, in base62 characters.
pub const MFA_TOKEN_RANDOM_LEN: usize = 44;

/// Lower-case Crockford base32: no `i`, `l`, `o`, `u`, so no code can be misread.
const RECOVERY_ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// Characters of a recovery code (16 × 5 = 80 random bits).
const RECOVERY_CODE_LEN: usize = 16;

/// The RFC 8176 `amr` values this service writes.
pub mod amr {
    /// Password-based authentication.
    pub const PASSWORD: &str = "pwd";
    /// One-time password (a TOTP code or a recovery code).
    pub const OTP: &str = "otp";
}

/// How a session was made: the `amr` claim of its access tokens, kept on the session so that
/// refresh-token rotation keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAmr {
    /// A password alone: `["pwd"]`.
    Password,
    /// A password and a second factor: `["pwd", "otp"]`.
    PasswordAndOtp,
}

impl SessionAmr {
    /// The claim's values.
    pub fn values(self) -> Vec<String> {
        match self {
            Self::Password => vec![amr::PASSWORD.to_owned()],
            Self::PasswordAndOtp => vec![amr::PASSWORD.to_owned(), amr::OTP.to_owned()],
        }
    }

    /// The stored form (the values joined by spaces).
    pub fn as_storage(self) -> &'static str {
        match self {
            Self::Password => "pwd",
            Self::PasswordAndOtp => "pwd otp",
        }
    }

    /// Reads the stored form; `None` (a session older than the column) is [`Self::Password`].
    pub fn from_storage(stored: Option<&str>) -> Self {
        Self::from_values(stored.into_iter().flat_map(|s| s.split(' ')))
    }

    /// Reads claim values; without `otp` (or without the claim at all) it is
    /// [`Self::Password`].
    pub fn from_values<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        if values.into_iter().any(|v| v == amr::OTP) {
            Self::PasswordAndOtp
        } else {
            Self::Password
        }
    }

    /// Whether a second factor was used.
    pub fn has_second_factor(self) -> bool {
        self == Self::PasswordAndOtp
    }
}

/// A syntactically valid TOTP code (6 digits). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct TotpCode(String);

impl TotpCode {
    /// Parses a typed code; spaces are ignored.
    ///
    /// # Errors
    /// [`FieldError`] on `field` when it is not 6 digits.
    pub fn parse(field: &str, raw: &str) -> Result<Self, FieldError> {
        let digits: String = raw.chars().filter(|c| *c != ' ').collect();
        if digits.len() == TOTP_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()) {
            Ok(Self(digits))
        } else {
            Err(FieldError::new(
                field,
                format!("must be the {TOTP_DIGITS} digits the authenticator app shows"),
            ))
        }
    }

    /// The digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for TotpCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TotpCode(…)")
    }
}

/// A recovery code in its canonical form (16 lower-case characters, no hyphens). `Debug`
/// never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct RecoveryCode(String);

impl RecoveryCode {
    /// A new random recovery code from `rng`, which must be a CSPRNG.
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        let mut out = String::with_capacity(RECOVERY_CODE_LEN);
        let mut buf = [0u8; RECOVERY_CODE_LEN];
        rng.fill_bytes(&mut buf);
        // 256 is a multiple of 32: the low five bits of a uniform byte are uniform.
        for b in buf {
            out.push(char::from(RECOVERY_ALPHABET[usize::from(b & 31)]));
        }
        Self(out)
    }

    /// Parses a typed recovery code: hyphens and spaces are dropped, letters lower-cased.
    ///
    /// # Errors
    /// [`FieldError`] on `field` when what is left is not 16 characters of the alphabet.
    pub fn parse(field: &str, raw: &str) -> Result<Self, FieldError> {
        let code: String = raw
            .chars()
            .filter(|c| !matches!(c, '-' | ' '))
            .map(|c| c.to_ascii_lowercase())
            .collect();
        if code.len() == RECOVERY_CODE_LEN && code.bytes().all(|b| RECOVERY_ALPHABET.contains(&b)) {
            Ok(Self(code))
        } else {
            Err(FieldError::new(
                field,
                "must be one of the recovery codes shown at enrollment (16 letters and digits)",
            ))
        }
    }

    /// The code as shown to the user: four groups of four joined by hyphens.
    pub fn display(&self) -> String {
        let chunks: Vec<&str> =
            self.0.as_bytes().chunks(4).filter_map(|c| std::str::from_utf8(c).ok()).collect();
        chunks.join("-")
    }

    /// The SHA-256 digest of the canonical form, under which the code is stored.
    pub fn digest(&self) -> TokenDigest {
        TokenDigest::of(&self.0)
    }
}

impl fmt::Debug for RecoveryCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RecoveryCode(…)")
    }
}

/// An MFA challenge token in clear text (`aigwm_…`). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct MfaToken(String);

impl MfaToken {
    /// A new challenge token from `rng`, which must be a CSPRNG.
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        Self(format!("{MFA_TOKEN_PREFIX}{}", random_base62(rng, MFA_TOKEN_RANDOM_LEN)))
    }

    /// Parses a presented token (prefix, length, alphabet); `None` when it cannot be one of
    /// ours (answered without a database lookup). No I/O.
    pub fn parse(s: &str) -> Option<Self> {
        let rest = s.strip_prefix(MFA_TOKEN_PREFIX)?;
        (rest.len() == MFA_TOKEN_RANDOM_LEN && is_base62(rest)).then(|| Self(s.to_owned()))
    }

    /// The token in clear, to be sent to the client once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The SHA-256 digest under which the challenge is stored.
    pub fn digest(&self) -> TokenDigest {
        TokenDigest::of(&self.0)
    }
}

impl fmt::Debug for MfaToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MfaToken(…)")
    }
}

/// The TOTP time step of Unix time `unix_secs` (RFC 6238 §4.2: `floor(T / X)`).
pub fn totp_step(unix_secs: i64) -> i64 {
    unix_secs.div_euclid(TOTP_STEP_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::OsRng;

    #[test]
    fn totp_codes() {
        assert_eq!(TotpCode::parse("code", "123 456").map(|c| c.0), Ok("123456".to_owned()));
        for bad in ["12345", "1234567", "12a456", "", "１２３４５６"] {
            assert_eq!(TotpCode::parse("code", bad).err().map(|e| e.field), Some("code".into()));
        }
        assert!(!format!("{:?}", TotpCode::parse("code", "123456")).contains("123456"));
    }

    #[test]
    fn recovery_codes_round_trip_and_ignore_typing() {
        let code = RecoveryCode::generate(&mut OsRng);
        let shown = code.display();
        assert_eq!(shown.len(), 19);
        assert_eq!(RecoveryCode::parse("recovery_code", &shown), Ok(code.clone()));
        let typed = shown.to_uppercase().replace('-', " ");
        assert_eq!(
            RecoveryCode::parse("recovery_code", &typed).map(|c| c.digest()),
            Ok(code.digest())
        );
        assert!(RecoveryCode::parse("recovery_code", "abcd-efgh-ijkl-mnop").is_err());
        assert!(RecoveryCode::parse("recovery_code", "abcd").is_err());
        assert!(!format!("{code:?}").contains(&code.0));
    }

    #[test]
    fn mfa_tokens() {
        let t = MfaToken::generate(&mut OsRng);
        assert!(t.expose().starts_with("aigwm_"));
        assert_eq!(MfaToken::parse(t.expose()), Some(t.clone()));
        assert_eq!(MfaToken::parse(&t.expose().replace("aigwm_", "aigwr_")), None);
        assert_eq!(MfaToken::parse("aigwm_short"), None);
        assert!(!format!("{t:?}").contains(t.expose()));
    }

    #[test]
    fn amr_values() {
        assert_eq!(SessionAmr::from_storage(None), SessionAmr::Password);
        assert_eq!(SessionAmr::from_storage(Some("pwd otp")), SessionAmr::PasswordAndOtp);
        assert_eq!(
            SessionAmr::from_storage(Some(SessionAmr::Password.as_storage())),
            SessionAmr::Password
        );
        assert_eq!(SessionAmr::PasswordAndOtp.values(), vec!["pwd", "otp"]);
        assert!(SessionAmr::from_values(["pwd", "otp"]).has_second_factor());
        assert_eq!(totp_step(59), 1);
        assert_eq!(totp_step(60), 2);
    }
}
