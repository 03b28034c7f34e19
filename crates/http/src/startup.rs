//! Building and running the server: configuration -> pool -> migrations -> services -> actix.

use crate::routes;
use crate::settings::Settings;
use crate::state::AppState;
use actix_web::dev::{AppConfig, Extensions, Server};
use actix_web::middleware::{from_fn, Condition};
use actix_web::{web, App, HttpServer};
use aigw_persistence::{migrations, DatabaseUrl, Pool, PoolOptions, Pooler};
use aigw_service::{BackgroundTasks, Db, Gateway, ServiceContext, TokenIssuer, UsageService};
use anyhow::Context;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A built, bound, not yet running server.
pub struct Application {
    port: u16,
    server: Server,
    usage: UsageService,
    background: BackgroundTasks,
    /// The `server.metrics_listen` server, when configured.
    metrics_server: Option<Server>,
    upkeep: tokio::task::JoinHandle<()>,
    /// `data_dir/aigw.lock`, locked for as long as the server lives.
    _data_lock: std::fs::File,
    audit_retention: tokio::task::JoinHandle<()>,
    /// Deletes ended account tokens and MFA challenges, hourly.
    account_pruning: tokio::task::JoinHandle<()>,
    /// Budget alerts and webhook deliveries (stopped when dropped).
    alert_tasks: aigw_service::alerts::AlertTasks,
    /// Set while the node waits out `drain` after a stop signal (`/readyz` answers 503).
    draining: Arc<AtomicBool>,
    /// `server.drain_delay_secs`.
    drain: Duration,
}

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application").field("port", &self.port).finish_non_exhaustive()
    }
}

/// Opens the pool for `settings.database`, applies pending migrations and fills the e-mail
/// skeletons of accounts written before they existed (on a blocking thread; a colliding
/// account is logged at warn). Returns the pool.
///
/// # Errors
/// When the URL is not understood, the database is unreachable or a migration fails.
pub async fn migrate(settings: &Settings) -> anyhow::Result<Pool> {
    let url = DatabaseUrl::parse(&settings.database_url())?;
    let pooler = match settings.database.pooler {
        crate::settings::PoolerSetting::None => Pooler::None,
        crate::settings::PoolerSetting::Transaction => Pooler::Transaction,
        crate::settings::PoolerSetting::TransactionPrepared => Pooler::TransactionPrepared,
    };
    let options = PoolOptions {
        max_connections: settings.database.max_connections,
        acquire_timeout_secs: settings.database.acquire_timeout_secs,
        statement_timeout_secs: settings.database.statement_timeout_secs,
        pooler,
    };
    let mut pool = Pool::new(&url, &options)?;
    if let Some(session) = &settings.database.session_url {
        pool = pool.with_session_url(DatabaseUrl::parse(session)?);
    }
    let migrating = pool.clone();
    let (applied, backfill) = tokio::task::spawn_blocking(move || {
        // The migrations hold a session-level advisory lock: on a session of their own.
        let mut conn = migrating.session_connection()?;
        let applied = migrations::run_pending(&mut conn)?;
        let backfill = aigw_persistence::users::backfill_email_skeletons(&mut conn)?;
        Ok::<_, aigw_persistence::PersistenceError>((applied, backfill))
    })
    .await
    .context("migration task failed")?
    .with_context(|| format!("applying migrations to {url:?}"))?;
    if applied.is_empty() {
        tracing::info!(database = ?url, "database schema up to date");
    } else {
        tracing::info!(database = ?url, ?applied, "applied migrations");
    }
    if pooler != Pooler::None {
        warn_without_statement_timeout(&pool).await;
    }
    if backfill.filled > 0 {
        tracing::info!(users = backfill.filled, "e-mail skeletons filled for existing accounts");
    }
    for user_id in &backfill.colliding {
        tracing::warn!(
            user_id = %user_id,
            "this account's e-mail address looks like an earlier account's (same UTS 39 \
             skeleton): it keeps working, without a skeleton"
        );
    }
    Ok(pool)
}

