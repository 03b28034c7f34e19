//! The console: aigw in the browser, at `/` (the API stays under `/api/v1`).
//!
//! Server-rendered HTML (minijinja templates, auto-escaped, compiled into the binary), one
//! stylesheet and one small script from this origin, and forms that post back here: no
//! framework, nothing loaded from elsewhere, and every page works without the script (which
//! adds copy buttons and confirmations). The pages call the same use cases as the API, with
//! the same who-may-call-what checks and rate limits, so nothing is allowed in the console
//! that the API refuses. How the session and its cookies work, and how forms are protected,
//! is in [`session`]; `console.enabled = false` turns it all off (every console path then
//! answers 404 like any unknown path).

pub(crate) mod account;
pub(crate) mod admin;
pub(crate) mod admin_invitations;
pub(crate) mod assets;
pub(crate) mod chart;
pub(crate) mod keys;
pub(crate) mod member_keys;
pub(crate) mod mfa;
pub(crate) mod ranking;
pub(crate) mod redirect;
pub(crate) mod render;
pub(crate) mod session;
pub(crate) mod sign_in;
pub(crate) mod sso;
pub(crate) mod team_usage;
pub(crate) mod team_webhook;
pub(crate) mod team_webhook_view;
pub(crate) mod teams;
pub(crate) mod templates;
pub(crate) mod usage;
pub(crate) mod usage_export;
pub(crate) mod view;

use actix_web::{middleware::from_fn, web};
pub(crate) use session::ConsoleContext;

/// Registers the console's routes, with `context` as their app data.
pub(crate) fn configure(cfg: &mut web::ServiceConfig, context: web::Data<ConsoleContext>) {
    let scope = web::scope("").app_data(context);
    let scope = account_routes(team_routes(admin_routes(sign_in_and_key_routes(scope))));
    cfg.service(
        scope
            .wrap(from_fn(session::renewed_cookies))
            .wrap(actix_web::middleware::Compress::default()),
    );
}

/// The assets, signing in and out, and the viewer's API keys.
fn sign_in_and_key_routes(scope: actix_web::Scope) -> actix_web::Scope {
    let (get, post) = (crate::routes::get_or_head, web::post);
    scope
        .route("/console/assets/console.css", get().to(assets::css))
        .route("/console/assets/console.js", get().to(assets::js))
        .route("/favicon.ico", get().to(assets::favicon))
        .route("/", get().to(sign_in::home))
        .route("/login", get().to(sign_in::login_form))
        .route("/login", post().to(sign_in::login))
        .route("/login/mfa", post().to(sign_in::login_mfa))
        .route("/register", get().to(sign_in::register_form))
        .route("/register", post().to(sign_in::register))
        .route("/password-reset", get().to(sign_in::password_reset_form))
        .route("/password-reset", post().to(sign_in::password_reset))
        .route("/logout", post().to(sign_in::logout))
        .route("/sso/{id}/start", get().to(sso::start))
        .route("/sso/{id}/callback", get().to(sso::callback))
        .route("/keys", get().to(keys::list))
        .route("/keys/new", get().to(keys::new_form))
        .route("/keys/new", post().to(keys::create))
        .route("/keys/{id}", get().to(keys::show))
        .route("/keys/{id}/rotate", post().to(keys::rotate))
        .route("/keys/{id}/revoke", post().to(keys::revoke))
        .route("/keys/{id}/delete", post().to(keys::delete))
}

/// Platform administration (role admin).
fn admin_routes(scope: actix_web::Scope) -> actix_web::Scope {
    let (get, post) = (crate::routes::get_or_head, web::post);
    scope
        .route("/admin/users", get().to(admin::users))
        .route("/admin/users/{id}/disable", post().to(admin::disable_user))
        .route("/admin/users/{id}/enable", post().to(admin::enable_user))
        .route("/admin/users/{id}/role", post().to(admin::set_role))
        .route("/admin/users/{id}/budget", post().to(admin::set_budget))
        .route("/admin/keys", get().to(admin::keys))
        .route("/admin/keys/{id}/revoke", post().to(admin::revoke_key))
        .route("/admin/invitations", get().to(admin_invitations::invitations))
        .route("/admin/invitations", post().to(admin_invitations::create_invitation))
        .route("/admin/invitations/{id}/resend", post().to(admin_invitations::resend_invitation))
        .route("/admin/invitations/{id}/revoke", post().to(admin_invitations::revoke_invitation))
        .route("/admin/audit", get().to(admin::audit))
}

/// Teams: the viewer's teams, a team's page and usage, and the forms of its owners and admins.
fn team_routes(scope: actix_web::Scope) -> actix_web::Scope {
    let (get, post) = (crate::routes::get_or_head, web::post);
    scope
        .route("/teams", get().to(teams::list))
        .route("/teams", post().to(teams::create))
        .route("/teams/{id}", get().to(teams::show))
        .route("/teams/{id}/policy", post().to(teams::update_policy))
        .route("/teams/{id}/delete", post().to(teams::delete))
        .route("/teams/{id}/members", post().to(teams::add_member))
        .route("/teams/{id}/members/{user_id}/role", post().to(teams::update_member_role))
        .route("/teams/{id}/members/{user_id}/budget", post().to(teams::update_member_budget))
        .route("/teams/{id}/members/{user_id}/keys/new", get().to(member_keys::new_form))
        .route("/teams/{id}/members/{user_id}/keys/new", post().to(member_keys::create))
        .route("/teams/{id}/members/{user_id}/remove", post().to(teams::remove_member))
        .route(
            "/teams/{id}/invitations/{invitation_id}/revoke",
            post().to(teams::revoke_invitation),
        )
        .route(
            "/teams/{id}/invitations/{invitation_id}/resend",
            post().to(teams::resend_invitation),
        )
        .route("/teams/{id}/keys/new", get().to(teams::new_key_form))
        .route("/teams/{id}/keys/new", post().to(teams::create_key))
        .route("/teams/{id}/keys/{key_id}/revoke", post().to(teams::revoke_key))
        .route("/teams/{id}/usage", get().to(team_usage::show))
        .route("/teams/{id}/usage/export.csv", get().to(usage_export::team))
        .route("/teams/{id}/webhook", post().to(team_webhook::set))
        .route("/teams/{id}/webhook/delete", post().to(team_webhook::delete))
}

/// Usage charts and downloads, sessions and the account (its second factor included).
fn account_routes(scope: actix_web::Scope) -> actix_web::Scope {
    let (get, post) = (crate::routes::get_or_head, web::post);
    scope
        .route("/usage", get().to(usage::show))
        .route("/usage/export.csv", get().to(usage_export::summary))
        .route("/usage/requests.csv", get().to(usage_export::requests))
        .route("/sessions", get().to(account::sessions))
        .route("/sessions/{id}/end", post().to(account::end_session))
        .route("/account", get().to(account::show))
        .route("/account/name", post().to(account::update_name))
        .route("/account/password", post().to(account::change_password))
        .route("/account/verification", post().to(account::request_verification))
        .route("/account/email", post().to(account::change_email))
        .route("/account/mfa", get().to(mfa::show))
        .route("/account/mfa/qr.svg", get().to(mfa::qr))
        .route("/account/mfa/enroll", post().to(mfa::enroll))
        .route("/account/mfa/confirm", post().to(mfa::confirm))
        .route("/account/mfa/recovery-codes", post().to(mfa::regenerate))
        .route("/account/mfa/disable", post().to(mfa::disable))
}
