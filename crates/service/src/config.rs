//! Settings of the use cases (`[auth]`, `[gateway]`, `[[providers]]`), deserialised by the
//! binary from TOML and `AIGW__SECTION__KEY` environment variables. Every duration is in
//! whole seconds.

use crate::password::Argon2Config;
use aigw_domain::usage::{Endpoint, ModelPrice, PriceError};
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
    /// E-mail domains whose accounts sign in only through single sign-on (`[[sso.providers]]`),
    /// e.g. `["example.com"]` (case-insensitive, exact domain): a password login and a
    /// registration with a password for such an address are refused; empty (default): none.
    pub sso_only_domains: Vec<String>,
    /// Who may create teams: `anyone` (default) or `admins`.
    pub team_creation: TeamCreation,
    /// Days a team invitation stays open after it is made or re-sent (default 7, at least 1).
    pub team_invitation_ttl_days: u32,
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
            sso_only_domains: Vec::new(),
            team_creation: TeamCreation::Anyone,
            team_invitation_ttl_days: 7,
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
/// [`crate::governance::key_leases`]).
pub const DEFAULT_LEASE_CALLS: u32 = 16;

/// `[gateway]`: how chat completions are forwarded.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Offer the built-in `echo` model, which answers with the last user message (default true).
    pub echo_model: bool,
    /// Offer the built-in `demo-priced` model ([`DEMO_MODEL`]): `echo`, offline, but priced as
    /// GPT-4o is listed (USD 2.50 per million prompt tokens, 10.00 per million completion
    /// tokens), so that spend, budgets and alerts show money with no provider configured; a
    /// demonstration, documented as such (default true; its calls cost nothing real).
    pub demo_model: bool,
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
    pub key_counters: KeyCounters,
    /// Calls' worth of a key's limits a node takes from the database's or Redis' counters at
    /// once, far from the limits, and then admits from its memory (default 16; 0 or 1: every
    /// call goes to the counters). See docs/budgets.md "Leases".
    pub key_lease_calls: u32,
    /// Upstream calls a gateway call may make to one model's deployments before it gives up
    /// on that model (default 3, at most 10; 1: no retries). Each fallback model has as many
    /// again. See docs/routing.md.
    pub max_attempts: u32,
    /// Seconds from a gateway call's arrival within which an upstream answer must begin,
    /// every attempt and fallback included (default 300); a stream, once begun, runs on.
    pub call_deadline_secs: u64,
    /// The longest `Retry-After` of an upstream's 429 or 503 the gateway waits before trying
    /// the same deployment again, in seconds (default 5); a longer one is not waited for.
    pub retry_after_max_secs: u64,
    /// The first retry's backoff in milliseconds (default 100), doubled per attempt up to 2 s,
    /// each a random time up to that (full jitter).
    pub retry_backoff_ms: u64,
    /// Fallback models tried, at most, after the requested one failed (default 2).
    pub max_fallbacks: u32,
    /// Per model, the models tried in order when every deployment of it failed:
    /// `fallbacks = { "gpt-4o" = ["gpt-4o-mini"] }`.
    pub fallbacks: std::collections::BTreeMap<String, Vec<String>>,
    /// Per model, the models tried in order when its upstream refuses the request as longer
    /// than its context window: `context_window_fallbacks = { "gpt-4o" = ["gpt-4.1"] }`.
    pub context_window_fallbacks: std::collections::BTreeMap<String, Vec<String>>,
    /// `[gateway.breaker]`: when a deployment is taken out of rotation.
    pub breaker: BreakerConfig,
    /// Every user's budget across all their keys (personal and scoped to a team; not team
    /// keys), USD per `user_budget_period`, unless an admin set the user's own
    /// (`PATCH /admin/users/{id}` `budget_usd`). Default: none. See docs/budgets.md "A
    /// user's budget".
    pub user_budget_usd: Option<f64>,
    /// The UTC calendar period of users' budgets: `daily`, `weekly`, `monthly` (default) or
    /// `total`.
    #[serde(deserialize_with = "budget_period")]
    pub user_budget_period: aigw_domain::BudgetPeriod,
    /// Every key with `ai_gateway` must be scoped to a team: creating one without `team_id`
    /// answers 400, and an existing one answers 403 on gateway calls (default false).
    pub require_team_scope: bool,
}

/// Reads a budget period by its API name (`daily`, `weekly`, `monthly`, `total`).
fn budget_period<'de, D>(deserializer: D) -> Result<aigw_domain::BudgetPeriod, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let name = String::deserialize(deserializer)?;
    aigw_domain::BudgetPeriod::parse(&name).map_err(|e| serde::de::Error::custom(e.issue))
}

