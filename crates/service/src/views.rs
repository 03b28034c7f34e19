//! What the use cases return: plain data, rendered by the HTTP layer.

use aigw_domain::{ApiKeyId, PermissionSet, Role, SessionId, TeamId, UserId};
use aigw_persistence::models::{ApiKeyPolicy, ApiKeyRow, UserRow};
use chrono::{DateTime, Utc};

/// A user as shown to its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserView {
    /// The user's id.
    pub id: UserId,
    /// Normalised e-mail address.
    pub email: String,
    /// Display name.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Creation time, UTC.
    pub created_at: DateTime<Utc>,
    /// Last change of the account, UTC.
    pub updated_at: DateTime<Utc>,
    /// Whether an administrator has disabled the account.
    pub disabled: bool,
    /// When the account proved it receives mail at `email`, UTC; `None`: never.
    pub email_verified_at: Option<DateTime<Utc>>,
}

impl From<&UserRow> for UserView {
    fn from(row: &UserRow) -> Self {
        Self {
            id: row.id.as_str().into(),
            email: row.email.clone(),
            name: row.name.clone(),
            role: row.role,
            created_at: row.created_at,
            updated_at: row.updated_at,
            disabled: row.disabled_at.is_some(),
            email_verified_at: row.email_verified_at,
        }
    }
}

/// A token set: returned by register, login and refresh. `Debug` never
/// prints the tokens.
#[derive(Clone)]
pub struct TokenSet {
    /// The user the tokens belong to.
    pub user: UserView,
    /// JWT access token.
    pub access_token: String,
    /// Expiry of the access token, UTC.
    pub expires_at: DateTime<Utc>,
    /// Lifetime of the access token, in seconds.
    pub expires_in: u64,
    /// Opaque refresh token (`aigwr_…`).
    pub refresh_token: String,
    /// The session the tokens belong to.
    pub session_id: SessionId,
}

/// An API key as listed (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyView {
    /// The key's id.
    pub id: ApiKeyId,
    /// The owner's user id.
    pub user_id: UserId,
    /// Label.
    pub name: String,
    /// First 12 characters of the key.
    pub key_prefix: String,
    /// Permissions.
    pub permissions: PermissionSet,
    /// Optional expiry, UTC.
    pub expires_at: Option<DateTime<Utc>>,
    /// Creation time, UTC.
    pub created_at: DateTime<Utc>,
    /// Revocation time, UTC.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Last use, UTC (recorded at most once a minute).
    pub last_used_at: Option<DateTime<Utc>>,
    /// Models, budget, rate limits and metadata.
    pub policy: ApiKeyPolicy,
    /// Last rotation, UTC.
    pub rotated_at: Option<DateTime<Utc>>,
    /// The team the key is scoped to.
    pub team_id: Option<TeamId>,
    /// Whether it is a team key (owned by the team; `user_id` then is who created it).
    pub team_owned: bool,
}

impl From<&ApiKeyRow> for ApiKeyView {
    fn from(row: &ApiKeyRow) -> Self {
        Self {
            id: row.id.as_str().into(),
            user_id: row.user_id.as_str().into(),
            name: row.name.clone(),
            key_prefix: row.key_prefix.clone(),
            permissions: row.permissions.clone(),
            expires_at: row.expires_at,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
            last_used_at: row.last_used_at,
            policy: row.policy.clone(),
            rotated_at: row.rotated_at,
            team_id: row.team_id.as_deref().map(TeamId::from),
            team_owned: row.team_owned,
        }
    }
}

/// A newly created API key: the view plus the full secret, shown only this once. `Debug` never
/// prints the secret.
#[derive(Clone)]
pub struct CreatedApiKey {
    /// The stored key.
    pub view: ApiKeyView,
    /// The full key (`aigw_…`).
    pub key: String,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSet")
            .field("user", &self.user)
            .field("access_token", &"***")
            .field("expires_at", &self.expires_at)
            .field("expires_in", &self.expires_in)
            .field("refresh_token", &"***")
            .field("session_id", &self.session_id)
            .finish()
    }
}

impl std::fmt::Debug for CreatedApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedApiKey").field("view", &self.view).field("key", &"***").finish()
    }
}

/// No `Debug` of a type holding a token or key prints it.
#[cfg(test)]
#[allow(clippy::panic)]
mod debug_redaction {
    use super::*;
    use crate::config::{
        AuthConfig, GatewayConfig, ProviderConfig, ProviderKind, SigningKeyConfig,
    };
    use crate::rate_limit::RateLimitConfig;
    use crate::tokens::{IssuedAccessToken, SigningKey, TokenIssuer};
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
}
