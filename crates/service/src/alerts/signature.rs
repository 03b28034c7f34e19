//! Webhook signatures as the Standard Webhooks specification defines them
//! (<https://www.standardwebhooks.com>): a secret `whsec_<base64 of 32 random bytes>`, and per
//! request the headers `webhook-id`, `webhook-timestamp` (Unix seconds) and
//! `webhook-signature: v1,<base64 of HMAC-SHA256(secret bytes, "<id>.<timestamp>.<body>")>`.
//! Receivers verify with any Standard Webhooks library, or with the few lines in
//! docs/alerts.md.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// The prefix of a webhook secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new random secret (`whsec_` and the base64 of 32 bytes from the OS).
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

/// The `webhook-signature` value of message `id` sent at `timestamp` (Unix seconds) with
/// `body`, signed with `secret` (`whsec_…`); `None` for a secret that is not one.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries.
    #[test]
    fn signs_as_the_specification_does() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let signature = sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body);
        assert_eq!(signature.as_deref(), Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
    }

    #[test]
    fn secrets_are_fresh_and_usable() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with(SECRET_PREFIX) && a.len() == SECRET_PREFIX.len() + 44);
        assert!(sign(&a, "id", 1, b"{}").is_some());
        assert!(sign("not a secret", "id", 1, b"{}").is_none());
    }
}
