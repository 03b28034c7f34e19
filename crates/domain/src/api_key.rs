//! The API key format: `aigw_` + 32 random base62 characters + 6 base62 characters of CRC32.
//!
//! ```text
//! aigw_ 4fJ9kQ2mXz7pL0aB3cD5eF6gH8iJ1kLm 0ab3Cd
//! └┬──┘ └──────────── random ──────────┘ └crc┘
//! ```
//!
//! - 32 characters drawn uniformly from base62 carry ~190 bits from the caller's CSPRNG
//!   (at least 128 are required).
//! - The checksum is CRC32 (IEEE) over everything before it (`aigw_` and the random part),
//!   base62-encoded and left-padded with `0` to 6 characters. It lets a mistyped or forged key
//!   be refused without a database lookup (GitHub's token format, 2021).
//! - Only the SHA-256 digest ([`TokenDigest`]) is stored; `key_prefix`, the first 12
//!   characters, is kept in clear so people can recognise a key.

use crate::base62_random::{is_base62, random_base62};
use crate::digest::TokenDigest;
use rand_core::{CryptoRng, RngCore};
use std::fmt;

/// The fixed service prefix every API key starts with ("a fixed service prefix
/// followed by an underscore").
pub const API_KEY_PREFIX: &str = "aigw_";
/// Length of the random part, in base62 characters.
pub const API_KEY_RANDOM_LEN: usize = 32;
/// Length of the checksum, in base62 characters.
pub const API_KEY_CHECKSUM_LEN: usize = 6;
/// Total length of a key, in characters (5 + 32 + 6 = 43).
pub const API_KEY_LEN: usize = API_KEY_PREFIX.len() + API_KEY_RANDOM_LEN + API_KEY_CHECKSUM_LEN;
/// Length of `key_prefix`, the part of a key that later reads show.
pub const KEY_PREFIX_LEN: usize = 12;

/// Why a string is not a well-formed API key. Every variant is answered with the same 401;
/// the distinction is for logs only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ApiKeyError {
    /// It does not start with `aigw_`.
    #[error("not an aigw API key (wrong prefix)")]
    WrongPrefix,
    /// Wrong length or a character outside base62.
    #[error("malformed API key")]
    Malformed,
    /// The checksum does not match: a typo, a truncated key or a forgery.
    #[error("API key checksum mismatch")]
    BadChecksum,
}

/// A full API key in clear text. `Debug` shows only the `key_prefix`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKeySecret(String);

impl ApiKeySecret {
    /// Generates a new key from `rng`, which must be a CSPRNG (the service passes the OS RNG).
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        let mut key = String::with_capacity(API_KEY_LEN);
        key.push_str(API_KEY_PREFIX);
        key.push_str(&random_base62(rng, API_KEY_RANDOM_LEN));
        let checksum = checksum_of(&key);
        key.push_str(&checksum);
        Self(key)
    }

    /// Parses a presented key, checking prefix, length, alphabet and checksum. No I/O.
    ///
    /// # Errors
    /// [`ApiKeyError`] when any of those checks fails.
    pub fn parse(s: &str) -> Result<Self, ApiKeyError> {
        let Some(rest) = s.strip_prefix(API_KEY_PREFIX) else {
            return Err(ApiKeyError::WrongPrefix);
        };
        if s.len() != API_KEY_LEN || !is_base62(rest) {
            return Err(ApiKeyError::Malformed);
        }
        let (body, checksum) = s.split_at(API_KEY_LEN - API_KEY_CHECKSUM_LEN);
        if checksum_of(body).as_bytes() != checksum.as_bytes() {
            return Err(ApiKeyError::BadChecksum);
        }
        Ok(Self(s.to_owned()))
    }

    /// The full key, to be shown once in the create response.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The first [`KEY_PREFIX_LEN`] characters, shown in every later read.
    pub fn key_prefix(&self) -> &str {
        &self.0[..KEY_PREFIX_LEN]
    }

    /// The SHA-256 digest under which the key is stored and looked up.
    pub fn digest(&self) -> TokenDigest {
        TokenDigest::of(&self.0)
    }
}

impl fmt::Debug for ApiKeySecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKeySecret({}…)", self.key_prefix())
    }
}

/// CRC32 (IEEE) of `body`, base62, left-padded with `0` to [`API_KEY_CHECKSUM_LEN`].
fn checksum_of(body: &str) -> String {
    let crc = crc32fast::hash(body.as_bytes());
    format!("{:0>width$}", base62::encode(crc), width = API_KEY_CHECKSUM_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand_core::OsRng;

    #[test]
    fn generated_keys_parse_and_have_the_documented_shape() {
        for _ in 0..100 {
            let key = ApiKeySecret::generate(&mut OsRng);
            assert_eq!(key.expose().len(), API_KEY_LEN);
            assert!(key.expose().starts_with("aigw_"));
            assert_eq!(key.key_prefix().len(), 12);
            assert_eq!(ApiKeySecret::parse(key.expose()).ok(), Some(key.clone()));
        }
    }

    #[test]
    fn every_single_character_change_is_refused() {
        let key = ApiKeySecret::generate(&mut OsRng);
        let text = key.expose();
        for i in API_KEY_PREFIX.len()..text.len() {
            let mut bytes = text.as_bytes().to_vec();
            bytes[i] = if bytes[i] == b'a' { b'b' } else { b'a' };
            let changed = String::from_utf8(bytes).unwrap_or_default();
            assert!(ApiKeySecret::parse(&changed).is_err(), "position {i} accepted");
        }
    }

    #[test]
    fn debug_hides_the_secret() {
        let key = ApiKeySecret::generate(&mut OsRng);
        let shown = format!("{key:?}");
        assert!(!shown.contains(key.expose()));
        assert!(shown.contains(key.key_prefix()));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC*") {
            let _ = ApiKeySecret::parse(&s);
        }

        #[test]
        fn parse_never_panics_on_near_keys(s in "aigw_[0-9A-Za-z]{30,40}") {
            let _ = ApiKeySecret::parse(&s);
        }
    }
}
