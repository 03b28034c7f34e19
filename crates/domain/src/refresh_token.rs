//! The refresh token format: `aigwr_` + 44 random base62 characters (~262 bits).
//!
//! Refresh tokens are opaque (not JWTs), so they cannot be verified offline and always go
//! through the database, where only their SHA-256 digest is kept.
//! The `aigwr_` prefix differs from the API key prefix `aigw_` at its fifth character, so a
//! refresh token can never be taken for an API key, nor either for a JWT (which has two dots).

use crate::base62_random::{is_base62, random_base62};
use crate::digest::TokenDigest;
use rand_core::{CryptoRng, RngCore};
use std::fmt;

/// The prefix every refresh token starts with.
pub const REFRESH_TOKEN_PREFIX: &str = "aigwr_";
/// Length of the random part, in base62 characters (44 × log2 62 ≈ 262 bits >= 256).
pub const REFRESH_TOKEN_RANDOM_LEN: usize = 44;

/// A refresh token in clear text. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct RefreshTokenSecret(String);

impl RefreshTokenSecret {
    /// Generates a new refresh token from `rng`, which must be a CSPRNG.
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        Self(format!("{REFRESH_TOKEN_PREFIX}{}", random_base62(rng, REFRESH_TOKEN_RANDOM_LEN)))
    }

    /// Parses a presented refresh token (prefix, length and alphabet). No I/O.
    ///
    /// Returns `None` when the text cannot be a refresh token of ours, which the service
    /// answers with 401 without a database lookup.
    pub fn parse(s: &str) -> Option<Self> {
        let rest = s.strip_prefix(REFRESH_TOKEN_PREFIX)?;
        (rest.len() == REFRESH_TOKEN_RANDOM_LEN && is_base62(rest)).then(|| Self(s.to_owned()))
    }

    /// Rebuilds a token from its full text without checks, e.g. after decrypting a stored
    /// successor. Prefer [`RefreshTokenSecret::parse`] for anything a client sent.
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }

    /// The token in clear, to be sent to the client once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The SHA-256 digest under which the token is stored and looked up.
    pub fn digest(&self) -> TokenDigest {
        TokenDigest::of(&self.0)
    }
}

impl fmt::Debug for RefreshTokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RefreshTokenSecret(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::OsRng;

    #[test]
    fn round_trip_and_rejects() {
        let t = RefreshTokenSecret::generate(&mut OsRng);
        assert!(t.expose().starts_with("aigwr_"));
        assert_eq!(RefreshTokenSecret::parse(t.expose()), Some(t.clone()));
        assert_eq!(RefreshTokenSecret::parse("aigw_abc"), None);
        assert_eq!(RefreshTokenSecret::parse(&t.expose()[..20]), None);
        assert!(!format!("{t:?}").contains(t.expose()));
    }
}
