//! `RefreshTokenSecret::parse` never panics, accepts exactly `aigwr_` + 44 base62 characters, and round-trips them.
#![no_main]

use aigw_domain::refresh_token::{
    RefreshTokenSecret, REFRESH_TOKEN_PREFIX, REFRESH_TOKEN_RANDOM_LEN,
};
use aigw_domain::TokenDigest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let shaped = s.strip_prefix(REFRESH_TOKEN_PREFIX).is_some_and(|rest| {
        rest.len() == REFRESH_TOKEN_RANDOM_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    });
    match RefreshTokenSecret::parse(s) {
        None => assert!(!shaped, "refused a well-formed refresh token: {s:?}"),
        Some(token) => {
            assert!(shaped, "accepted a malformed refresh token: {s:?}");
            // Round trip: the parsed token gives back exactly the text it was parsed from.
            assert_eq!(token.expose(), s);
            assert_eq!(RefreshTokenSecret::parse(token.expose()).as_ref(), Some(&token));
            assert!(token.digest() == TokenDigest::of(s));
            // `Debug` never shows the token.
            assert!(!format!("{token:?}").contains(s));
        }
    }
});
