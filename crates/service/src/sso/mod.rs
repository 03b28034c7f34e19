//! Single sign-on through OpenID Connect providers (docs/sso.md): the authorization code
//! flow with PKCE (S256), `state` and `nonce`, through the `openidconnect` crate.
//!
//! [`Sso::begin`] makes the provider's authorization URL and the [`PendingSignIn`] the
//! browser keeps (sealed, in a short-lived cookie, by the HTTP layer); [`Sso::complete`]
//! checks the provider's answer against it, claims its `state` once (a replayed callback is
//! refused), exchanges the code with the PKCE verifier, verifies the ID token (issuer,
//! audience, expiry, nonce, signature by a published key with an allowed algorithm) and signs
//! the person in ([`crate::accounts::SsoAccounts::sso_sign_in`]). Each refusal is a 401 with
//! what went wrong, and an audit event `sso_sign_in_refused`. A sign-in a single-page
//! application started ends at the application instead, with a one-time code ([`app`]).

pub mod app;
mod provider;

pub use crate::sso_config::{SsoConfig, SsoProviderConfig};
pub use aigw_domain::sso::SsoIdentity;
pub use app::AppReturn;

use crate::accounts::{Accounts, SsoAccounts};
use crate::audit::Event;
use crate::context::ServiceContext;
use crate::db::Db;
use crate::error::ServiceError;
use crate::mfa::LoginOutcome;
use crate::tokens::TokenIssuer;
use crate::ClientInfo;
use crate::Clock;
use aigw_domain::AuditAction;
use chrono::{DateTime, Utc};
use provider::Provider;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// HKDF info of the sealer of pending sign-ins.
const SEAL_INFO: &[u8] = b"aigw sso pending sign-in v1";

/// A sign-in that left for the provider: what the callback checks its answer against. Kept by
/// the browser, sealed ([`Sso::seal`]); `Debug` never shows its secrets.
#[derive(Clone, Serialize, Deserialize)]
pub struct PendingSignIn {
    /// The provider's id.
    pub provider: String,
    /// The `state` sent to the provider.
    state: String,
    /// The `nonce` the ID token must carry.
    nonce: String,
    /// The PKCE verifier of the code challenge sent.
    verifier: String,
    /// Where the console goes after the sign-in (already checked by the HTTP layer).
    pub next: Option<String>,
    /// Where a sign-in a single-page application started ends instead of the console.
    #[serde(default)]
    pub app: Option<AppReturn>,
    /// When the sign-in stops being accepted, UTC.
    pub expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for PendingSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingSignIn")
            .field("provider", &self.provider)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// A provider as the login page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsoProviderView {
    /// Its id (`/sso/<id>/start`).
    pub id: String,
    /// Its display name.
    pub name: String,
}

/// How a sign-in ended.
#[derive(Debug)]
pub enum SignInEnd {
    /// In the console: a session (or an MFA challenge), and where the console goes next.
    Console(Box<LoginOutcome>, Option<String>),
    /// In a single-page application: where to send the browser (its redirect URI with a
    /// one-time `code`, or with an `error`).
    App(String),
}

/// Single sign-on: the configured providers and the sign-in use cases.
#[derive(Clone)]
pub struct Sso {
    db: Db,
    clock: Clock,
    tokens: Arc<TokenIssuer>,
    accounts: SsoAccounts,
    providers: Arc<BTreeMap<String, Provider>>,
    ttl_secs: u64,
    app_redirect_uris: Arc<Vec<String>>,
}

impl std::fmt::Debug for Sso {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sso").field("providers", &self.providers.keys()).finish_non_exhaustive()
    }
}

impl Sso {
    /// The providers of `config`, whose callbacks are `<public_url>/sso/<id>/callback`; none
    /// are discovered yet (on first use, so that a provider that is down does not stop the
    /// start).
    ///
    /// # Errors
    /// A sentence when `config` is invalid, or providers are configured without a public URL.
    pub fn new(
        ctx: &ServiceContext,
        accounts: Accounts,
        config: &SsoConfig,
        public_url: Option<&str>,
    ) -> Result<Self, String> {
        config.validate()?;
        let mut providers = BTreeMap::new();
        if !config.providers.is_empty() {
            let Some(base) = public_url else {
                return Err("sso.providers need server.public_url: the providers send the \
                            browser back to <public_url>/sso/<id>/callback"
                    .to_owned());
            };
            for p in &config.providers {
                let callback = format!("{}/sso/{}/callback", base.trim_end_matches('/'), p.id);
                providers.insert(p.id.clone(), Provider::new(p.clone(), callback)?);
            }
        }
        Ok(Self {
            db: ctx.db.clone(),
            clock: ctx.clock.clone(),
            tokens: ctx.tokens.clone(),
            accounts: SsoAccounts::new(accounts),
            providers: Arc::new(providers),
            ttl_secs: config.sign_in_ttl_secs(),
            app_redirect_uris: Arc::new(config.app_redirect_uris.clone()),
        })
    }

