//! Configuration: built-in defaults, then an optional TOML file (`--config FILE`, else
//! `./aigw.toml` when present), then environment variables `AIGW__SECTION__KEY`
//! (e.g. `AIGW__SERVER__LISTEN`, `AIGW__DATABASE__URL`, `AIGW__AUTH__JWT_SECRET`), loaded with
//! the `config` crate. Unknown keys are errors, so a typo never goes unnoticed.
//! Every duration is in whole seconds; every size in bytes.

use aigw_service::{
    AuthConfig, CredentialCacheConfig, GatewayConfig, ProviderConfig, RateLimitConfig, UsageConfig,
};
use anyhow::Context;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// `[server]`.
    pub server: ServerSettings,
    /// `[database]`.
    pub database: DatabaseSettings,
    /// `[auth]`.
    pub auth: AuthConfig,
    /// `[gateway]`.
    pub gateway: GatewayConfig,
    /// `[[providers]]`.
    pub providers: Vec<ProviderConfig>,
    /// `[log]`.
    pub log: LogSettings,
    /// `[rate_limit]` and `[rate_limit.policies.*]` (see `aigw_service::rate_limit`).
    pub rate_limit: RateLimitConfig,
    /// `[usage]`: the usage ledger (see `aigw_service::usage`).
    pub usage: UsageConfig,
    /// `[credential_cache]`: API key and user caches, and the change feed that invalidates
    /// them (see `aigw_service::credential_cache`).
    pub credential_cache: CredentialCacheConfig,
    /// `[telemetry]`: trace export (docs/operations.md).
    pub telemetry: TelemetrySettings,
    /// `[audit]`: the audit trail.
    pub audit: AuditSettings,
    /// `[email]`: how account messages are sent (see `aigw_service::email`).
    pub email: aigw_service::email::EmailConfig,
    /// `[secret_scanning]`: GitHub's secret-scanning reports of leaked API keys (see
    /// `aigw_service::leaks`).
    pub secret_scanning: aigw_service::leaks::SecretScanningConfig,
    /// `[console]`: the browser console at `/` (see `crate::console`).
    pub console: ConsoleSettings,
    /// `[alerts]`: budget alerts and team webhooks (see `aigw_service::alerts`).
    pub alerts: aigw_service::alerts::AlertConfig,
    /// `[sso]` and `[[sso.providers]]`: single sign-on through OpenID Connect providers
    /// (see `aigw_service::sso`).
    pub sso: aigw_service::sso::SsoConfig,
    /// The clock the use cases read: the system clock; not a setting (a test sets an
    /// adjustable one to move time forward).
    #[serde(skip)]
    pub clock: aigw_service::Clock,
}

/// `[console]`: the browser console (see `crate::console`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleSettings {
    /// Serve the console at `/` (default true).
    pub enabled: bool,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// `[telemetry]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// Base URL of an OpenTelemetry collector's OTLP/HTTP receiver, e.g.
    /// `http://collector:4318` (`/v1/traces` is appended). Set: each request's span (and its
    /// caller's W3C trace context) is exported there. Default: none, no export.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans (default `aigw`).
    pub service_name: String,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self { otlp_endpoint: None, service_name: "aigw".to_owned() }
    }
}

/// `[audit]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSettings {
    /// Days audit events are kept (default 365; 0 keeps them for ever). Older ones are
    /// deleted in the background, hourly.
    pub retention_days: u32,
}

impl Default for AuditSettings {
    fn default() -> Self {
        Self { retention_days: 365 }
    }
}

/// Where the service runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Environment {
    /// Generated secrets allowed (default).
    #[default]
    Development,
    /// Refuses to start without an explicit JWT secret of at least 32 bytes.
    Production,
}

