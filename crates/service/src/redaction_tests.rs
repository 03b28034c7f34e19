//! `Debug` never shows a secret: the views, token sets and configuration types that hold one
//! print it redacted (a test across the crate's modules, so it sits beside none of them).
#![allow(clippy::panic)]

use crate::config::{AuthConfig, GatewayConfig, ProviderConfig, ProviderKind, SigningKeyConfig};
use crate::rate_limit::RateLimitConfig;
use crate::tokens::{IssuedAccessToken, SigningKey, TokenIssuer};
use crate::views::*;
use chrono::Utc;
use secrecy::SecretString;

const SECRET: &str = "TOPSECRET-0123456789-abcdefghijklmnop";

fn assert_hidden(shown: String) {
    assert!(!shown.contains(SECRET), "{shown}");
}

fn user() -> UserView {
    UserView {
        id: "u".into(),
        email: "ann@example.com".into(),
        name: "Ann".into(),
        role: aigw_domain::Role::User,
        created_at: Utc::now(),
        updated_at: Utc::now(),
        disabled: false,
        email_verified_at: None,
        budget_micros: None,
    }
}

#[test]
fn token_set() {
    assert_hidden(format!(
        "{:?}",
        TokenSet {
            user: user(),
            access_token: SECRET.into(),
            expires_at: Utc::now(),
            expires_in: 1,
            refresh_token: SECRET.into(),
            session_id: "s".into(),
        }
    ));
}

#[test]
fn created_api_key() {
    let view = ApiKeyView {
        id: "k".into(),
        user_id: "u".into(),
        name: "n".into(),
        key_prefix: "aigw_1234567".into(),
        permissions: aigw_domain::PermissionSet::from_storage("read"),
        expires_at: None,
        created_at: Utc::now(),
        revoked_at: None,
        last_used_at: None,
        policy: Default::default(),
        rotated_at: None,
        team_id: None,
        team_owned: false,
        created_by: "u".into(),
    };
    assert_hidden(format!("{:?}", CreatedApiKey { view, key: SECRET.into() }));
}

#[test]
fn issued_access_token() {
    assert_hidden(format!(
        "{:?}",
        IssuedAccessToken { token: SECRET.into(), expires_at: Utc::now(), expires_in: 1 }
    ));
}

#[test]
fn signing_key_and_issuer() {
    let key = SigningKey::hs256(SECRET.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    assert_hidden(format!("{key:?}"));
    let issuer = TokenIssuer::new(vec![key], "i".into(), "a".into(), 60, 5)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_hidden(format!("{issuer:?}"));
}

#[test]
fn auth_config_and_signing_key_config() {
    let config = AuthConfig {
        jwt_secret: Some(SecretString::from(SECRET)),
        signing_keys: vec![SigningKeyConfig {
            kid: "k".into(),
            algorithm: crate::config::KeyAlgorithm::Hs256,
            secret: Some(SecretString::from(SECRET)),
            private_key_file: None,
        }],
        ..AuthConfig::default()
    };
    assert_hidden(format!("{config:?}"));
}

#[test]
fn provider_and_gateway_config() {
    let provider = ProviderConfig {
        name: "p".into(),
        kind: ProviderKind::Openai,
        base_url: Some("https://api.example.com/v1".into()),
        api_key: Some(SecretString::from(SECRET)),
        models: vec!["m".into()],
        tokenizers: Default::default(),
        prices: Default::default(),
        ..ProviderConfig::default()
    };
    assert_hidden(format!("{provider:?}"));
    let gateway = GatewayConfig {
        proxy_url: Some(SecretString::from(format!("http://u:{SECRET}@proxy:3128"))),
        ..GatewayConfig::default()
    };
    assert_hidden(format!("{gateway:?}"));
}

#[test]
fn rate_limit_config() {
    let config = RateLimitConfig {
        redis_url: format!("redis://:{SECRET}@cache:6379/0"),
        ..RateLimitConfig::default()
    };
    let shown = format!("{config:?}");
    assert!(shown.contains("cache:6379"), "{shown}");
    assert_hidden(shown);
}

#[test]
fn sealer() {
    assert_hidden(format!("{:?}", crate::seal::Sealer::new([SECRET.as_bytes()])));
}
