//! `ApiKeySecret::parse` never panics, refuses exactly what the format forbids, and round-trips what it accepts.
#![no_main]

use aigw_domain::api_key::{
    ApiKeyError, ApiKeySecret, API_KEY_LEN, API_KEY_PREFIX, KEY_PREFIX_LEN,
};
use aigw_domain::TokenDigest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let result = ApiKeySecret::parse(s);
    let shaped = s.strip_prefix(API_KEY_PREFIX).is_some_and(|rest| {
        s.len() == API_KEY_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    });
    match result {
        Err(ApiKeyError::WrongPrefix) => assert!(!s.starts_with(API_KEY_PREFIX)),
        Err(ApiKeyError::Malformed) => assert!(s.starts_with(API_KEY_PREFIX) && !shaped),
        Err(ApiKeyError::BadChecksum) => assert!(shaped),
        Ok(key) => {
            assert!(shaped, "accepted a key of the wrong shape: {s:?}");
            // Round trip: the parsed key gives back exactly the text it was parsed from.
            assert_eq!(key.expose(), s);
            assert_eq!(ApiKeySecret::parse(key.expose()).as_ref(), Ok(&key));
            assert_eq!(key.key_prefix(), &s[..KEY_PREFIX_LEN]);
            assert!(key.digest() == TokenDigest::of(s));
            // `Debug` shows the key prefix only, never the whole key.
            let shown = format!("{key:?}");
            assert!(!shown.contains(s) && shown.contains(key.key_prefix()));
        }
    }
});
