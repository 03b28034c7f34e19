//! `PresentedCredential::from_authorization` never panics and classifies every header value as credential.rs documents.
#![no_main]

use aigw_domain::api_key::{ApiKeyError, ApiKeySecret, API_KEY_PREFIX};
use aigw_domain::credential::MAX_AUTHORIZATION_LEN;
use aigw_domain::refresh_token::REFRESH_TOKEN_PREFIX;
use aigw_domain::{CredentialError, PresentedCredential};
use libfuzzer_sys::fuzz_target;

/// Every error the classifier can give, for checking that its messages are fixed texts.
const ALL_ERRORS: [CredentialError; 6] = [
    CredentialError::Missing,
    CredentialError::Malformed,
    CredentialError::RefreshTokenPresented,
    CredentialError::InvalidApiKey(ApiKeyError::WrongPrefix),
    CredentialError::InvalidApiKey(ApiKeyError::Malformed),
    CredentialError::InvalidApiKey(ApiKeyError::BadChecksum),
];

fuzz_target!(|data: &[u8]| {
    assert_eq!(PresentedCredential::from_authorization(None), Err(CredentialError::Missing));
    let Ok(value) = std::str::from_utf8(data) else { return };
    let trimmed = value.trim();
    let result = PresentedCredential::from_authorization(Some(value));
    if trimmed.is_empty() {
        assert_eq!(result, Err(CredentialError::Missing));
        return;
    }
    if trimmed.len() > MAX_AUTHORIZATION_LEN {
        assert_eq!(result, Err(CredentialError::Malformed));
        return;
    }
    match result {
        Ok(PresentedCredential::ApiKey(key)) => {
            // The key is the whole value or what follows `Bearer `, and passes parse on its own.
            assert!(trimmed.ends_with(key.expose()));
            assert_eq!(ApiKeySecret::parse(key.expose()).as_ref(), Ok(&key));
        }
        Ok(PresentedCredential::AccessToken(token)) => {
            // Only `Bearer <compact JWS>`: two dots, no whitespace, none of our prefixes.
            assert!(trimmed.ends_with(token.as_str()));
            assert!(trimmed.len() > token.len(), "bare JWT accepted: {value:?}");
            assert_eq!(token.bytes().filter(|&b| b == b'.').count(), 2);
            assert!(!token.is_empty() && !token.contains(char::is_whitespace));
            assert!(!token.starts_with(API_KEY_PREFIX) && !token.starts_with(REFRESH_TOKEN_PREFIX));
        }
        Err(err) => {
            assert_ne!(err, CredentialError::Missing);
            assert!(err.token_presented());
            // Messages and hints are fixed texts: they never quote the header value.
            let message = err.to_string();
            assert!(ALL_ERRORS.iter().any(|e| e.to_string() == message), "{message}");
            assert!(ALL_ERRORS.iter().any(|e| e.hint() == err.hint()));
        }
    }
});
