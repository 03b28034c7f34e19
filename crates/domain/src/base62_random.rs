//! Uniformly random base62 strings from a caller-supplied CSPRNG.

use rand_core::{CryptoRng, RngCore};

/// The base62 alphabet in the order the `base62` crate uses (digits, upper, lower), so that
/// random bodies and encoded checksums share one alphabet.
pub(crate) const ALPHABET: &[u8; 62] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `len` characters drawn uniformly from [`ALPHABET`] by rejection sampling (each character
/// carries log2(62) ≈ 5.95 bits of entropy; bytes >= 248 are drawn again, so there is no
/// modulo bias).
pub(crate) fn random_base62<R: RngCore + CryptoRng>(rng: &mut R, len: usize) -> String {
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 64];
    while out.len() < len {
        rng.fill_bytes(&mut buf);
        for &b in &buf {
            if b < 248 {
                out.push(char::from(ALPHABET[usize::from(b % 62)]));
                if out.len() == len {
                    break;
                }
            }
        }
    }
    out
}

/// Whether every byte of `s` is in the base62 alphabet.
pub(crate) fn is_base62(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_alphanumeric())
}
