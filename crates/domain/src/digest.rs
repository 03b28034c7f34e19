//! SHA-256 digests of opaque credentials, the only form in which they are stored.

use sha2::{Digest, Sha256};
use std::fmt;

/// Lower-case hexadecimal SHA-256 digest (64 characters) of a credential's full text.
///
/// Refresh tokens and API keys carry at least 128 random bits, so a fast unsalted hash is the
/// right tool (a slow password hash would buy nothing and cost a lot on every request); a unique
/// index on the digest finds the record. Source: ASVS 5.0 6.5.2.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TokenDigest(String);

impl TokenDigest {
    /// Digest of `secret` (its UTF-8 bytes, exactly as presented). Hex-encoded in constant
    /// time by `base16ct`, a quarter of the instructions of `hex::encode`'s char iterator (it
    /// runs on every request with an API key).
    pub fn of(secret: &str) -> Self {
        Self(base16ct::lower::encode_string(&Sha256::digest(secret.as_bytes())))
    }

    /// The digest as 64 lower-case hex characters.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The digest as 64 lower-case hex characters, by value.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenDigest({}…)", &self.0[..8.min(self.0.len())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_sha256_hex() {
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        assert_eq!(
            TokenDigest::of("abc").as_str(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