    /// How long a sign-in may take, in seconds (`sso.sign_in_ttl_secs`).
    pub fn sign_in_ttl_secs(&self) -> u64 {
        self.ttl_secs
    }

    /// The URLs single-page applications may have their sign-ins end at
    /// (`sso.app_redirect_uris`).
    pub fn app_redirect_uris(&self) -> &[String] {
        &self.app_redirect_uris
    }

    /// The providers, in id order.
    pub fn providers(&self) -> Vec<SsoProviderView> {
        self.providers
            .values()
            .map(|p| SsoProviderView { id: p.config.id.clone(), name: p.config.name.clone() })
            .collect()
    }

    fn provider(&self, id: &str) -> Result<&Provider, ServiceError> {
        self.providers.get(id).ok_or_else(|| ServiceError::NotFound {
            resource: "sso_provider",
            id: id.chars().take(64).collect(),
        })
    }

    fn sealer(&self) -> crate::seal::Sealer {
        crate::seal::Sealer::derive(SEAL_INFO, self.tokens.key_materials())
    }

    /// `pending` sealed for the browser to keep.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when there is no key to seal with.
    pub fn seal(&self, pending: &PendingSignIn) -> Result<String, ServiceError> {
        let json = serde_json::to_string(pending)
            .map_err(|e| ServiceError::Internal(format!("pending sign-in: {e}")))?;
        self.sealer()
            .seal(&pending.provider, &json)
            .ok_or_else(|| ServiceError::Internal("no key to seal a sign-in".to_owned()))
    }