/// `[gateway.breaker]`: each deployment's circuit breaker (counted per node). A breaker
/// opens after `failures` failures in a row, or when at least `failure_ratio` of the calls of
/// a `window_secs` window failed (with at least `min_calls` calls in it); it stays open
/// `cooldown_secs`, then lets one call through as a probe, whose success closes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerConfig {
    /// Consecutive failed calls that open the breaker (default 5; 0: never on a run alone).
    pub failures: u32,
    /// The share of failed calls in a window that opens the breaker (default 0.5; 0 or
    /// above 1: never on a ratio).
    pub failure_ratio: f64,
    /// The fewest calls in a window for its ratio to count (default 20).
    pub min_calls: u32,
    /// The window's length in seconds (default 30).
    pub window_secs: u64,
    /// Seconds an open breaker waits before its probe (default 30).
    pub cooldown_secs: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self { failures: 5, failure_ratio: 0.5, min_calls: 20, window_secs: 30, cooldown_secs: 30 }
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            echo_model: true,
            demo_model: true,
            connect_timeout_secs: 10,
            upstream_timeout_secs: 300,
            max_response_bytes: 16 * 1024 * 1024,
            proxy_url: None,
            key_counters: KeyCounters::Database,
            key_lease_calls: DEFAULT_LEASE_CALLS,
            max_attempts: 3,
            call_deadline_secs: 300,
            retry_after_max_secs: 5,
            retry_backoff_ms: 100,
            max_fallbacks: 2,
            fallbacks: std::collections::BTreeMap::new(),
            context_window_fallbacks: std::collections::BTreeMap::new(),
            breaker: BreakerConfig::default(),
            user_budget_usd: None,
            user_budget_period: aigw_domain::BudgetPeriod::Monthly,
            require_team_scope: false,
        }
    }
}

/// The kind of an upstream provider: `kind = "openai"`, `"anthropic"` or `"echo"` (any other
/// value is refused with a message listing these).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProviderKind {
    /// Any OpenAI-compatible HTTP API (`POST {base_url}/chat/completions`, `/embeddings`,
    /// `/responses`).
    #[default]
    Openai,
    /// Anthropic's Messages API (`POST {base_url}/v1/messages` and
    /// `/v1/messages/count_tokens`), its key sent as `x-api-key`.
    Anthropic,
    /// The built-in echo model (no network).
    Echo,
}

impl ProviderKind {
    /// The valid `kind` values, as the configuration spells them.
    pub const NAMES: [&'static str; 3] = ["openai", "anthropic", "echo"];

    /// The endpoints (API dialects) a provider of this kind serves.
    pub fn endpoints(self) -> &'static [Endpoint] {
        match self {
            Self::Openai => &[Endpoint::Chat, Endpoint::Embeddings, Endpoint::Responses],
            Self::Anthropic => &[Endpoint::Messages],
            Self::Echo => &[Endpoint::Chat],
        }
    }

    /// The path of `endpoint` below the provider's `base_url`.
    pub fn path(self, endpoint: Endpoint) -> &'static str {
        match endpoint {
            Endpoint::Chat => "/chat/completions",
            Endpoint::Embeddings => "/embeddings",
            Endpoint::Responses => "/responses",
            Endpoint::Messages => "/v1/messages",
        }
    }
}

