//! Handlers, one module per endpoint group, and the route table.

pub(crate) mod account;
pub(crate) mod account_email;
pub(crate) mod account_pages;
pub(crate) mod admin;
pub(crate) mod api_keys;
pub(crate) mod attempts;
pub(crate) mod auth;
pub(crate) mod chat;
pub(crate) mod document;
pub(crate) mod embeddings;
pub(crate) mod gateway;
pub(crate) mod health;
pub(crate) mod messages;
pub(crate) mod mfa;
pub(crate) mod models;
pub(crate) mod responses;
pub(crate) mod secret_scanning;
pub(crate) mod sso;
pub(crate) mod teams;
pub(crate) mod usage;
pub(crate) mod usage_export;
pub(crate) mod webhooks;

use crate::error::ApiError;
use crate::extract::{AcceptsXApiKey, BodyLimit};
use crate::rate_limit::LimitedBy;
use actix_web::{guard, web, HttpRequest, HttpResponse};
use aigw_service::Policy;

/// Registers every route. Paths that exist answer 405 for other methods.
pub(crate) fn configure(cfg: &mut web::ServiceConfig, account_limit: usize, chat_limit: usize) {
    cfg.service(
        web::scope("/api/v1")
            .app_data(BodyLimit(account_limit))
            // The hot routes first: actix tries routes in order, and each pattern with a
            // `{param}` costs a regex match (a request's route is also looked up again for the
            // access log's `route` label).
            .configure(|cfg| gateway_routes(cfg, chat_limit))
            .configure(account_routes)
            .configure(api_key_routes)
            .configure(team_routes)
            .configure(team_key_routes)
            .configure(usage_routes)
            .configure(admin_routes)
            .configure(document_routes),
    )
    // The pages the links in account e-mail open (HTML forms, see `account_pages`).
    .service(
        web::resource("/account/verify-email")
            .route(get_or_head().to(account_pages::verify_email_form))
            .route(web::post().to(account_pages::verify_email_submit))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["GET", "POST"]))),
    )
    .service(
        web::resource("/account/reset-password")
            .route(get_or_head().to(account_pages::reset_password_form))
            .route(web::post().to(account_pages::reset_password_submit))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["GET", "POST"]))),
    )
    .service(one("/.well-known/jwks.json", &["GET"], get_or_head().to(auth::jwks)))
    .service(one("/healthz", &["GET"], get_or_head().to(health::healthz)))
    .service(one("/readyz", &["GET"], get_or_head().to(health::readyz)));
}

/// `/ai/…`: chat completions (the hot route, first), embeddings, responses, Anthropic's
/// messages and token counts ([`anthropic_routes`]), the stored responses and the models (API
/// keys with `ai_gateway`).
fn gateway_routes(cfg: &mut web::ServiceConfig, chat_limit: usize) {
    cfg.service(
        web::resource("/ai/chat/completions")
            .app_data(BodyLimit(chat_limit))
            .app_data(LimitedBy(Policy::Ai))
            .route(web::post().to(chat::completions))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["POST"]))),
    );
    cfg.service(
        web::resource("/ai/embeddings")
            .app_data(BodyLimit(chat_limit))
            .app_data(LimitedBy(Policy::Ai))
            .route(web::post().to(embeddings::create))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["POST"]))),
    );
    cfg.service(
        web::resource("/ai/responses")
            .app_data(BodyLimit(chat_limit))
            .app_data(LimitedBy(Policy::Ai))
            .route(web::post().to(responses::create))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["POST"]))),
    );
    // Before the patterns with a `{param}`: a scope's static prefix is matched without a regex.
    anthropic_routes(cfg, chat_limit);
    cfg.service(
        web::resource("/ai/responses/{id}")
            .app_data(LimitedBy(Policy::Ai))
            .route(get_or_head().to(responses::retrieve))
            .route(web::delete().to(responses::delete))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["GET", "DELETE"]))),
    );
    cfg.service(
        one("/ai/responses/{id}/input_items", &["GET"], get_or_head().to(responses::input_items))
            .app_data(LimitedBy(Policy::Ai)),
    );
    cfg.service(
        one("/ai/models", &["GET"], get_or_head().to(models::list)).app_data(LimitedBy(Policy::Ai)),
    );
    cfg.service(
        one("/ai/models/{model:.+}", &["GET"], get_or_head().to(models::retrieve))
            .app_data(LimitedBy(Policy::Ai)),
    );
}