/// Through a transaction-mode pooler aigw sends no `statement_timeout` (it would stay on a
/// server connection other clients share): warns when the server applies none, since a hung
/// statement would then hold a connection until `tcp_user_timeout`.
async fn warn_without_statement_timeout(pool: &Pool) {
    let pool = pool.clone();
    let timeout = tokio::task::spawn_blocking(move || {
        let mut conn = pool.get()?;
        aigw_persistence::statement_timeout(&mut conn)
    })
    .await;
    if let Ok(Ok(Some(timeout))) = timeout {
        if timeout == "0" {
            tracing::warn!(
                "database.pooler = \"transaction\": PostgreSQL applies no statement_timeout to \
                 aigw's statements; set one for its role (ALTER ROLE ... SET statement_timeout \
                 = '5s'; also lock_timeout) and PgBouncer's query_timeout (docs/deploy.md)"
            );
        }
    }
}

/// CORS for browser clients: only the configured origins.
/// With none configured (the default) the middleware is not installed at all.
fn cors(origins: &[String]) -> actix_cors::Cors {
    use actix_web::http::{header, Method};
    let mut cors = actix_cors::Cors::default()
        .allowed_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
        .allowed_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            // Anthropic's SDKs in a browser: the key, the API version and beta features.
            header::HeaderName::from_static("x-api-key"),
            header::HeaderName::from_static("anthropic-version"),
            header::HeaderName::from_static("anthropic-beta"),
            header::HeaderName::from_static("idempotency-key"),
        ])
        .expose_headers([
            header::HeaderName::from_static("x-request-id"),
            header::RETRY_AFTER,
            header::HeaderName::from_static("ratelimit"),
            header::HeaderName::from_static("ratelimit-policy"),
            header::HeaderName::from_static("x-aigw-deployment"),
            header::HeaderName::from_static("x-aigw-attempts"),
        ])
        .max_age(3600);
    for origin in origins {
        cors = if origin == "*" { cors.allow_any_origin() } else { cors.allowed_origin(origin) };
    }
    cors
}

/// Creates `data_dir` and locks `data_dir/aigw.lock` for this process (an advisory `flock`,
/// released when the process ends, however it ends), so that a second server on the same
/// folder (its SQLite file, usage spool and development secret) refuses to start instead of
/// sharing them silently.
///
/// # Errors
/// When the folder cannot be created, or another process holds it.
fn lock_data_dir(data_dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    use fs4::fs_std::FileExt;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating server.data_dir {}", data_dir.display()))?;
    let path = data_dir.join("aigw.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let locked =
        file.try_lock_exclusive().with_context(|| format!("locking {}", path.display()))?;
    if !locked {
        anyhow::bail!(
            "server.data_dir {} is in use by another aigw process (it holds {}); give each \
             server its own data_dir",
            data_dir.display(),
            path.display()
        );
    }
    Ok(file)
}

/// The `server.metrics_listen` server: `GET /metrics` only, one worker.
fn metrics_server(address: &str, state: web::Data<AppState>) -> anyhow::Result<Server> {
    let listener = TcpListener::bind(address)
        .with_context(|| format!("binding server.metrics_listen {address}"))?;
    tracing::info!(metrics_listen = %address, "metrics served on their own address");
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .configure(routes::configure_metrics)
            .default_service(web::to(routes::no_route))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run())
}

/// Resolves the signing keys, connects and migrates the database and builds the account
/// services' shared ground (its background work not started): what the server and the operator commands
/// (`aigw admin …`) share.
///
/// # Errors
/// Bad configuration, a short secret in production, an unreachable database, a failed
/// migration.
pub(crate) async fn service_context(settings: &Settings) -> anyhow::Result<(ServiceContext, Db)> {
    let keys = crate::secrets::signing_keys(settings)?;
    let pool = migrate(settings).await?;
    let tokens = TokenIssuer::new(
        keys,
        settings.auth.issuer.clone(),
        settings.auth.audience.clone(),
        settings.auth.access_token_ttl_secs,
        settings.auth.leeway_secs,
    )?;
    let db = Db::new(pool).context("starting the database threads")?;
    let spend = aigw_service::levels::PlatformSpend::from_config(&settings.gateway)
        .map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.issue))?;
    let context = ServiceContext::new(
        db.clone(),
        tokens,
        settings.auth.clone(),
        settings.credential_cache.clone(),
    )?
    .with_clock(settings.clock.clone())
    .with_platform_spend(spend);
    Ok((context, db))
}

