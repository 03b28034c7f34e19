//! Telling an `Authorization` header apart into an access token or an API key.
//!
//! | header value | credential |
//! |---|---|
//! | `Bearer <jwt>` (two dots) | access token |
//! | `Bearer aigw_…` or bare `aigw_…` | API key (checksum verified here, no I/O) |
//! | `Bearer aigwr_…` | refused: refresh tokens only go to `POST /auth/refresh` |
//! | anything else | refused |
//!
//! The scheme name `Bearer` is matched case-insensitively (RFC 9110 §11.1).

use crate::api_key::{ApiKeyError, ApiKeySecret, API_KEY_PREFIX};
use crate::refresh_token::REFRESH_TOKEN_PREFIX;

/// Longest `Authorization` value considered at all, in bytes; longer values are refused
/// before any parsing (a JWT of ours is well under 1 KiB).
pub const MAX_AUTHORIZATION_LEN: usize = 4096;

/// A credential found in an `Authorization` header, classified by its shape. `Debug` never
/// prints the credential.
#[derive(Clone, PartialEq, Eq)]
pub enum PresentedCredential {
    /// A compact JWS (`header.payload.signature`), to be verified as an access token.
    AccessToken(String),
    /// An API key whose prefix, length and checksum are already verified.
    ApiKey(ApiKeySecret),
}

impl std::fmt::Debug for PresentedCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PresentedCredential::AccessToken(_) => f.write_str("AccessToken(***)"),
            PresentedCredential::ApiKey(key) => write!(f, "ApiKey({key:?})"),
        }
    }
}

/// Why an `Authorization` header holds no usable credential. Each is a 401 `unauthorized`;
/// [`CredentialError::hint`] gives the `details.hint` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// No `Authorization` header at all.
    #[error("missing credential")]
    Missing,
    /// A header that is neither `Bearer <token>` nor a bare API key.
    #[error("malformed Authorization header")]
    Malformed,
    /// A refresh token where an access token or API key was expected.
    #[error("refresh token presented as a credential")]
    RefreshTokenPresented,
    /// Something shaped like an API key that fails its checksum or format.
    #[error("invalid API key: {0}")]
    InvalidApiKey(ApiKeyError),
}

impl CredentialError {
    /// The `details.hint` text for the 401 answer.
    pub fn hint(&self) -> &'static str {
        match self {
            CredentialError::Missing => {
                "send an access token or API key in the Authorization header"
            }
            CredentialError::Malformed => {
                "use 'Authorization: Bearer <token>' or 'Authorization: <API key>'"
            }
            CredentialError::RefreshTokenPresented => {
                "refresh tokens are only accepted by POST /api/v1/auth/refresh"
            }
            CredentialError::InvalidApiKey(_) => "the API key is invalid",
        }
    }

    /// Whether a credential was presented at all (RFC 6750 §3: only then does
    /// `WWW-Authenticate` carry `error="invalid_token"`).
    pub fn token_presented(&self) -> bool {
        !matches!(self, CredentialError::Missing)
    }
}

