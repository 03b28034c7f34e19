//! Settings of the use cases (`[auth]`, `[gateway]`, `[[providers]]`), deserialised by the
//! binary from TOML and `AIGW__SECTION__KEY` environment variables. Every duration is in
//! whole seconds.

use crate::password::Argon2Config;
use secrecy::SecretString;
use serde::Deserialize;

/// `[auth]`: tokens, sessions and passwords.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// HS256 secret for access tokens, at least 32 bytes. When absent, the binary generates
    /// one and keeps it in the data folder (refused in production).
    pub jwt_secret: Option<SecretString>,
    /// Signing keys (`[[auth.signing_keys]]`): each verifies; `active_kid` (default: the
    /// first, or `jwt_secret` when set) signs. Rotate by adding a key, switching `active_kid`,
    /// and removing the old key once the longest access-token lifetime has passed.
    pub signing_keys: Vec<SigningKeyConfig>,
    /// The `kid` of the key that signs new access tokens.
    pub active_kid: Option<String>,
    /// Access-token lifetime in seconds (default 3600).
    pub access_token_ttl_secs: u64,
    /// Session (refresh-token) lifetime in seconds, absolute from login (30 days).
    pub refresh_token_ttl_secs: u64,
    /// `iss` claim written and required (default `"aigw"`).
    pub issuer: String,
    /// `aud` claim written and required (default `"aigw"`).
    pub audience: String,
    /// Clock-skew leeway for `exp` and `nbf`, in seconds (default 5).
    pub leeway_secs: u64,
    /// How long the immediate parent of the newest refresh token may be presented again and
    /// get the same successor back, in seconds (default 10; 0 turns it off).
    pub refresh_reuse_grace_secs: u64,
    /// Minimum password length in Unicode code points (default 8).
    pub password_min_chars: usize,
    /// Maximum password length in Unicode code points (default and hard maximum 256).
    pub password_max_chars: usize,
    /// Refuse passwords on the shipped list of common passwords (default true).
    pub password_blocklist: bool,
    /// argon2id parameters.
    pub argon2: Argon2Config,
    /// Who may register: `open` (default), `invite` or `closed`.
    pub registration: RegistrationMode,
    /// E-mail domains registration accepts, e.g. `["example.com"]` (case-insensitive, exact
    /// domain); empty (default): any.
    pub allowed_email_domains: Vec<String>,
    /// Who may create teams: `anyone` (default) or `admins`.
    pub team_creation: TeamCreation,
    /// Refuse admins on the administrative endpoints (403) until their TOTP second factor is
    /// on, and, with an access token, unless its session was made with it (default false).
    pub require_mfa_for_admins: bool,
    /// The issuer shown by authenticator apps (the `otpauth://` URI's label and `issuer`;
    /// default `"aigw"`). Must not contain `:`.
    pub mfa_issuer: String,
    /// Lifetime of an MFA challenge (between a right password and the second factor), in
    /// seconds (default 300).
    pub mfa_challenge_ttl_secs: u64,
    /// Whether accounts prove their e-mail address: `off` (default), `optional` or
    /// `required` (see [`EmailVerification`]).
    pub email_verification: EmailVerification,
}

/// `auth.email_verification`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmailVerification {
    /// No link is sent at registration (a user may still ask for one).
    #[default]
    Off,
    /// Registration sends a verification link; nothing depends on it.
    Optional,
    /// Registration sends a link, and until it is opened the account can log in and read but
    /// not create API keys, and its keys cannot call the gateway (403 `forbidden`,
    /// `required: verified_email`).
    Required,
}

/// `auth.team_creation`: who may create a team.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TeamCreation {
    /// Any signed-in user, who becomes its owner.
    #[default]
    Anyone,
    /// Platform admins only.
    Admins,
}

/// `auth.registration`: who may create an account through the API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistrationMode {
    /// Anyone who can reach the port (the production start-up warns).
    #[default]
    Open,
    /// Only with an admin's single-use invitation for that e-mail.
    Invite,
    /// Nobody: only the operator command `aigw admin create-user` creates accounts.
    Closed,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            jwt_secret: None,
            signing_keys: Vec::new(),
            active_kid: None,
            access_token_ttl_secs: 3600,
            refresh_token_ttl_secs: 30 * 24 * 3600,
            issuer: "aigw".to_owned(),
            audience: "aigw".to_owned(),
            leeway_secs: 5,
            refresh_reuse_grace_secs: 10,
            password_min_chars: 8,
            password_max_chars: aigw_domain::user::PASSWORD_HARD_MAX_CHARS,
            password_blocklist: true,
            argon2: Argon2Config::default(),
            registration: RegistrationMode::Open,
            allowed_email_domains: Vec::new(),
            team_creation: TeamCreation::Anyone,
            require_mfa_for_admins: false,
            mfa_issuer: "aigw".to_owned(),
            mfa_challenge_ttl_secs: 300,
            email_verification: EmailVerification::Off,
        }
    }
}

/// Algorithm of a signing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum KeyAlgorithm {
    /// HMAC-SHA-256 with a shared secret (RFC 7518 §3.2).
    #[serde(rename = "HS256")]
    Hs256,
    /// Ed25519 signatures (RFC 8037); public keys published at `/.well-known/jwks.json`.
    #[serde(rename = "EdDSA")]
    EdDsa,
}

