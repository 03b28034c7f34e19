//! Sealing of refresh-token successors for the reuse grace window.
//!
//! The plaintext of a successor refresh token is never stored. To hand the *same* successor
//! to a client that retries inside `auth.refresh_reuse_grace_secs` (RFC 9700 §4.14.2; Supabase
//! Auth's reuse interval), the successor is kept encrypted with XChaCha20-Poly1305 under a key
//! derived with HKDF-SHA256 from the JWT signing key material, which every node shares, and is
//! erased when the window has passed. The token's own id is the associated data, so a sealed
//! value cannot be moved to another row.
//!
//! Format: lower-case hex of `nonce (24 bytes) || ciphertext+tag`.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use rand::RngCore;
use sha2::Sha256;

const INFO: &[u8] = b"aigw refresh-token successor seal v1";

/// Seals and opens successor tokens. Several keys may open (after a signing-key rotation);
/// the first one seals.
#[derive(Clone)]
pub struct Sealer {
    keys: Vec<XChaCha20Poly1305>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").field("keys", &self.keys.len()).finish()
    }
}

impl Sealer {
    /// A sealer whose keys are derived from each of `materials` (secret key bytes), the first
    /// one sealing.
    pub fn new<'a>(materials: impl IntoIterator<Item = &'a [u8]>) -> Self {
        Self::derive(INFO, materials)
    }

    /// A sealer like [`Sealer::new`] whose keys are derived for another purpose (`info` is the
    /// HKDF info string), so that values sealed for one purpose never open for another.
    pub fn derive<'a>(info: &[u8], materials: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let keys = materials
            .into_iter()
            .map(|ikm| {
                let mut okm = [0u8; 32];
                // 32 bytes is far below HKDF-SHA256's 8160-byte limit, so expand cannot fail.
                let _ = Hkdf::<Sha256>::new(None, ikm).expand(info, &mut okm);
                XChaCha20Poly1305::new(&okm.into())
            })
            .collect();
        Self { keys }
    }

    /// Encrypts `plaintext` bound to `row_id`; `None` if there is no key.
    pub fn seal(&self, row_id: &str, plaintext: &str) -> Option<String> {
        let cipher = self.keys.first()?;
        let mut nonce = [0u8; 24];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let sealed = cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload { msg: plaintext.as_bytes(), aad: row_id.as_bytes() },
            )
            .ok()?;
        let mut raw = nonce.to_vec();
        raw.extend_from_slice(&sealed);
        Some(base16ct::lower::encode_string(&raw))
    }

    /// Decrypts a value sealed for `row_id` with any of the keys; `None` when none opens it.
    pub fn open(&self, row_id: &str, sealed: &str) -> Option<String> {
        let bytes = base16ct::mixed::decode_vec(sealed).ok().filter(|b| b.len() >= 24)?;
        let (nonce, ciphertext) = bytes.split_at(24);
        let nonce = XNonce::from(<[u8; 24]>::try_from(nonce).ok()?);
        self.keys.iter().find_map(|cipher| {
            cipher
                .decrypt(&nonce, Payload { msg: ciphertext, aad: row_id.as_bytes() })
                .ok()
                .and_then(|p| String::from_utf8(p).ok())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_bound_to_row_and_key() {
        let a = Sealer::new([b"first key material of 32+ bytes!!".as_slice()]);
        let sealed = a.seal("row-1", "aigwr_secret").unwrap_or_default();
        assert!(!sealed.contains("aigwr_secret"));
        assert_eq!(a.open("row-1", &sealed).as_deref(), Some("aigwr_secret"));
        assert_eq!(a.open("row-2", &sealed), None);
        let b = Sealer::new([b"another key material of 32 bytes".as_slice()]);
        assert_eq!(b.open("row-1", &sealed), None);
        let both = Sealer::new([
            b"another key material of 32 bytes".as_slice(),
            b"first key material of 32+ bytes!!".as_slice(),
        ]);
        assert_eq!(both.open("row-1", &sealed).as_deref(), Some("aigwr_secret"));
        assert_eq!(a.open("row-1", "zz"), None);
    }
}