    /// Starts a sign-in at provider `id`: the URL to send the browser to, and the pending
    /// sign-in to keep until it comes back. `login_hint` is passed on to the provider; `app`
    /// makes the sign-in end at a single-page application ([`AppReturn::parse`]).
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`sso_provider`) for an unknown id;
    /// [`ServiceError::Unavailable`] when the provider's discovery document cannot be read.
    pub async fn begin(
        &self,
        id: &str,
        next: Option<String>,
        login_hint: Option<&str>,
        app: Option<AppReturn>,
    ) -> Result<(String, PendingSignIn), ServiceError> {
        let provider = self.provider(id)?;
        let start = provider.authorization_url(login_hint).await?;
        let ttl = chrono::Duration::seconds(i64::try_from(self.ttl_secs).unwrap_or(600));
        let pending = PendingSignIn {
            provider: id.to_owned(),
            state: start.state,
            nonce: start.nonce,
            verifier: start.verifier,
            next,
            app,
            expires_at: self.clock.now() + ttl,
        };
        Ok((start.url, pending))
    }

    /// Completes a sign-in at provider `id` with the callback's `code` and `state` and the
    /// browser's sealed pending sign-in. In the console: a session of the account (or, for an
    /// account with aigw's second factor on, an MFA challenge), and where to go next. Started
    /// by a single-page application: its redirect URI with a one-time code, or with the
    /// refusal as an `error`.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] (with what went wrong, audited as
    /// `sso_sign_in_refused`) when the pending sign-in is missing, unreadable, for another
    /// provider or expired, the state differs or came back before, the provider refuses the
    /// code, or the ID token fails verification; or when the account rules refuse
    /// ([`Accounts::sso_admit`]); [`ServiceError::NotFound`] for an unknown provider;
    /// [`ServiceError::Unavailable`] when the provider or the database cannot be reached. A
    /// single-page application's sign-in gets the errors after its pending sign-in was read
    /// as [`SignInEnd::App`] with an `error`.
    pub async fn complete(
        &self,
        id: &str,
        code: &str,
        state: &str,
        sealed: Option<&str>,
        client: &ClientInfo,
    ) -> Result<SignInEnd, ServiceError> {
        let provider = self.provider(id)?;
        let pending = self.checked_pending(id, state, sealed);
        let app = pending.as_ref().ok().and_then(|p| p.app.clone());
        let result = async {
            let pending = pending?;
            self.claim_state(state).await?;
            let identity = provider.identity(code, &pending.verifier, &pending.nonce).await?;
            let admission = self.accounts.sso_admit(&provider.config, &identity).await?;
            match &pending.app {
                Some(app) => Ok(SignInEnd::App(
                    app::issue_code(&self.db, &self.clock, app, &admission).await?,
                )),
                None => {
                    let outcome = self.accounts.sso_session(&admission, client).await?;
                    Ok(SignInEnd::Console(Box::new(outcome), pending.next))
                }
            }
        }
        .await;
        self.audit_refusal(&result, serde_json::json!({"provider": id})).await;
        match (result, app) {
            (Err(e), Some(app)) if !matches!(e, ServiceError::Internal(_)) => {
                Ok(SignInEnd::App(app.refused(&e)))
            }
            (result, _) => result,
        }
    }

    /// Exchanges a one-time `code` a single-page application's sign-in ended with, and the
    /// PKCE `verifier` of the challenge it started with ([`app`]): the answer a login gets (a
    /// token set, or an MFA challenge for an account with aigw's second factor on whose
    /// provider asserted none). A code is taken by its first exchange, right or wrong.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] naming `code` or `code_verifier` when malformed;
    /// [`ServiceError::Unauthorized`] (audited as `sso_sign_in_refused`) when the code is
    /// unknown, used or expired, the verifier does not match, or the account was disabled
    /// since; [`ServiceError::Unavailable`] when the database is down.
    pub async fn exchange(
        &self,
        code: &str,
        verifier: &str,
        client: &ClientInfo,
    ) -> Result<LoginOutcome, ServiceError> {
        let result = match app::take_code(&self.db, &self.clock, code, verifier).await {
            Ok(admission) => self.accounts.sso_session(&admission, client).await,
            Err(e) => Err(e),
        };
        self.audit_refusal(&result, serde_json::json!({"exchange": true})).await;
        result
    }

    /// Records a refusal (a 401) of a sign-in or an exchange as `sso_sign_in_refused`, with
    /// `details` and the reason, and logs it.
    async fn audit_refusal<T>(&self, result: &Result<T, ServiceError>, details: serde_json::Value) {
        let Err(e @ ServiceError::Unauthorized { .. }) = result else { return };
        let mut details = details;
        details["reason"] = serde_json::Value::String(e.to_string());
        tracing::warn!(details = %details, "single sign-on refused");
        let event = Event::new(AuditAction::SsoSignInRefused, None, None, self.clock.now())
            .details(details);
        crate::audit::record_alone(&self.db, event).await;
    }

    /// The browser's pending sign-in, if it is this provider's, unexpired and for `state`.
    fn checked_pending(
        &self,
        id: &str,
        state: &str,
        sealed: Option<&str>,
    ) -> Result<PendingSignIn, ServiceError> {
        let refused = ServiceError::rejected;
        let sealed = sealed.ok_or_else(|| {
            refused("single sign-on refused: this browser started no sign-in (or it expired)")
        })?;
        let pending: PendingSignIn = self
            .sealer()
            .open(id, sealed)
            .and_then(|json| serde_json::from_str(&json).ok())
            .ok_or_else(|| refused("single sign-on refused: the sign-in's cookie is not ours"))?;
        if pending.provider != id {
            return Err(refused("single sign-on refused: started with another provider"));
        }
        if pending.expires_at <= self.clock.now() {
            return Err(refused("single sign-on refused: the sign-in took too long"));
        }
        // Compared as digests: equal lengths, and their timing says nothing of the state.
        let digest = aigw_domain::digest::TokenDigest::of;
        if digest(&pending.state) != digest(state) {
            return Err(refused("single sign-on refused: the state is not this browser's"));
        }
        Ok(pending)
    }

    /// Claims `state` once (the claims are pruned a day later, by
    /// [`crate::account_email::pruning`]).
    async fn claim_state(&self, state: &str) -> Result<(), ServiceError> {
        let digest = aigw_domain::digest::TokenDigest::of(state).into_string();
        let now = self.clock.now();
        let claimed = self
            .db
            .run(move |conn| Ok(aigw_persistence::sso::claim_state(conn, &digest, now)?))
            .await?;
        if claimed {
            Ok(())
        } else {
            Err(ServiceError::rejected("single sign-on refused: this sign-in came back already"))
        }
    }
}