/// `/ai/anthropic/v1/messages…`: Anthropic's messages and token counts, the key also in
/// `x-api-key`, errors in Anthropic's shape too (API keys with `ai_gateway`).
fn anthropic_routes(cfg: &mut web::ServiceConfig, chat_limit: usize) {
    cfg.service(
        web::scope("/ai/anthropic")
            .app_data(AcceptsXApiKey)
            .wrap(actix_web::middleware::from_fn(crate::middleware::anthropic_errors::shape))
            .service(
                web::resource("/v1/messages")
                    .app_data(BodyLimit(chat_limit))
                    .app_data(LimitedBy(Policy::Ai))
                    .route(web::post().to(messages::create))
                    .default_service(web::to(|req: HttpRequest| not_allowed(req, &["POST"]))),
            )
            .service(
                web::resource("/v1/messages/count_tokens")
                    .app_data(BodyLimit(chat_limit))
                    .app_data(LimitedBy(Policy::Ai))
                    .route(web::post().to(messages::count_tokens))
                    .default_service(web::to(|req: HttpRequest| not_allowed(req, &["POST"]))),
            )
            .default_service(web::to(no_route)),
    );
}

/// `/auth/…` but API keys, and `/audit`: registration, login and the second factor, the
/// account's e-mail and password, sessions, refresh and logout, the caller's audit trail.
fn account_routes(cfg: &mut web::ServiceConfig) {
    cfg.configure(sign_in_routes)
        .configure(second_factor_routes)
        .configure(account_email_routes)
        .configure(session_routes);
}

/// `/auth/me`, `/auth/register`, `/auth/login`, `/auth/login/mfa` and `/auth/sso/…`.
fn sign_in_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/auth/me")
            .app_data(LimitedBy(Policy::Account))
            .route(get_or_head().to(auth::me))
            .route(web::patch().to(account::update_me))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["GET", "PATCH"]))),
    );
    cfg.service(
        one("/auth/register", &["POST"], web::post().to(auth::register))
            .app_data(LimitedBy(Policy::Register)),
    );
    cfg.service(
        one("/auth/login", &["POST"], web::post().to(auth::login))
            .app_data(LimitedBy(Policy::Login)),
    );
    cfg.service(
        one("/auth/login/mfa", &["POST"], web::post().to(mfa::login_mfa))
            .app_data(LimitedBy(Policy::Login)),
    );
    cfg.service(one("/auth/sso/providers", &["GET"], get_or_head().to(sso::providers)));
    cfg.service(
        one("/auth/sso/exchange", &["POST"], web::post().to(sso::exchange))
            .app_data(LimitedBy(Policy::Login)),
    );
}

/// `/auth/mfa…`: the second factor's status, enrollment, disabling and recovery codes.
fn second_factor_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        one("/auth/mfa", &["GET"], get_or_head().to(mfa::status))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/auth/mfa/totp/enroll", &["POST"], web::post().to(mfa::enroll))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/auth/mfa/totp/confirm", &["POST"], web::post().to(mfa::confirm))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/auth/mfa/totp/disable", &["POST"], web::post().to(mfa::disable))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/auth/mfa/recovery-codes", &["POST"], web::post().to(mfa::regenerate_recovery_codes))
            .app_data(LimitedBy(Policy::Account)),
    );
}

/// `/auth/email…` and `/auth/password-reset…`: the flows that reach the user's mailbox.
fn account_email_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        one(
            "/auth/email/verification",
            &["POST"],
            web::post().to(account_email::request_verification),
        )
        .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/auth/email/verify", &["POST"], web::post().to(account_email::verify))
            .app_data(LimitedBy(Policy::AuthFailure)),
    );
    cfg.service(
        one("/auth/email/change", &["POST"], web::post().to(account_email::change))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/auth/password-reset", &["POST"], web::post().to(account_email::request_reset))
            .app_data(LimitedBy(Policy::PasswordReset)),
    );
    cfg.service(
        one(
            "/auth/password-reset/confirm",
            &["POST"],
            web::post().to(account_email::confirm_reset),
        )
        .app_data(LimitedBy(Policy::AuthFailure)),
    );
}

/// `/auth/sessions…`, `/auth/password`, `/auth/refresh`, `/auth/logout` and `/audit`: the
/// caller's sessions, password and audit trail.
fn session_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        one("/auth/sessions", &["GET"], get_or_head().to(account::list_sessions))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/auth/sessions/{id}", &["DELETE"], web::delete().to(account::end_session))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/auth/password", &["POST"], web::post().to(account::change_password))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/auth/refresh", &["POST"], web::post().to(auth::refresh))
            .app_data(LimitedBy(Policy::Refresh)),
    );
    cfg.service(
        one("/auth/logout", &["POST"], web::post().to(auth::logout))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/audit", &["GET"], get_or_head().to(account::audit))
            .app_data(LimitedBy(Policy::Account)),
    );
}