/// The account mail setup of `settings`: the mailer's sender tasks (`[email]`) and the URL
/// links point to (`server.public_url`).
pub(crate) fn account_mail(
    settings: &Settings,
    metrics: aigw_service::Metrics,
) -> anyhow::Result<aigw_service::account_email::AccountMail> {
    use aigw_service::email::{EmailTransportKind, Mailer};
    let mailer = Mailer::start(&settings.email, metrics).map_err(anyhow::Error::msg)?;
    if settings.server.environment == crate::settings::Environment::Production
        && settings.email.transport == EmailTransportKind::Log
    {
        tracing::warn!(
            "email.transport = \"log\": account messages (password reset links included) are \
             written to the log, not sent; configure [email] with an SMTP server (docs/accounts.md)"
        );
    }
    let public_url = settings
        .server
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", settings.server.listen));
    Ok(aigw_service::account_email::AccountMail::new(mailer, &public_url))
}

impl Application {
    /// Resolves secrets, connects and migrates the database, builds the services and binds
    /// `server.listen`.
    ///
    /// # Errors
    /// Any start-up failure, with a one-line cause (bad configuration, short secret in
    /// production, database unreachable, address in use).
    pub async fn build(mut settings: Settings) -> anyhow::Result<Self> {
        settings.providers = settings.gateway.with_demo_provider(settings.providers);
        let data_lock = lock_data_dir(&settings.server.data_dir)?;
        let services = Services::start(&settings).await?;
        let metrics_server = match &settings.server.metrics_listen {
            Some(address) => Some(metrics_server(address, services.state.clone())?),
            None => None,
        };
        let listener = TcpListener::bind(&settings.server.listen)
            .with_context(|| format!("binding {}", settings.server.listen))?;
        let (port, server) = serve(&settings, listener, &services, metrics_server.is_none())?;
        tracing::info!(listen = %settings.server.listen, port, "aigw listening");
        Ok(Self {
            port,
            server,
            usage: services.usage,
            background: services.background,
            metrics_server,
            upkeep: services.upkeep,
            _data_lock: data_lock,
            audit_retention: services.audit_retention,
            account_pruning: services.account_pruning,
            alert_tasks: services.alert_tasks,
            draining: services.state.draining.clone(),
            drain: Duration::from_secs(settings.server.drain_delay_secs),
        })
    }

    /// The bound port (useful with port 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Serves until SIGTERM or SIGINT (Ctrl-C); then, for `server.drain_delay_secs`, goes on
    /// serving while `/readyz` answers 503 (load balancers take the node out); then closes the
    /// listener, lets in-flight requests finish (up to `server.shutdown_timeout_secs`), writes
    /// the usage records still in memory (to the database, else to the spool file) and the
    /// `last_used_at` uses still in memory, and returns. SIGQUIT stops at once, without waiting
    /// for requests in flight.
    ///
    /// # Errors
    /// An I/O error of the server.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let metrics = self.metrics_server.map(|server| {
            let handle = server.handle();
            (handle, tokio::spawn(server))
        });
        let handle = self.server.handle();
        let (draining, drain) = (self.draining.clone(), self.drain);
        let signals = tokio::spawn(async move {
            let graceful = shutdown_signal().await;
            if graceful && !drain.is_zero() {
                draining.store(true, Ordering::Release);
                tracing::info!(
                    drain_delay_secs = drain.as_secs(),
                    "stopping: /readyz answers 503 while load balancers take the node out"
                );
                let quit = async {
                    // SIGQUIT during the delay stops at once.
                    while shutdown_signal().await {}
                };
                tokio::select! {
                    () = tokio::time::sleep(drain) => {}
                    () = quit => {
                        handle.stop(false).await;
                        return;
                    }
                }
            }
            handle.stop(graceful).await;
        });
        let served = self.server.await;
        signals.abort();
        if let Some((handle, task)) = metrics {
            handle.stop(true).await;
            let _ = task.await;
        }
        self.upkeep.abort();
        self.usage.shutdown().await;
        self.background.shutdown().await;
        self.audit_retention.abort();
        self.account_pruning.abort();
        drop(self.alert_tasks);
        served
    }
}

