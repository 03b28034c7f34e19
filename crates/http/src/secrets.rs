//! Where the JWT signing keys come from.
//!
//! 1. `auth.jwt_secret` (or `AIGW__AUTH__JWT_SECRET`): an HS256 key; at least 32 bytes in
//!    production (a shorter one is refused there, and logged as a warning in development).
//! 2. `[[auth.signing_keys]]`: HS256 secrets and EdDSA (Ed25519) PEM private keys, each with
//!    its `kid`. `auth.active_kid` picks the key that signs (default: `jwt_secret` when set,
//!    else the first listed); every key verifies.
//! 3. Neither, in `development` only: `<data_dir>/jwt_secret`, generated on first start
//!    (64 random bytes from the OS, hex) with mode 0600 and reused after, so tokens survive a
//!    restart. In `production` the service refuses to start (RFC 7518 §3.2).

use crate::settings::{Environment, Settings};
use aigw_service::tokens::MIN_HMAC_SECRET_BYTES;
use aigw_service::{KeyAlgorithm, SigningKey};
use anyhow::{bail, Context};
use rand::RngCore;
use secrecy::ExposeSecret;
use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::Path;

/// File name of the generated secret inside the data folder.
pub(crate) const SECRET_FILE: &str = "jwt_secret";

/// The signing keys, the active (signing) one first, per the rules above.
///
/// # Errors
/// When a secret is shorter than 32 bytes, a key file cannot be read or is not an Ed25519
/// PEM private key, `active_kid` names no key, production has no explicit key, or the
/// generated secret cannot be read or written.
pub(crate) fn signing_keys(settings: &Settings) -> anyhow::Result<Vec<SigningKey>> {
    let auth = &settings.auth;
    let mut keys = Vec::new();
    let production = settings.server.environment == Environment::Production;
    let check_length = |what: &str, bytes: &[u8]| -> anyhow::Result<()> {
        if bytes.len() >= MIN_HMAC_SECRET_BYTES {
            return Ok(());
        }
        if production {
            bail!(
                "{what} must be at least {MIN_HMAC_SECRET_BYTES} bytes in production (it has {})",
                bytes.len()
            );
        }
        tracing::warn!(
            "{what} has {} bytes; at least {MIN_HMAC_SECRET_BYTES} are required in production",
            bytes.len()
        );
        Ok(())
    };
    if let Some(secret) = &auth.jwt_secret {
        let bytes = secret.expose_secret().as_bytes();
        check_length("auth.jwt_secret", bytes)?;
        keys.push(SigningKey::hs256(bytes)?);
    }
    for key in &auth.signing_keys {
        keys.push(match key.algorithm {
            KeyAlgorithm::Hs256 => {
                let Some(secret) = &key.secret else {
                    bail!("auth.signing_keys {}: HS256 needs `secret`", key.kid);
                };
                let bytes = secret.expose_secret().as_bytes();
                check_length(&format!("auth.signing_keys {} secret", key.kid), bytes)?;
                SigningKey::hs256_with_kid(key.kid.clone(), bytes)?
            }
            KeyAlgorithm::EdDsa => {
                let Some(path) = &key.private_key_file else {
                    bail!("auth.signing_keys {}: EdDSA needs `private_key_file`", key.kid);
                };
                let pem = std::fs::read(path)
                    .with_context(|| format!("reading EdDSA key {}", path.display()))?;
                SigningKey::eddsa_pem(key.kid.clone(), &pem)?
            }
        });
    }
    if keys.is_empty() {
        if production {
            bail!(
                "server.environment = \"production\" requires auth.jwt_secret (AIGW__AUTH__JWT_SECRET) of at least {MIN_HMAC_SECRET_BYTES} bytes, or an EdDSA key in auth.signing_keys"
            );
        }
        let secret = load_or_generate(&settings.server.data_dir.join(SECRET_FILE))?;
        keys.push(SigningKey::hs256(&secret)?);
    }
    if let Some(active) = &auth.active_kid {
        let Some(i) = keys.iter().position(|k| k.kid() == active) else {
            bail!("auth.active_kid = {active:?} names no configured signing key");
        };
        let key = keys.remove(i);
        keys.insert(0, key);
    }
    Ok(keys)
}

fn load_or_generate(path: &Path) -> anyhow::Result<Vec<u8>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => {
            let mut raw = [0u8; 64];
            rand::rngs::OsRng.fill_bytes(&mut raw);
            let hex = base16ct::lower::encode_string(&raw);
            file.write_all(hex.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
            file.sync_all().ok();
            tracing::info!(path = %path.display(), "generated a JWT secret (development only)");
            Ok(hex.into_bytes())
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let secret = text.trim().as_bytes().to_vec();
            if secret.len() < MIN_HMAC_SECRET_BYTES {
                bail!("{} holds fewer than {MIN_HMAC_SECRET_BYTES} bytes; delete it to generate a new one", path.display());
            }
            Ok(secret)
        }
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}