/// `/auth/api-keys…`: the caller's API keys.
fn api_key_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/auth/api-keys")
            .app_data(LimitedBy(Policy::Account))
            .route(web::post().to(api_keys::create))
            .route(get_or_head().to(api_keys::list))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["GET", "POST"]))),
    );
    cfg.service(
        one("/auth/api-keys/{id}/revoke", &["POST"], web::post().to(api_keys::revoke))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/auth/api-keys/{id}/rotate", &["POST"], web::post().to(api_keys::rotate))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        web::resource("/auth/api-keys/{id}")
            .app_data(LimitedBy(Policy::Account))
            .route(web::delete().to(api_keys::delete))
            .route(web::patch().to(api_keys::update))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["DELETE", "PATCH"]))),
    );
}

/// `/teams…`: teams, members, invitations, team keys and usage.
fn team_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/teams")
            .app_data(LimitedBy(Policy::Account))
            .route(web::post().to(teams::create))
            .route(get_or_head().to(teams::list))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["GET", "POST"]))),
    );
    cfg.service(
        web::resource("/teams/{id}")
            .app_data(LimitedBy(Policy::Account))
            .route(get_or_head().to(teams::get))
            .route(web::patch().to(teams::update))
            .route(web::delete().to(teams::delete))
            .default_service(web::to(|req: HttpRequest| {
                not_allowed(req, &["GET", "PATCH", "DELETE"])
            })),
    );
    cfg.service(
        web::resource("/teams/{id}/members")
            .app_data(LimitedBy(Policy::Account))
            .route(web::post().to(teams::add_member))
            .route(get_or_head().to(teams::list_members))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["GET", "POST"]))),
    );
    cfg.service(
        web::resource("/teams/{id}/members/{user_id}")
            .app_data(LimitedBy(Policy::Account))
            .route(web::patch().to(teams::update_member))
            .route(web::delete().to(teams::remove_member))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["PATCH", "DELETE"]))),
    );
    cfg.service(
        one("/teams/{id}/usage", &["GET"], get_or_head().to(teams::usage))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/teams/{id}/invitations", &["GET"], get_or_head().to(teams::list_invitations))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one(
            "/teams/{id}/invitations/{invitation_id}",
            &["DELETE"],
            web::delete().to(teams::revoke_invitation),
        )
        .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one(
            "/teams/{id}/invitations/{invitation_id}/resend",
            &["POST"],
            web::post().to(teams::resend_invitation),
        )
        .app_data(LimitedBy(Policy::EmailSend)),
    );
}

/// `/teams/{id}/api-keys…` and `/teams/{id}/members/{user_id}/api-keys`: team keys, and keys
/// made for members; `/teams/{id}/webhook…`: the team's webhook.
fn team_key_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/teams/{id}/webhook")
            .app_data(LimitedBy(Policy::Account))
            .route(web::put().to(webhooks::set))
            .route(get_or_head().to(webhooks::get))
            .route(web::delete().to(webhooks::delete))
            .default_service(web::to(|req: HttpRequest| {
                not_allowed(req, &["GET", "PUT", "DELETE"])
            })),
    );
    cfg.service(
        one("/teams/{id}/webhook/deliveries", &["GET"], get_or_head().to(webhooks::deliveries))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one(
            "/teams/{id}/members/{user_id}/api-keys",
            &["POST"],
            web::post().to(teams::create_member_key),
        )
        .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        web::resource("/teams/{id}/api-keys")
            .app_data(LimitedBy(Policy::Account))
            .route(web::post().to(teams::create_key))
            .route(get_or_head().to(teams::list_keys))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["GET", "POST"]))),
    );
    cfg.service(
        one("/teams/{id}/api-keys/{key_id}/rotate", &["POST"], web::post().to(teams::rotate_key))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/teams/{id}/api-keys/{key_id}/revoke", &["POST"], web::post().to(teams::revoke_key))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        web::resource("/teams/{id}/api-keys/{key_id}")
            .app_data(LimitedBy(Policy::Account))
            .route(web::patch().to(teams::update_key))
            .route(web::delete().to(teams::delete_key))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["PATCH", "DELETE"]))),
    );
}

/// `/usage…`: the caller's metered usage.
fn usage_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        one("/usage", &["GET"], get_or_head().to(usage::summary))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/usage/requests", &["GET"], get_or_head().to(usage::requests))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/usage/budget", &["GET"], get_or_head().to(usage::budget))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/usage/export", &["GET"], get_or_head().to(usage_export::summary))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/usage/requests/export", &["GET"], get_or_head().to(usage_export::requests))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/teams/{id}/usage/export", &["GET"], get_or_head().to(usage_export::team))
            .app_data(LimitedBy(Policy::Account)),
    );
}