impl<'de> Deserialize<'de> for ProviderKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let kind = String::deserialize(deserializer)?;
        match kind.as_str() {
            "openai" => Ok(Self::Openai),
            "anthropic" => Ok(Self::Anthropic),
            "echo" => Ok(Self::Echo),
            other => Err(serde::de::Error::custom(format!(
                "unknown provider kind {other:?}; valid kinds: \"openai\" (any \
                 OpenAI-compatible API, needs base_url), \"anthropic\" (Anthropic's Messages \
                 API, needs base_url), \"echo\" (the built-in offline model)"
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
    /// Base URL, e.g. `https://api.openai.com/v1` (required for `openai`), or
    /// `https://api.anthropic.com` (required for `anthropic`: calls go to
    /// `{base_url}/v1/messages`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The provider's own API key, sent upstream as `Authorization: Bearer` (`openai`) or
    /// `x-api-key` (`anthropic`); never the caller's.
    #[serde(default)]
    pub api_key: Option<SecretString>,
    /// `anthropic` only: the `anthropic-version` header sent upstream when the caller sends
    /// none (default [`DEFAULT_ANTHROPIC_VERSION`]).
    #[serde(default)]
    pub anthropic_version: Option<String>,
    /// Model names routed to this provider: each is a deployment of that model. A model
    /// several providers list has a deployment at each, chosen by `weight`.
    pub models: Vec<String>,
    /// The name the upstream knows some of `models` by, when it differs:
    /// `upstream_models = { "gpt-4o" = "gpt-4o-2024-08-06" }` (the request's `model` is
    /// rewritten to it).
    #[serde(default)]
    pub upstream_models: std::collections::BTreeMap<String, String>,
    /// This provider's share of its models' calls among their deployments (default 1; 0:
    /// only when every other deployment is out of rotation).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// The provider's own quota, per model, in requests per minute on this node: a
    /// deployment at it is skipped for another, not failed (default: none).
    #[serde(default)]
    pub rpm_limit: Option<u32>,
    /// The provider's own quota, per model, in tokens per minute (each call's worst case) on
    /// this node (default: none).
    #[serde(default)]
    pub tpm_limit: Option<u32>,
    /// Prices of some of `models`, in USD per million tokens:
    /// `prices = { "gpt-4o-mini" = { input_per_million = 0.15, output_per_million = 0.60 } }`.
    /// A model without a price costs 0 and its usage says `priced: false`.
    #[serde(default)]
    pub prices: std::collections::BTreeMap<String, PriceConfig>,
    /// How some of `models` have their prompt counted before a call, for budgets and
    /// `tpm_limit`: `tokenizers = { "gpt-oss-120b" = { tokenizer = "o200k_base" },
    /// "llama-3.1-70b" = { tokens_per_byte = 0.5 } }`. A model without an entry is counted
    /// with OpenAI's tokenizer of its family when `base_url` is on `api.openai.com` (or the
    /// provider is `echo`), else from the request body's bytes, one token per byte.
    #[serde(default)]
    pub tokenizers: std::collections::BTreeMap<String, TokenizerConfig>,
    /// The context window of some of `models`, in tokens: `context_windows = { "gpt-4.1" =
    /// 1047576 }`. A call whose input the gateway cannot see (a previous response, a
    /// conversation, a file sent by id) reserves it as its prompt for a key with a budget or
    /// a `tpm_limit`; without an entry such a call is refused for such keys.
    #[serde(default)]
    pub context_windows: std::collections::BTreeMap<String, u64>,
}

/// The `anthropic-version` an `anthropic` provider sends when neither the caller nor its
/// `anthropic_version` names one.
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

fn default_weight() -> u32 {
    1
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            kind: ProviderKind::default(),
            base_url: None,
            api_key: None,
            anthropic_version: None,
            models: Vec::new(),
            upstream_models: std::collections::BTreeMap::new(),
            weight: default_weight(),
            rpm_limit: None,
            tpm_limit: None,
            prices: std::collections::BTreeMap::new(),
            tokenizers: std::collections::BTreeMap::new(),
            context_windows: std::collections::BTreeMap::new(),
        }
    }
}

/// The built-in demonstration model's name (`gateway.demo_model`).
pub const DEMO_MODEL: &str = "demo-priced";

impl GatewayConfig {
    /// `providers` with, when `demo_model` is on and no provider lists [`DEMO_MODEL`], the
    /// built-in demonstration provider (`kind = "echo"`, priced).
    pub fn with_demo_provider(&self, mut providers: Vec<ProviderConfig>) -> Vec<ProviderConfig> {
        if self.demo_model && !providers.iter().any(|p| p.models.iter().any(|m| m == DEMO_MODEL)) {
            let price = PriceConfig {
                input_per_million: 2.5,
                output_per_million: 10.0,
                ..PriceConfig::default()
            };
            providers.push(ProviderConfig {
                name: "demo".to_owned(),
                kind: ProviderKind::Echo,
                models: vec![DEMO_MODEL.to_owned()],
                prices: std::collections::BTreeMap::from([(DEMO_MODEL.to_owned(), price)]),
                ..ProviderConfig::default()
            });
        }
        providers
    }
}

fn default_kind() -> ProviderKind {
    ProviderKind::Openai
}

/// `gateway.key_counters`: `database` (default), `node` or `redis`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyCounters {
    /// Counters are rows of the database, reserved by one conditional `UPDATE` each: exact
    /// across every node sharing the database, at the price of row locks on the hot path.
    #[default]
    Database,
    /// Counters live in this node's memory: no database write on the hot path. Exact only
    /// when this node is the only one serving the database's keys (one node, e.g. SQLite).
    Node,
    /// Counters live in Redis (`rate_limit.redis_url`): one script per admission, exact across
    /// every node using the same Redis; the database counters serve while Redis is unavailable
    /// ([`crate::governance::redis_counters`]).
    Redis,
}