/// `[[auth.signing_keys]]`: one JWT key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigningKeyConfig {
    /// Key id, written in the `kid` header of tokens it signs.
    pub kid: String,
    /// `HS256` or `EdDSA`.
    pub algorithm: KeyAlgorithm,
    /// HS256: the secret, at least 32 bytes.
    #[serde(default)]
    pub secret: Option<SecretString>,
    /// EdDSA: path of a PKCS 8 PEM Ed25519 private key.
    #[serde(default)]
    pub private_key_file: Option<std::path::PathBuf>,
}

/// Calls' worth of a key's limits a lease takes, by default (`gateway.key_lease_calls`,
/// [`crate::limits::key_leases`]).
pub const DEFAULT_LEASE_CALLS: u32 = 16;

/// `[gateway]`: how chat completions are forwarded.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Offer the built-in `echo` model, which answers with the last user message (default true).
    pub echo_model: bool,
    /// Seconds to wait for an upstream connection (default 10).
    pub connect_timeout_secs: u64,
    /// Seconds to wait for a whole non-streaming answer, or between two chunks of a stream
    /// (default 300).
    pub upstream_timeout_secs: u64,
    /// Largest upstream answer read, in bytes (default 16 MiB): a larger JSON answer is 502
    /// `upstream_error`; a stream is cut there.
    pub max_response_bytes: usize,
    /// HTTP(S) proxy for upstream calls (`http://user:pass@proxy:3128`). Default: none, and the
    /// `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` environment variables are ignored.
    pub proxy_url: Option<SecretString>,
    /// Where keys' budget and `rpm_limit` / `tpm_limit` counters live: `database` (default;
    /// exact across every node sharing the database), `node` (this process's memory, no
    /// database write per call; exact only when this node is the only one) or `redis` (one
    /// script per call in the Redis of `rate_limit.redis_url`, exact across every node sharing
    /// it; the database counters while it is unavailable). See docs/budgets.md.
    pub key_counters: crate::limits::key_counters::KeyCounters,
    /// Calls' worth of a key's limits a node takes from the database's or Redis' counters at
    /// once, far from the limits, and then admits from its memory (default 16; 0 or 1: every
    /// call goes to the counters). See docs/budgets.md "Leases".
    pub key_lease_calls: u32,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            echo_model: true,
            connect_timeout_secs: 10,
            upstream_timeout_secs: 300,
            max_response_bytes: 16 * 1024 * 1024,
            proxy_url: None,
            key_counters: crate::limits::key_counters::KeyCounters::Database,
            key_lease_calls: DEFAULT_LEASE_CALLS,
        }
    }
}

/// The kind of an upstream provider: `kind = "openai"` or `kind = "echo"` (any other value
/// is refused with a message listing these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// Any OpenAI-compatible HTTP API (`POST {base_url}/chat/completions`).
    Openai,
    /// The built-in echo model (no network).
    Echo,
}

impl ProviderKind {
    /// The valid `kind` values, as the configuration spells them.
    pub const NAMES: [&'static str; 2] = ["openai", "echo"];
}

impl<'de> Deserialize<'de> for ProviderKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let kind = String::deserialize(deserializer)?;
        match kind.as_str() {
            "openai" => Ok(Self::Openai),
            "echo" => Ok(Self::Echo),
            other => Err(serde::de::Error::custom(format!(
                "unknown provider kind {other:?}; valid kinds: \"openai\" (any \
                 OpenAI-compatible API, needs base_url), \"echo\" (the built-in offline model)"
            ))),
        }
    }
}

/// `[[providers]]`: one upstream and the models it serves.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Name used in logs and errors.
    pub name: String,
    /// Kind (default `openai`).
    #[serde(default = "default_kind")]
    pub kind: ProviderKind,
    /// Base URL, e.g. `https://api.openai.com/v1` (required for `openai`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The provider's own API key, sent upstream as `Authorization: Bearer`; never the caller's.
    #[serde(default)]
    pub api_key: Option<SecretString>,
    /// Model names routed to this provider.
    pub models: Vec<String>,
    /// Prices of some of `models`, in USD per million tokens:
    /// `prices = { "gpt-4o-mini" = { input_per_million = 0.15, output_per_million = 0.60 } }`.
    /// A model without a price costs 0 and its usage says `priced: false`.
    #[serde(default)]
    pub prices: std::collections::BTreeMap<String, crate::usage::config::PriceConfig>,
    /// How some of `models` have their prompt counted before a call, for budgets and
    /// `tpm_limit`: `tokenizers = { "gpt-oss-120b" = { tokenizer = "o200k_base" },
    /// "llama-3.1-70b" = { tokens_per_byte = 0.5 } }`. A model without an entry is counted
    /// with OpenAI's tokenizer of its family when `base_url` is on `api.openai.com` (or the
    /// provider is `echo`), else from the request body's bytes, one token per byte.
    #[serde(default)]
    pub tokenizers: std::collections::BTreeMap<String, crate::usage::config::TokenizerConfig>,
}

fn default_kind() -> ProviderKind {
    ProviderKind::Openai
}