/// `[server]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address to listen on (default `127.0.0.1:8080`; port 0 picks a free port).
    pub listen: String,
    /// Origins allowed to call the API from a browser (CORS), e.g.
    /// `["https://app.example.com"]`; `["*"]` allows any origin. Default: none (no CORS
    /// headers; browsers refuse cross-origin calls). Credentials travel in the
    /// `Authorization` header, never in cookies.
    pub cors_allowed_origins: Vec<String>,
    /// `development` (default) or `production`.
    pub environment: Environment,
    /// Folder for the generated JWT secret and the default SQLite file: default `data`.
    pub data_dir: PathBuf,
    /// Worker threads (default: the number of CPUs).
    pub workers: Option<usize>,
    /// Seconds to let in-flight requests finish after SIGTERM/SIGINT (default 30).
    pub shutdown_timeout_secs: u64,
    /// Seconds a node goes on serving after SIGTERM/SIGINT while `/readyz` answers 503, before
    /// its listener closes (default 0): load balancers and Kubernetes take it out meanwhile, so
    /// that no new request meets a closed port. Set it to their probe period times the
    /// failures they need, plus a margin.
    pub drain_delay_secs: u64,
    /// Largest request body on account endpoints, in bytes (default 65536).
    pub account_body_limit_bytes: usize,
    /// Largest request body on chat completions, in bytes (default 4 MiB).
    pub chat_body_limit_bytes: usize,
    /// Seconds a request's whole body may take to arrive once its headers are in (default 10);
    /// past it the answer is 408 `request_timeout` and the connection is closed.
    pub body_read_timeout_secs: u64,
    /// Seconds a new connection may take to send a complete request head (default 5); past it
    /// the connection is answered 408 by actix-web and closed.
    pub header_read_timeout_secs: u64,
    /// Seconds an idle keep-alive connection stays open (default 5).
    pub keep_alive_secs: u64,
    /// Most open client connections of the whole process (default 1024: under 200 MB resident
    /// at the cap even when every connection holds a stalled 64 KB upload, see
    /// docs/deploy.md). Further connections wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Most open connections of one client address (default 256; 0: no cap). A connection
    /// over it is closed as soon as it is accepted, before anything is read, and never waits
    /// ahead of other clients; closing a connection frees its slot. An address is an IPv4
    /// address or an IPv6 /64 prefix; the addresses of `rate_limit.trusted_proxies` are exempt
    /// (a reverse proxy carries all its clients on its own address, so cap them there).
    pub max_connections_per_address: usize,
    /// Most requests of one client address whose body the server is still waiting for
    /// (default 32; 0: no cap). A request over it is answered 429 `rate_limit_exceeded` with
    /// `Retry-After: 1` and its connection closed. A body that arrives with its request head
    /// never counts. Trusted proxies are exempt, as for `max_connections_per_address`.
    pub max_pending_requests_per_address: usize,
    /// Address of a separate listener that serves only `GET /metrics` (e.g.
    /// `127.0.0.1:9090`), so metrics need not be public; then `server.listen` does not serve
    /// them. Default: none (`/metrics` is served on `server.listen`).
    pub metrics_listen: Option<String>,
    /// The URL users reach aigw at, e.g. `https://gw.example.com`: links in account e-mail
    /// start with it. Default: `http://` + `server.listen` (production refuses to start
    /// without it while `auth.email_verification` is not `off`).
    pub public_url: Option<String>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".to_owned(),
            cors_allowed_origins: Vec::new(),
            environment: Environment::Development,
            data_dir: PathBuf::from("data"),
            workers: None,
            shutdown_timeout_secs: 30,
            drain_delay_secs: 0,
            account_body_limit_bytes: 64 * 1024,
            chat_body_limit_bytes: 4 * 1024 * 1024,
            body_read_timeout_secs: 10,
            header_read_timeout_secs: 5,
            keep_alive_secs: 5,
            max_connections: 1024,
            max_connections_per_address: 256,
            max_pending_requests_per_address: 32,
            metrics_listen: None,
            public_url: None,
        }
    }
}