/// What a node runs besides its HTTP server: the state every handler shares, the console's
/// context, and the background tasks (change feed, usage recorder, metrics upkeep, audit and
/// account-token pruning).
struct Services {
    state: web::Data<AppState>,
    console: Option<web::Data<crate::console::ConsoleContext>>,
    usage: UsageService,
    background: BackgroundTasks,
    upkeep: tokio::task::JoinHandle<()>,
    audit_retention: tokio::task::JoinHandle<()>,
    account_pruning: tokio::task::JoinHandle<()>,
    alert_tasks: aigw_service::alerts::AlertTasks,
}

/// Warns when anyone who reaches a production server may register (and spend).
fn warn_open_registration(settings: &Settings) {
    if settings.server.environment == crate::settings::Environment::Production
        && settings.auth.registration == aigw_service::RegistrationMode::Open
    {
        tracing::warn!(
            "auth.registration = \"open\": anyone who can reach this port can register and \
             spend the configured providers; set \"invite\" or \"closed\" (docs/permissions.md)"
        );
    }
}

/// The gateway of `settings`: its routes, metered into `usage`, with keys' budgets and
/// rpm/tpm limits as worst-case reservations against counters in the database, the node's
/// memory or Redis (the Redis link shared with the request rate `limits`; docs/budgets.md),
/// and the owners of stored responses in the database.
///
/// # Errors
/// A bad provider, price or counter setting.
fn gateway(
    settings: &Settings,
    db: Db,
    usage: &UsageService,
    limits: &mut crate::rate_limit::RequestRateLimits,
    metrics: aigw_service::Metrics,
) -> anyhow::Result<Gateway> {
    let key_limits = aigw_service::governance::key_limits::SpendGovernance::from_config(
        db.clone(),
        &settings.gateway,
        &settings.rate_limit,
        aigw_service::prices::PriceTable::from_providers(&settings.providers)?,
        std::time::Duration::from_millis(settings.usage.flush_interval_ms),
        || limits.share_redis(&settings.rate_limit),
    )?
    .with_clock(settings.clock.clone())
    .with_spend_signals(usage.spend_signals());
    Ok(Gateway::new(&settings.gateway, &settings.providers)?
        .with_meter(usage.meter())
        .with_key_limits(key_limits)
        .with_stored_responses(db, settings.clock.clone())
        .with_metrics(metrics))
}