impl PresentedCredential {
    /// Classifies the value of an `Authorization` header (`None` when the header is absent).
    ///
    /// # Errors
    /// [`CredentialError`] when nothing usable is there; API keys with a bad checksum are
    /// refused here, before any database lookup.
    pub fn from_authorization(value: Option<&str>) -> Result<Self, CredentialError> {
        let value = value.ok_or(CredentialError::Missing)?.trim();
        if value.is_empty() {
            return Err(CredentialError::Missing);
        }
        if value.len() > MAX_AUTHORIZATION_LEN {
            return Err(CredentialError::Malformed);
        }
        let token = match value.split_once(' ') {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim_start(),
            Some(_) => return Err(CredentialError::Malformed),
            None if value.starts_with(API_KEY_PREFIX) => value,
            None => return Err(CredentialError::Malformed),
        };
        // Header values are ASCII: test bytes (`char::is_whitespace` on ASCII is
        // `is_ascii_whitespace` plus vertical tab), and walk characters only when needed.
        let whitespace = if token.is_ascii() {
            token.bytes().any(|b| b.is_ascii_whitespace() || b == 0x0b)
        } else {
            token.contains(char::is_whitespace)
        };
        if token.is_empty() || whitespace {
            return Err(CredentialError::Malformed);
        }
        if token.starts_with(REFRESH_TOKEN_PREFIX) {
            return Err(CredentialError::RefreshTokenPresented);
        }
        if token.starts_with(API_KEY_PREFIX) {
            return ApiKeySecret::parse(token)
                .map(PresentedCredential::ApiKey)
                .map_err(CredentialError::InvalidApiKey);
        }
        if token.bytes().filter(|&b| b == b'.').count() == 2 {
            return Ok(PresentedCredential::AccessToken(token.to_owned()));
        }
        Err(CredentialError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand_core::OsRng;

    #[test]
    fn classifies_every_shape() {
        let key = ApiKeySecret::generate(&mut OsRng);
        let bare = PresentedCredential::from_authorization(Some(key.expose()));
        assert_eq!(bare, Ok(PresentedCredential::ApiKey(key.clone())));
        let bearer = format!("bearer {}", key.expose());
        let bearer = PresentedCredential::from_authorization(Some(&bearer));
        assert_eq!(bearer, Ok(PresentedCredential::ApiKey(key)));
        assert_eq!(
            PresentedCredential::from_authorization(Some("Bearer a.b.c")),
            Ok(PresentedCredential::AccessToken("a.b.c".into()))
        );
        assert_eq!(
            PresentedCredential::from_authorization(Some("a.b.c")),
            Err(CredentialError::Malformed)
        );
        assert_eq!(
            PresentedCredential::from_authorization(Some("Bearer aigwr_x")),
            Err(CredentialError::RefreshTokenPresented)
        );
        assert_eq!(PresentedCredential::from_authorization(None), Err(CredentialError::Missing));
        assert_eq!(
            PresentedCredential::from_authorization(Some("Basic dXNlcjpwYXNz")),
            Err(CredentialError::Malformed)
        );
        assert!(matches!(
            PresentedCredential::from_authorization(Some("aigw_short")),
            Err(CredentialError::InvalidApiKey(_))
        ));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let _ = PresentedCredential::from_authorization(Some(&s));
        }

        #[test]
        fn never_panics_on_bearer_values(s in "(?i:bearer) {0,3}\\PC{0,120}") {
            let _ = PresentedCredential::from_authorization(Some(&s));
        }
    }
}

/// No `Debug` of a credential prints the secret.
#[cfg(test)]
#[allow(clippy::panic)]
mod debug_redaction {
    use super::*;
    use crate::{ApiKeySecret, RefreshTokenSecret};
    use rand_core::OsRng;

    #[test]
    fn presented_access_token() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbm4ifQ.c2lnbmF0dXJlLXNlY3JldA";
        let presented = PresentedCredential::from_authorization(Some(&format!("Bearer {jwt}")));
        let shown = format!("{presented:?}");
        assert!(shown.contains("AccessToken") && !shown.contains("c2lnbmF0dXJl"), "{shown}");
    }

    #[test]
    fn presented_api_key_and_api_key_secret() {
        let key = ApiKeySecret::generate(&mut OsRng);
        let secret = key.expose().to_owned();
        for shown in [
            format!("{key:?}"),
            format!("{:?}", PresentedCredential::from_authorization(Some(&secret))),
        ] {
            assert!(!shown.contains(&secret[12..]), "{shown}");
        }
    }

    #[test]
    fn refresh_token_secret() {
        let token = RefreshTokenSecret::generate(&mut OsRng);
        let shown = format!("{token:?}");
        assert!(!shown.contains(&token.expose()[10..]), "{shown}");
    }
}