/// `[database]`. `Debug` prints `url` without its password.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://PATH` or `postgres://user@host:5432/db`; default: `aigw.db` in
    /// `server.data_dir` (`sqlite://data/aigw.db`).
    pub url: Option<String>,
    /// Most pooled connections (default 10).
    pub max_connections: u32,
    /// Seconds a request waits for a connection before answering 503 (default 5); also
    /// libpq's `connect_timeout` (at least 2).
    pub acquire_timeout_secs: u64,
    /// Longest run of one statement in seconds (default 5): PostgreSQL `statement_timeout` and
    /// `lock_timeout`, SQLite `busy_timeout`. A request that needs the database answers within
    /// `acquire_timeout_secs + statement_timeout_secs`, with 503 when the database is hung.
    pub statement_timeout_secs: u64,
    /// What lies between aigw and PostgreSQL at `url`: `none` (default; PostgreSQL itself or a
    /// pooler in session mode), `transaction` (a pooler in transaction mode, such as
    /// PgBouncer's `pool_mode = transaction`: statements go unnamed and uncached, no session
    /// setting is sent, and `session_url` is required) or `transaction_prepared` (the same,
    /// but statements stay prepared and cached: for a pooler that carries prepared statements
    /// across its server connections, PgBouncer 1.21 and later with `max_prepared_statements`
    /// above 0). docs/deploy.md "PgBouncer".
    pub pooler: PoolerSetting,
    /// A PostgreSQL URL whose connections are one server session each (PostgreSQL itself, or
    /// a pooler in session mode), for what needs a session: the change feed's `LISTEN` and the
    /// migrations' advisory lock (default: `url`). Required with `pooler = "transaction"` and
    /// `"transaction_prepared"`.
    pub session_url: Option<String>,
}

/// `database.pooler`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolerSetting {
    /// PostgreSQL itself, or a pooler in session mode.
    #[default]
    None,
    /// A pooler in transaction mode.
    Transaction,
    /// A pooler in transaction mode that carries prepared statements across its server
    /// connections (PgBouncer 1.21+ with `max_prepared_statements`).
    TransactionPrepared,
}

impl PoolerSetting {
    /// Whether consecutive transactions may run on different server sessions.
    pub fn transaction_mode(self) -> bool {
        matches!(self, Self::Transaction | Self::TransactionPrepared)
    }

    /// The setting's name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Transaction => "transaction",
            Self::TransactionPrepared => "transaction_prepared",
        }
    }
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: None,
            max_connections: 10,
            acquire_timeout_secs: 5,
            statement_timeout_secs: 5,
            pooler: PoolerSetting::None,
            session_url: None,
        }
    }
}

impl std::fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("url", &self.url.as_deref().map(aigw_domain::redact::redact_url))
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout_secs", &self.acquire_timeout_secs)
            .field("statement_timeout_secs", &self.statement_timeout_secs)
            .field("pooler", &self.pooler)
            .field("session_url", &self.session_url.as_deref().map(aigw_domain::redact::redact_url))
            .finish()
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines (default).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[log]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    /// `tracing` filter directive (default `info`); `RUST_LOG` overrides it.
    pub level: String,
    /// `text` (default) or `json`.
    pub format: LogFormat,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self { level: "info".to_owned(), format: LogFormat::Text }
    }
}

impl Settings {
    /// Checks `database.pooler` and `database.session_url`: a pooler in transaction mode is
    /// for PostgreSQL and needs a session URL; a session URL is a PostgreSQL one.
    ///
    /// # Errors
    /// A message naming the setting and the fix.
    fn validate_database(&self) -> anyhow::Result<()> {
        let postgres =
            |url: &str| url.starts_with("postgres://") || url.starts_with("postgresql://");
        let database = &self.database;
        if let Some(session) = &database.session_url {
            if !postgres(session) {
                anyhow::bail!("database.session_url must be a postgres:// URL");
            }
        }
        if database.pooler.transaction_mode() {
            let pooler = database.pooler.name();
            if !postgres(&self.database_url()) {
                anyhow::bail!(
                    "database.pooler = \"{pooler}\" is for a PostgreSQL url (a pooler such as \
                     PgBouncer in front of PostgreSQL)"
                );
            }
            if database.session_url.is_none() {
                anyhow::bail!(
                    "database.pooler = \"{pooler}\" needs database.session_url: a direct (or \
                     session-mode) PostgreSQL URL for the change feed's LISTEN and the \
                     migrations' lock, which a transaction-mode pooler cannot carry"
                );
            }
        }
        Ok(())
    }