impl Services {
    /// Connects and migrates the database and builds the use cases, the gateway and the
    /// limits from `settings`, starting their background tasks.
    ///
    /// # Errors
    /// Bad configuration, a short secret in production, an unreachable database, a failed
    /// migration.
    async fn start(settings: &Settings) -> anyhow::Result<Self> {
        let (context, db) = service_context(settings).await?;
        warn_open_registration(settings);
        let answers_sealer = aigw_service::seal::Sealer::derive(
            b"aigw idempotent answer seal v1",
            context.tokens().key_materials(),
        );
        let telemetry = crate::observe::Telemetry::new()?;
        let metrics = telemetry.metrics.clone();
        let context = context.with_metrics(metrics.clone());
        let services =
            aigw_service::Services::new(context, Some(account_mail(settings, metrics.clone())?));
        let idempotency = aigw_service::idempotency::Idempotency::new(db.clone(), answers_sealer);
        // The change feed and the caches it invalidates (see `aigw_service::credential_cache`).
        let background = services.context.start_background();
        let account_pruning =
            aigw_service::account_email::pruning::spawn_pruning(db.clone(), settings.clock.clone());
        let audit_retention =
            aigw_service::audit::spawn_retention(db.clone(), settings.audit.retention_days);
        // The usage ledger: a recorder task fed by the gateway's meter, its spool in data_dir.
        let usage = UsageService::start_with_metrics(
            db.clone(),
            &settings.usage,
            &settings.providers,
            &settings.server.data_dir,
            metrics.clone(),
            services.context.credential_cache().node_id(),
            settings.clock.clone(),
        )?;
        let mut limits = crate::rate_limit::RequestRateLimits::new(&settings.rate_limit)?
            .with_metrics(metrics.clone());
        let gateway = gateway(settings, db, &usage, &mut limits, metrics)?;
        let alerts = aigw_service::alerts::BudgetAlerts::new(
            &services.context,
            services.account_email.clone(),
            settings.alerts.clone(),
        )
        .map_err(|e| anyhow::anyhow!(e))?;
        let alert_tasks = alerts.start(&usage.spend_signals()).map_err(|e| anyhow::anyhow!(e))?;
        let secret_scanning = settings
            .secret_scanning
            .enabled
            .then(|| aigw_service::leaks::GithubKeys::new(&settings.secret_scanning))
            .transpose()?;
        let upkeep = telemetry.spawn_upkeep();
        let (console, sso) = sign_in_parts(settings, &services)?;
        let state = web::Data::new(AppState {
            context: services.context,
            authenticator: services.authenticator,
            accounts: services.accounts,
            account_email: services.account_email,
            mfa: services.mfa,
            api_keys: services.api_keys,
            teams: services.teams,
            admin: services.admin,
            leaks: services.leaks,
            sso,
            alerts,
            gateway,
            limits,
            idempotency,
            usage: usage.clone(),
            telemetry,
            secret_scanning,
            draining: Arc::new(AtomicBool::new(false)),
        });
        Ok(Self {
            state,
            console,
            usage,
            background,
            upkeep,
            audit_retention,
            account_pruning,
            alert_tasks,
        })
    }
}