/// `/admin/…` (role admin) and GitHub's secret-scanning reports.
fn admin_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        one("/admin/users", &["GET"], get_or_head().to(admin::list_users))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        web::resource("/admin/users/{id}")
            .app_data(LimitedBy(Policy::Account))
            .route(get_or_head().to(admin::get_user))
            .route(web::patch().to(admin::update_user))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["GET", "PATCH"]))),
    );
    cfg.service(
        web::resource("/admin/invitations")
            .app_data(LimitedBy(Policy::Account))
            .route(web::post().to(admin::create_invitation))
            .route(get_or_head().to(admin::list_invitations))
            .default_service(web::to(|req: HttpRequest| not_allowed(req, &["GET", "POST"]))),
    );
    cfg.service(
        one("/admin/invitations/{id}", &["DELETE"], web::delete().to(admin::revoke_invitation))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/admin/invitations/{id}/resend", &["POST"], web::post().to(admin::resend_invitation))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/admin/audit", &["GET"], get_or_head().to(admin::audit))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/admin/api-keys", &["GET"], get_or_head().to(admin::list_api_keys))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/admin/api-keys/{id}/revoke", &["POST"], web::post().to(admin::revoke_api_key))
            .app_data(LimitedBy(Policy::Account)),
    );
    cfg.service(
        one("/admin/leaked-keys", &["POST"], web::post().to(secret_scanning::admin_leaked_keys))
            .app_data(LimitedBy(Policy::Account)),
    );
    // No credential: GitHub signs the body. Failed signatures count per client address
    // (`auth_failure`), checked before any database work.
    cfg.service(
        one("/secret-scanning/github", &["POST"], web::post().to(secret_scanning::github))
            .app_data(BodyLimit(secret_scanning::MAX_GITHUB_REPORT_BYTES)),
    );
}

/// `/openapi.json`.
fn document_routes(cfg: &mut web::ServiceConfig) {
    // The only large body aigw serves: gzip it (when asked). Nothing else is compressed:
    // chat completions and streams go out as the upstream sent them, and the small
    // account bodies cost more to compress than to send (docs/performance.md).
    cfg.service(
        one("/openapi.json", &["GET"], get_or_head().to(document::openapi))
            .wrap(actix_web::middleware::Compress::default()),
    );
}

/// `GET /metrics` (Prometheus text, see `crate::observe`).
pub(crate) fn configure_metrics(cfg: &mut web::ServiceConfig) {
    cfg.service(one("/metrics", &["GET"], get_or_head().to(health::metrics)));
}

/// `GET`, and `HEAD` answered by the same handler (actix sends no body for `HEAD`), so load
/// balancers that probe with `HEAD` work.
pub(crate) fn get_or_head() -> actix_web::Route {
    web::route().guard(guard::Any(guard::Get()).or(guard::Head()))
}

fn one(
    path: &str,
    allowed: &'static [&'static str],
    route: actix_web::Route,
) -> actix_web::Resource {
    web::resource(path)
        .route(route)
        .default_service(web::to(move |req: HttpRequest| not_allowed(req, allowed)))
}

async fn not_allowed(
    req: HttpRequest,
    allowed: &'static [&'static str],
) -> Result<HttpResponse, ApiError> {
    Err(ApiError::method_not_allowed(req.method().as_str(), allowed))
}

/// The answer for a path no route matches: 404 in the envelope.
pub(crate) async fn no_route(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::no_route(req.path()))
}

#[cfg(test)]
mod tests {
    /// The handlers of `/api/v1`, with their sources.
    const HANDLERS: [(&str, &str); 16] = [
        ("account", include_str!("account.rs")),
        ("account_email", include_str!("account_email.rs")),
        ("admin", include_str!("admin.rs")),
        ("api_keys", include_str!("api_keys.rs")),
        ("auth", include_str!("auth.rs")),
        ("chat", include_str!("chat.rs")),
        ("embeddings", include_str!("embeddings.rs")),
        ("messages", include_str!("messages.rs")),
        ("mfa", include_str!("mfa.rs")),
        ("models", include_str!("models.rs")),
        ("responses", include_str!("responses.rs")),
        ("secret_scanning", include_str!("secret_scanning.rs")),
        ("teams", include_str!("teams.rs")),
        ("usage", include_str!("usage.rs")),
        ("usage_export", include_str!("usage_export.rs")),
        ("webhooks", include_str!("webhooks.rs")),
    ];

    /// Every handler of `/api/v1` has its OpenAPI path (`#[utoipa::path(...)]`), so the
    /// document-driven tests (the credential check of `openapi_contract`, the fuzzer) reach
    /// it. Whether a documented operation asks for a credential exactly when its `security`
    /// says so is checked against the running server (`tests/it/openapi_contract.rs`).
    #[test]
    fn every_handler_has_an_openapi_path() {
        for (module, source) in HANDLERS {
            let documented = source.matches("#[utoipa::path(").count();
            let handlers = source.matches("\npub(crate) async fn ").count();
            assert_eq!(documented, handlers, "{module}: a handler without an OpenAPI path");
        }
    }
}