    /// The database URL: `database.url`, or SQLite `aigw.db` inside `server.data_dir`.
    pub fn database_url(&self) -> String {
        self.database.url.clone().unwrap_or_else(|| {
            format!("sqlite://{}", self.server.data_dir.join("aigw.db").display())
        })
    }

    /// Loads defaults, then `file` (or `./aigw.toml` if it exists and `file` is `None`), then
    /// the process's `AIGW__SECTION__KEY` environment variables.
    ///
    /// # Errors
    /// When the file cannot be read or parsed, a key is unknown, or a value has the wrong type.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        Self::load_from(file, None)
    }

    /// [`Settings::load`] with the environment given as `(name, value)` pairs instead of read
    /// from the process (`None` reads the process's), for embedders and tests that must not
    /// touch process-wide state. Names keep their `AIGW__SECTION__KEY` form.
    ///
    /// # Errors
    /// As [`Settings::load`].
    pub fn load_from(file: Option<&Path>, env: Option<&[(&str, &str)]>) -> anyhow::Result<Self> {
        let env: Option<config::Map<String, String>> =
            env.map(|vars| vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        let mut builder = config::Config::builder();
        match file {
            Some(path) => {
                if !path.exists() {
                    anyhow::bail!("configuration file {} does not exist", path.display());
                }
                builder =
                    builder.add_source(config::File::from(path).format(config::FileFormat::Toml));
            }
            None => {
                builder = builder.add_source(
                    config::File::with_name("aigw.toml")
                        .format(config::FileFormat::Toml)
                        .required(false),
                );
            }
        }
        builder = builder.add_source(
            config::Environment::with_prefix("AIGW")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true)
                // `AIGW__RATE_LIMIT__TRUSTED_PROXIES=10.0.0.0/8,192.0.2.7`
                .list_separator(",")
                .with_list_parse_key("rate_limit.trusted_proxies")
                .with_list_parse_key("rate_limit.redis_sentinels")
                .with_list_parse_key("server.cors_allowed_origins")
                .source(env),
        );
        let settings = builder
            .build()
            .context("reading configuration")?
            .try_deserialize::<Settings>()
            .context("invalid configuration")?;
        settings.validate().context("invalid configuration")?;
        Ok(settings)
    }

    /// Checks what the types alone do not: every `openai` provider has an http(s) `base_url`;
    /// `server.public_url` is an http(s) URL, and set in production when accounts verify
    /// their address.
    ///
    /// # Errors
    /// A message naming the provider and the fix.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(url) = &self.server.public_url {
            let parsed = url::Url::parse(url).ok().filter(|u| {
                matches!(u.scheme(), "http" | "https") && u.host().is_some() && u.query().is_none()
            });
            if parsed.is_none() {
                anyhow::bail!(
                    "server.public_url {url:?} is not an http(s) URL without a query (e.g. \
                     public_url = \"https://gw.example.com\")"
                );
            }
        }
        if self.server.environment == Environment::Production
            && self.server.public_url.is_none()
            && self.auth.email_verification != aigw_service::config::EmailVerification::Off
        {
            anyhow::bail!(
                "server.public_url is required in production while auth.email_verification is \
                 on: the links in account e-mail start with it"
            );
        }
        self.validate_database()?;
        self.sso.validate().map_err(|e| anyhow::anyhow!(e))?;
        if !self.auth.sso_only_domains.is_empty() && self.sso.providers.is_empty() {
            anyhow::bail!(
                "auth.sso_only_domains needs [[sso.providers]]: without one, the accounts of \
                 those domains could not sign in at all"
            );
        }
        if !self.sso.providers.is_empty() && self.server.public_url.is_none() {
            anyhow::bail!(
                "sso.providers need server.public_url: each provider sends the browser back to                  <public_url>/sso/<id>/callback"
            );
        }
        for (i, p) in self.providers.iter().enumerate() {
            let base_url = p.base_url.as_deref().unwrap_or("");
            let example = match p.kind {
                aigw_service::ProviderKind::Openai => "https://api.openai.com/v1",
                aigw_service::ProviderKind::Anthropic => "https://api.anthropic.com",
                aigw_service::ProviderKind::Echo => continue,
            };
            if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
                anyhow::bail!(
                    "providers[{i}] ({:?}): kind {:?} needs base_url, the http(s) URL the \
                     API's paths start from (e.g. base_url = \"{example}\"); got {base_url:?}",
                    p.name,
                    if p.kind == aigw_service::ProviderKind::Openai {
                        "openai"
                    } else {
                        "anthropic"
                    },
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    /// A typical configuration (server, database, auth, a provider) as the documentation writes
    /// it: it must load as written.
    const DOCUMENTED_SAMPLE: &str = r#"
[server]
listen = "127.0.0.1:8080"
[database]
url = "sqlite://data/aigw.db"        # or postgres://user@host:5432/db
[auth]
jwt_secret = "at least 32 bytes of secret"
access_token_ttl_secs = 3600
refresh_token_ttl_secs = 2592000
[[providers]]
name = "openai"
kind = "openai"                      # any OpenAI-compatible HTTP upstream
base_url = "https://api.openai.com/v1"
api_key = "sk-..."                   # sent upstream; never the caller's key
models = ["gpt-4o-mini"]
"#;

    #[test]
    fn a_transaction_mode_pooler_needs_postgres_and_a_session_url() {
        let mut settings = Settings::default();
        settings.database.pooler = PoolerSetting::Transaction;
        let sqlite = settings.validate().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(sqlite.contains("database.pooler"), "{sqlite}");
        settings.database.url = Some("postgres://aigw@pgbouncer:6432/aigw".to_owned());
        let missing = settings.validate().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(missing.contains("database.session_url"), "{missing}");
        settings.database.session_url = Some("sqlite://x.db".to_owned());
        let wrong = settings.validate().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(wrong.contains("database.session_url must be a postgres"), "{wrong}");
        settings.database.session_url = Some("postgres://aigw@10.0.0.5:5432/aigw".to_owned());
        assert!(settings.validate().is_ok());
        settings.database.pooler = PoolerSetting::TransactionPrepared;
        assert!(settings.validate().is_ok());
        settings.database.session_url = None;
        let missing = settings.validate().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(missing.contains("\"transaction_prepared\" needs"), "{missing}");
    }

    #[test]
    fn the_issue_sample_loads_as_written() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("aigw.toml");
        std::fs::write(&path, DOCUMENTED_SAMPLE).unwrap_or_else(|e| panic!("{e}"));
        let settings =
            Settings::load_from(Some(&path), Some(&[])).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(settings.server.listen, "127.0.0.1:8080");
        assert_eq!(settings.database_url(), "sqlite://data/aigw.db");
        assert_eq!(
            settings.auth.jwt_secret.as_ref().map(|s| s.expose_secret().to_owned()).as_deref(),
            Some("at least 32 bytes of secret")
        );
        assert_eq!(settings.auth.access_token_ttl_secs, 3600);
        assert_eq!(settings.providers.len(), 1);
        assert_eq!(settings.providers[0].models, vec!["gpt-4o-mini".to_owned()]);
    }

    /// No `Debug` of the configuration prints a password, secret or key.
    #[test]
    fn settings_debug_hides_every_secret() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("aigw.toml");
        std::fs::write(
            &path,
            r#"
[database]
url = "postgres://aigw:TOPSECRET1@db:5432/aigw"
[auth]
jwt_secret = "TOPSECRET2 that is long enough for HS256"
[[auth.signing_keys]]
kid = "k2"
algorithm = "HS256"
secret = "TOPSECRET3 that is long enough for HS256"
[gateway]
proxy_url = "http://u:TOPSECRET4@proxy:3128"
[rate_limit]
redis_url = "redis://:TOPSECRET5@cache:6379/0"
redis_sentinels = ["sentinel-a:26379", "redis://:TOPSECRET7@sentinel-b:26379"]
[[providers]]
name = "openai"
base_url = "https://api.openai.com/v1"
api_key = "sk-TOPSECRET6"
models = ["gpt-4o-mini"]
"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let settings =
            Settings::load_from(Some(&path), Some(&[])).unwrap_or_else(|e| panic!("{e:#}"));
        let shown = format!("{settings:?}");
        assert!(!shown.contains("TOPSECRET"), "{shown}");
        assert!(shown.contains("db:5432") && shown.contains("cache:6379"), "{shown}");
        assert!(
            shown.contains("sentinel-a:26379") && shown.contains("sentinel-b:26379"),
            "{shown}"
        );
        let database = format!("{:?}", settings.database);
        assert!(!database.contains("TOPSECRET"), "{database}");
    }

    /// Prices as the documentation writes them, with model names holding dots and capitals.
    #[test]
    fn provider_prices_load_as_written() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("aigw.toml");
        let toml = r#"
[usage]
retention_days = 7
[[providers]]
name = "openai"
base_url = "https://api.openai.com/v1"
models = ["gpt-4o-mini", "GPT-4.1"]
prices = { "gpt-4o-mini" = { input_per_million = 0.15, output_per_million = 0.60 }, "GPT-4.1" = { input_per_million = 2, output_per_million = 8 } }
"#;
        std::fs::write(&path, toml).unwrap_or_else(|e| panic!("{e}"));
        let settings =
            Settings::load_from(Some(&path), Some(&[])).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(settings.usage.retention_days, 7);
        let prices = &settings.providers[0].prices;
        assert_eq!(prices.len(), 2, "{prices:?}");
        assert_eq!(prices["gpt-4o-mini"].output_per_million, 0.60);
        assert_eq!(prices["GPT-4.1"].input_per_million, 2.0);
        aigw_service::prices::PriceTable::from_providers(&settings.providers)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Tokenizers as the documentation writes them; an unknown tokenizer is refused naming
    /// the known ones.
    #[test]
    fn provider_tokenizers_load_as_written() {
        use aigw_service::dialect::tokens::{Encoding, PromptCounting};
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("aigw.toml");
        let toml = r#"
[[providers]]
name = "vllm"
base_url = "http://vllm:8000/v1"
models = ["gpt-oss-120b", "llama-3.1-70b", "mistral"]
tokenizers = { "gpt-oss-120b" = { tokenizer = "o200k_base" }, "llama-3.1-70b" = { tokens_per_byte = 0.5 } }
"#;
        std::fs::write(&path, toml).unwrap_or_else(|e| panic!("{e}"));
        let settings =
            Settings::load_from(Some(&path), Some(&[])).unwrap_or_else(|e| panic!("{e:#}"));
        let table = aigw_service::prices::PriceTable::from_providers(&settings.providers)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            table.prompt_counting("gpt-oss-120b"),
            PromptCounting::Tokenizer(Encoding::O200k)
        );
        assert_eq!(
            table.prompt_counting("llama-3.1-70b"),
            PromptCounting::Bytes { per_million: 500_000 }
        );
        assert_eq!(table.prompt_counting("mistral"), PromptCounting::ONE_PER_BYTE);
        let err = load_error(
            "[[providers]]\nname = \"x\"\nbase_url = \"https://x\"\nmodels = [\"m\"]\n\
             tokenizers = { \"m\" = { tokenizer = \"llama3\" } }\n",
        );
        assert!(err.contains("o200k_base") && err.contains("cl100k_base"), "{err}");
    }

    fn load_error(toml: &str) -> String {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("aigw.toml");
        std::fs::write(&path, toml).unwrap_or_else(|e| panic!("{e}"));
        Settings::load_from(Some(&path), Some(&[]))
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_else(|| panic!("loaded: {toml}"))
    }

    /// Sentinels come as a comma-separated list from the environment.
    #[test]
    fn redis_sentinels_are_a_list_in_the_environment() {
        let env = [
            ("AIGW__RATE_LIMIT__REDIS_SENTINELS", "10.0.0.1:26379,10.0.0.2:26379"),
            ("AIGW__RATE_LIMIT__REDIS_SENTINEL_MASTER", "aigw"),
        ];
        let settings = Settings::load_from(None, Some(&env)).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(settings.rate_limit.redis_sentinels, ["10.0.0.1:26379", "10.0.0.2:26379"]);
        assert_eq!(settings.rate_limit.redis_sentinel_master, "aigw");
    }

    /// An unknown provider `kind` names the valid ones.
    #[test]
    fn unknown_provider_kind_lists_the_valid_kinds() {
        let err = load_error(
            "[[providers]]\nname = \"x\"\nkind = \"gemini\"\nbase_url = \"https://x\"\nmodels = []\n",
        );
        assert!(
            err.contains("\"gemini\"")
                && err.contains("openai")
                && err.contains("anthropic")
                && err.contains("echo"),
            "{err}"
        );
        let err = load_error("[[providers]]\nname = \"a\"\nkind = \"anthropic\"\nmodels = []\n");
        assert!(err.contains("kind \"anthropic\" needs base_url"), "{err}");
        assert!(err.contains("https://api.anthropic.com"), "{err}");
    }

    /// A provider without `base_url` is a configuration error naming the fix.
    #[test]
    fn provider_without_base_url_is_a_clear_configuration_error() {
        let err = load_error("[[providers]]\nname = \"openai\"\nmodels = [\"gpt-4o\"]\n");
        assert!(err.contains("invalid configuration") && err.contains("base_url"), "{err}");
        assert!(err.contains("providers[0]") && !err.contains("internal"), "{err}");
    }

    /// aigw.example.toml loads, changes no default, and names every key of the settings.
    #[test]
    fn the_example_configuration_loads_and_names_every_key() {
        let example = include_str!("../../../aigw.example.toml");
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("aigw.toml");
        std::fs::write(&path, example).unwrap_or_else(|e| panic!("{e}"));
        let mut loaded =
            Settings::load_from(Some(&path), Some(&[])).unwrap_or_else(|e| panic!("{e:#}"));
        let default = Settings::default();
        // The policies are written out with their default values (unset ones are `None`).
        for policy in aigw_service::Policy::ALL {
            let (got, want) =
                (loaded.rate_limit.policies.get(policy), default.rate_limit.policies.get(policy));
            assert_eq!(got, want, "rate_limit.policies.{}", policy.name());
        }
        loaded.rate_limit.policies = Default::default();
        let defaults = format!("{default:?}");
        assert_eq!(format!("{loaded:?}"), defaults);
        // Every field name in the settings' Debug output (`name: value`) is in the file.
        let mut unquoted = String::new();
        let mut quoted = false;
        for c in defaults.chars() {
            if c == '"' {
                quoted = !quoted;
            } else if !quoted {
                unquoted.push(c);
            }
        }
        let mut missing = Vec::new();
        for word in unquoted.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
            let Some(name) = word.strip_suffix(':') else { continue };
            // `clock` is no setting: tests set it in code.
            if name.is_empty() || name.contains(':') || name == "clock" {
                continue;
            }
            let forms = [
                format!("\n{name} = "),
                format!("\n#{name} = "),
                format!("[{name}]"),
                format!(".{name}]"),
                format!(".{name}."),
                format!("[[{name}]]"),
            ];
            if !forms.iter().any(|f| example.contains(f.as_str())) {
                missing.push(name.to_owned());
            }
        }
        assert!(missing.is_empty(), "aigw.example.toml lacks {missing:?}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("aigw.toml");
        std::fs::write(&path, "[auth]\njwt_secert = \"typo\"\n").unwrap_or_else(|e| panic!("{e}"));
        let err = Settings::load_from(Some(&path), Some(&[]))
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(err.contains("jwt_secert"), "{err}");
    }
}