/// What the console and single sign-on need: the console's context (when it is enabled)
/// and the configured OpenID Connect providers.
///
/// # Errors
/// An `[sso]` configuration that does not hold together.
fn sign_in_parts(
    settings: &Settings,
    services: &aigw_service::Services,
) -> anyhow::Result<(Option<web::Data<crate::console::ConsoleContext>>, aigw_service::sso::Sso)> {
    let console = settings.console.enabled.then(|| {
        web::Data::new(crate::console::ConsoleContext::new(
            settings.server.environment != crate::settings::Environment::Development,
            &settings.auth,
            services.context.tokens().key_materials(),
        ))
    });
    let sso = aigw_service::sso::Sso::new(
        &services.context,
        services.accounts.clone(),
        &settings.sso,
        settings.server.public_url.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    Ok((console, sso))
}

/// The HTTP server of `services` on `listener`: `server.workers` workers, the connection caps
/// per worker and per client address, the timeouts of `[server]`, the API's routes (with
/// `/metrics` when `metrics_here`) and the console's; returns the bound port and the server.
///
/// # Errors
/// An invalid `rate_limit.trusted_proxies`, or a listener actix cannot use.
fn serve(
    settings: &Settings,
    listener: TcpListener,
    services: &Services,
    metrics_here: bool,
) -> anyhow::Result<(u16, Server)> {
    let state = services.state.clone();
    let console = services.console.clone();
    let caps_metrics = state.telemetry.metrics.clone();
    let local_addr = listener.local_addr()?;
    let port = local_addr.port();
    let account_limit = settings.server.account_body_limit_bytes;
    let chat_limit = settings.server.chat_body_limit_bytes;
    let cors_origins = settings.server.cors_allowed_origins.clone();
    let body_timeout = crate::extract::BodyReadTimeout(Duration::from_secs(
        settings.server.body_read_timeout_secs.max(1),
    ));
    let workers = settings
        .server
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    // actix-server counts connections per worker.
    let per_worker = settings.server.max_connections.max(1).div_ceil(workers);
    let head_timeout = Duration::from_secs(settings.server.header_read_timeout_secs.max(1));
    let keep_alive = Duration::from_secs(settings.server.keep_alive_secs.max(1));
    // Every connection is admitted by its client address first
    // (`crate::middleware::connections`).
    let caps = crate::middleware::connections::AddressCaps::new(
        settings.server.max_connections_per_address,
        settings.server.max_pending_requests_per_address,
        crate::rate_limit::TrustedProxies::parse(
            &settings.rate_limit.trusted_proxies,
            settings.rate_limit.forwarded_header,
        )?,
        caps_metrics,
    );
    let description = web::Data::new(routes::document::ApiDescription::new(
        <crate::openapi::ApiDoc as utoipa::OpenApi>::openapi,
    ));
    let app = move || {
        App::new()
            .app_data(state.clone())
            .app_data(description.clone())
            .app_data(body_timeout)
            .configure(|cfg| routes::configure(cfg, account_limit, chat_limit))
            .configure(|cfg| {
                if metrics_here {
                    routes::configure_metrics(cfg);
                }
            })
            // Last: the console's scope takes every path the API's routes did not.
            .configure(|cfg| {
                if let Some(console) = &console {
                    crate::console::configure(cfg, console.clone());
                }
            })
            .default_service(web::to(routes::no_route))
            .wrap(from_fn(crate::middleware::rate_limit_headers::headers))
            .wrap(Condition::new(!cors_origins.is_empty(), cors(&cors_origins)))
            .wrap(from_fn(crate::middleware::access_log::access_log))
    };
    // What `actix_web::HttpServer` builds, with the admission in front of actix-http's
    // connection service: workers, the per-worker connection cap, `shutdown_timeout_secs`,
    // and the graceful-shutdown signal that closes idle keep-alive connections when
    // shutdown begins.
    let builder = actix_server::Server::build()
        // SIGINT drains like SIGTERM (actix-server's own handler would stop at once):
        // `Application::run_until_stopped` listens for both.
        .disable_signals()
        .workers(workers)
        .max_concurrent_connections(per_worker)
        .shutdown_timeout(settings.server.shutdown_timeout_secs);
    let graceful = builder.graceful_shutdown_signal();
    let builder = builder.listen("aigw", listener, move || {
        let graceful = graceful.clone();
        // `graceful_shutdown_signal` is hidden from actix-http's documentation but is
        // what `HttpServer` uses (actix-web 4.18, actix-http 3.20).
        let http = actix_http::HttpService::build()
            .graceful_shutdown_signal(move || {
                let graceful = graceful.clone();
                async move { graceful.notified().await }
            })
            .keep_alive(keep_alive)
            .client_request_timeout(head_timeout)
            .client_disconnect_timeout(Duration::from_secs(1))
            .local_addr(local_addr)
            .on_connect_ext(
                |io: &crate::middleware::connections::CappedStream, data: &mut Extensions| {
                    io.share_pending(data)
                },
            )
            .finish(actix_service::map_config(app(), |_| AppConfig::default()));
        caps.guard(http)
    })?;
    Ok((port, builder.run()))
}

/// Waits for a signal to stop: `true` (drain requests in flight) for SIGTERM and SIGINT,
/// `false` (stop at once) for SIGQUIT. Without signal support it waits for ever.
async fn shutdown_signal() -> bool {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::quit()),
    ) else {
        tracing::warn!("cannot listen for signals; stop the process with SIGKILL");
        return std::future::pending().await;
    };
    let (graceful, name) = tokio::select! {
        _ = term.recv() => (true, "SIGTERM"),
        _ = int.recv() => (true, "SIGINT"),
        _ = quit.recv() => (false, "SIGQUIT"),
    };
    tracing::info!(signal = name, graceful, "shutting down");
    graceful
}
