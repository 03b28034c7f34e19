//! Single-use tokens that an account's e-mail address receives: `aigwe_` + 44 random base62
//! characters (~262 bits) in an e-mail verification or e-mail change link, `aigwp_` + 44 in a
//! password reset link. Only the SHA-256 digest is stored; the purpose is stored beside it and
//! checked again when the token is redeemed, so a token of one purpose never does another's
//! work. The prefixes differ from API keys (`aigw_`), refresh tokens (`aigwr_`) and
//! invitations (`aigwi_`).

use crate::base62_random::{is_base62, random_base62};
use crate::digest::TokenDigest;
use rand_core::{CryptoRng, RngCore};
use std::fmt;

/// Length of the random part, in base62 characters.
pub const ACCOUNT_TOKEN_RANDOM_LEN: usize = 44;

/// What an account token does when it is redeemed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenPurpose {
    /// Proves the account's current address: sets `email_verified_at` (valid 24 h).
    VerifyEmail,
    /// Proves a new address the user asked to move to: replaces the account's address (24 h).
    ChangeEmail,
    /// Sets a new password without the old one, ending every session (valid 30 min).
    ResetPassword,
}

impl TokenPurpose {
    /// Every purpose.
    pub const ALL: [TokenPurpose; 3] =
        [TokenPurpose::VerifyEmail, TokenPurpose::ChangeEmail, TokenPurpose::ResetPassword];

    /// The stored form (`verify_email`, `change_email`, `reset_password`).
    pub fn as_str(self) -> &'static str {
        match self {
            TokenPurpose::VerifyEmail => "verify_email",
            TokenPurpose::ChangeEmail => "change_email",
            TokenPurpose::ResetPassword => "reset_password",
        }
    }

    /// The purpose stored as `s`.
    pub fn from_stored(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// The prefix of this purpose's tokens: `aigwe_` for the two e-mail proofs (one link
    /// redeems either), `aigwp_` for a password reset.
    pub fn prefix(self) -> &'static str {
        match self {
            TokenPurpose::VerifyEmail | TokenPurpose::ChangeEmail => "aigwe_",
            TokenPurpose::ResetPassword => "aigwp_",
        }
    }

    /// How long a token of this purpose is valid, in seconds.
    pub fn lifetime_secs(self) -> i64 {
        match self {
            TokenPurpose::VerifyEmail | TokenPurpose::ChangeEmail => 24 * 3600,
            TokenPurpose::ResetPassword => 30 * 60,
        }
    }
}

/// An account token in clear text. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct AccountToken(String);

impl AccountToken {
    /// Generates a token for `purpose` from `rng`, which must be a CSPRNG.
    pub fn generate<R: RngCore + CryptoRng>(purpose: TokenPurpose, rng: &mut R) -> Self {
        Self(format!("{}{}", purpose.prefix(), random_base62(rng, ACCOUNT_TOKEN_RANDOM_LEN)))
    }

    /// Parses a presented token whose prefix is that of `purpose` (prefix, length and
    /// alphabet; surrounding whitespace is ignored). No I/O.
    pub fn parse(s: &str, purpose: TokenPurpose) -> Option<Self> {
        let prefix = purpose.prefix();
        let rest = s.trim().strip_prefix(prefix)?;
        (rest.len() == ACCOUNT_TOKEN_RANDOM_LEN && is_base62(rest))
            .then(|| Self(format!("{prefix}{rest}")))
    }

    /// The token in clear, to be sent once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The SHA-256 digest under which the token is stored.
    pub fn digest(&self) -> TokenDigest {
        TokenDigest::of(&self.0)
    }
}

impl fmt::Debug for AccountToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccountToken(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_only_with_their_purpose_prefix() {
        let reset = AccountToken::generate(TokenPurpose::ResetPassword, &mut rand_core::OsRng);
        assert!(reset.expose().starts_with("aigwp_"));
        assert_eq!(
            AccountToken::parse(reset.expose(), TokenPurpose::ResetPassword),
            Some(reset.clone())
        );
        assert_eq!(AccountToken::parse(reset.expose(), TokenPurpose::VerifyEmail), None);
        assert!(!format!("{reset:?}").contains(reset.expose()));
        let verify = AccountToken::generate(TokenPurpose::VerifyEmail, &mut rand_core::OsRng);
        assert!(AccountToken::parse(verify.expose(), TokenPurpose::ChangeEmail).is_some());
        for bad in [
            "",
            "aigwp_",
            "aigwe_x",
            &verify.expose()[..40],
            &format!("{}!", &verify.expose()[..49]),
        ] {
            assert!(AccountToken::parse(bad, TokenPurpose::VerifyEmail).is_none(), "{bad}");
        }
    }

    #[test]
    fn purposes_round_trip_through_storage() {
        for p in TokenPurpose::ALL {
            assert_eq!(TokenPurpose::from_stored(p.as_str()), Some(p));
        }
        assert_eq!(TokenPurpose::from_stored("other"), None);
    }
}