/// One model's price in `[[providers]] prices = { "MODEL" = { … } }`, in USD per million
/// tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// USD per million prompt tokens, e.g. `0.15`.
    pub input_per_million: f64,
    /// USD per million completion tokens, e.g. `0.60` (reasoning tokens are billed as
    /// completion tokens, as the providers bill them).
    pub output_per_million: f64,
    /// USD per million prompt tokens read from the provider's prompt cache (OpenAI's
    /// `cached_tokens`, Anthropic's `cache_read_input_tokens`), e.g. `0.075`; by default
    /// `input_per_million`.
    #[serde(default)]
    pub cached_input_per_million: Option<f64>,
    /// USD per million prompt tokens written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`), e.g. `3.75`; by default `input_per_million`.
    #[serde(default)]
    pub cache_write_per_million: Option<f64>,
    /// Most prompt tokens the provider bills for one image (`image_url` part), e.g. `1445`
    /// for GPT-4o at high detail; the budget's and `tpm_limit`'s worst case adds it per
    /// image (default [`DEFAULT_IMAGE_TOKENS`]).
    #[serde(default)]
    pub image_tokens: Option<u64>,
}

/// Prompt tokens one image is assumed to cost at most when its model's price sets no
/// `image_tokens`: GPT-4o's and GPT-4.1's largest images cost 1 445 and 1 536 tokens, the
/// o-series' and GPT-4.1-mini's up to about 2 700 (their patch multipliers). Models that
/// bill images as many more tokens at a lower price (GPT-4o-mini: up to 48 169) need their
/// own `image_tokens`.
pub const DEFAULT_IMAGE_TOKENS: u64 = 2_800;

/// The most `image_tokens` a price may set.
pub const MAX_IMAGE_TOKENS: u64 = 1 << 20;

impl PriceConfig {
    /// The price in integer micro-USD per million tokens.
    ///
    /// # Errors
    /// [`PriceError`] for a negative, non-finite or absurd price.
    pub fn to_price(self) -> Result<ModelPrice, PriceError> {
        ModelPrice::from_usd_per_million(self.input_per_million, self.output_per_million)?
            .with_cache_prices(self.cached_input_per_million, self.cache_write_per_million)
    }
}

/// One model's entry in `[[providers]] tokenizers = { "MODEL" = { … } }`: how its prompt is
/// counted in the worst case a budget and a `tpm_limit` reserve before the call
/// (docs/budgets.md "Whose tokenizer counts the prompt"). What a call is billed is always
/// the upstream's `usage`, whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerConfig {
    /// The tokenizer the upstream counts the model's tokens with: `"o200k_base"` or
    /// `"cl100k_base"`; `"none"` when it is not one of these (the prompt is then counted from
    /// the request body's bytes). Default: by the model's family for a provider whose
    /// `base_url` is on `api.openai.com` and for `echo`, else `"none"`.
    #[serde(default)]
    pub tokenizer: Option<TokenizerName>,
    /// With no tokenizer: prompt tokens counted per byte of the request body, above 0 and at
    /// most 1 (default 1: no byte-level BPE tokenizer makes more tokens than bytes), e.g.
    /// `0.5` for an upstream whose tokenizer is known never to make more than one token of two
    /// bytes.
    #[serde(default)]
    pub tokens_per_byte: Option<f64>,
}

/// A tokenizer `tokenizers` may name: `tokenizer = "o200k_base"`, `"cl100k_base"` or
/// `"none"` (any other value is refused with a message listing these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerName {
    /// OpenAI's `o200k_base` (GPT-4o, GPT-4.1, GPT-5, the o-series, gpt-oss).
    O200kBase,
    /// OpenAI's `cl100k_base` (GPT-4, GPT-3.5).
    Cl100kBase,
    /// Not known: the prompt is counted from the body's bytes.
    None,
}

impl<'de> Deserialize<'de> for TokenizerName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        match name.as_str() {
            "o200k_base" => Ok(Self::O200kBase),
            "cl100k_base" => Ok(Self::Cl100kBase),
            "none" => Ok(Self::None),
            other => Err(serde::de::Error::custom(format!(
                "unknown tokenizer {other:?}; valid tokenizers: \"o200k_base\", \"cl100k_base\" \
                 (where the upstream counts with it), \"none\" (count the body's bytes)"
            ))),
        }
    }
}

impl AuthConfig {
    /// Whether the account of `email` signs in only through single sign-on
    /// ([`AuthConfig::sso_only_domains`]).
    pub fn sso_only(&self, email: &str) -> bool {
        aigw_domain::domain_in(email, &self.sso_only_domains)
    }
}
