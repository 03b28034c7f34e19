//! One OpenID Connect provider: its discovery document and keys (read on first use, read
//! again when an ID token names a key they do not hold), the authorization URL of a sign-in,
//! and the code exchange with the ID token's verification, through `openidconnect`.

use crate::error::ServiceError;
use crate::sso_config::SsoProviderConfig;
use aigw_domain::sso::SsoIdentity;
use openidconnect::core::{CoreClient, CoreGenderClaim, CoreProviderMetadata, CoreResponseType};
use openidconnect::{
    AccessToken, AdditionalClaims, AuthenticationFlow, AuthorizationCode, ClaimsVerificationError,
    ClientId, ClientSecret, CsrfToken, IssuerUrl, LoginHint, Nonce, OAuth2TokenResponse,
    PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, SignatureVerificationError,
    SubjectIdentifier, TokenResponse, UserInfoError,
};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::RwLock;

/// How long a request to the provider may take.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// The parts of a sign-in's start: the URL, and what the browser keeps until it comes back.
pub(crate) struct Start {
    pub(crate) url: String,
    pub(crate) state: String,
    pub(crate) nonce: String,
    pub(crate) verifier: String,
}

/// A configured provider and, once read, its discovery document.
pub(crate) struct Provider {
    pub(crate) config: SsoProviderConfig,
    issuer: IssuerUrl,
    redirect: RedirectUrl,
    http: reqwest::Client,
    metadata: RwLock<Option<CoreProviderMetadata>>,
}

/// A provider's failure to answer as unavailable (a 503 with `Retry-After`).
fn unreachable_provider(id: &str, e: impl std::fmt::Display) -> ServiceError {
    ServiceError::Unavailable(format!("the identity provider {id} cannot be reached: {e}"))
}

impl Provider {
    /// `config`'s provider, sending browsers back to `callback`.
    ///
    /// # Errors
    /// A sentence when the issuer or the callback is not a URL, or no HTTP client can be made.
    pub(crate) fn new(config: SsoProviderConfig, callback: String) -> Result<Self, String> {
        let issuer = IssuerUrl::new(config.issuer.clone())
            .map_err(|e| format!("sso.providers[{}].issuer: {e}", config.id))?;
        let redirect = RedirectUrl::new(callback)
            .map_err(|e| format!("sso.providers[{}]: the callback URL: {e}", config.id))?;
        // No redirects: an ID token, a key set or a code exchange answered from elsewhere
        // would be SSRF by a provider's redirect. No idle connections: a sign-in is rare, and
        // a code (single-use) sent on a connection the provider closed meanwhile is lost.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(0)
            .timeout(PROVIDER_TIMEOUT)
            .build()
            .map_err(|e| format!("sso: HTTP client: {e}"))?;
        Ok(Self { config, issuer, redirect, http, metadata: RwLock::new(None) })
    }

    /// The discovery document (and keys): the one read before unless `refresh`.
    async fn metadata(&self, refresh: bool) -> Result<CoreProviderMetadata, ServiceError> {
        if !refresh {
            if let Some(metadata) = self.metadata.read().await.as_ref() {
                return Ok(metadata.clone());
            }
        }
        let mut slot = self.metadata.write().await;
        let read = CoreProviderMetadata::discover_async(self.issuer.clone(), &self.http)
            .await
            .map_err(|e| unreachable_provider(&self.config.id, e))?;
        *slot = Some(read.clone());
        tracing::info!(provider = %self.config.id, "identity provider discovered");
        Ok(read)
    }

    fn client(&self, metadata: CoreProviderMetadata) -> CoreClientWithEndpoints {
        CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            self.config.client_secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(self.redirect.clone())
    }

    /// The authorization URL of a new sign-in (code flow, PKCE S256, fresh state and nonce).
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the discovery document cannot be read.
    pub(crate) async fn authorization_url(
        &self,
        login_hint: Option<&str>,
    ) -> Result<Start, ServiceError> {
        let client = self.client(self.metadata(false).await?);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(
                AuthenticationFlow::<CoreResponseType>::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        for scope in self.config.scopes() {
            request = request.add_scope(Scope::new(scope));
        }
        if let Some(hint) = login_hint.filter(|h| !h.is_empty()) {
            request = request.set_login_hint(LoginHint::new(hint.to_owned()));
        }
        let (url, state, nonce) = request.url();
        Ok(Start {
            url: url.to_string(),
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            verifier: verifier.secret().clone(),
        })
    }

    /// Exchanges `code` (with the PKCE `verifier`) and verifies the ID token against `nonce`;
    /// an ID token signed with a key the provider had not published when it was read makes
    /// it read again, once.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] when the provider refuses the code or the ID token is
    /// missing or fails verification; [`ServiceError::Unavailable`] when the provider cannot
    /// be reached.
    pub(crate) async fn identity(
        &self,
        code: &str,
        verifier: &str,
        nonce: &str,
    ) -> Result<SsoIdentity, ServiceError> {
        let client = self.client(self.metadata(false).await?);
        let exchange = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| unreachable_provider(&self.config.id, e))?
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_owned()));
        let tokens = exchange.request_async(&self.http).await.map_err(|e| {
            tracing::warn!(provider = %self.config.id, error = %e, "code exchange failed");
            match e {
                openidconnect::RequestTokenError::Request(_) => {
                    unreachable_provider(&self.config.id, "token endpoint")
                }
                _ => {
                    ServiceError::rejected("single sign-on refused: the provider refused the code")
                }
            }
        })?;
        let id_token = tokens.id_token().ok_or_else(|| {
            ServiceError::rejected("single sign-on refused: the provider sent no ID token")
        })?;
        let nonce = Nonce::new(nonce.to_owned());
        let verified = match id_token.claims(&client.id_token_verifier(), &nonce) {
            Err(ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey,
            )) => {
                // The provider may have rotated its keys since they were read.
                let fresh = self.client(self.metadata(true).await?);
                let verifier = fresh.id_token_verifier();
                let claims = id_token.claims(&verifier, &nonce).cloned();
                claims
            }
            other => other.cloned(),
        };
        let claims = verified.map_err(|e| {
            tracing::warn!(provider = %self.config.id, error = %e, "ID token refused");
            ServiceError::rejected(refusal(&e))
        })?;
        let mut groups = groups_of(&id_token.to_string(), self.config.groups_claim());
        if self.config.reads_userinfo() && client.user_info_url().is_some() {
            let subject = claims.subject().clone();
            for group in self.userinfo_groups(&client, tokens.access_token(), subject).await? {
                if !groups.contains(&group) {
                    groups.push(group);
                }
            }
        }
        Ok(SsoIdentity {
            groups,
            subject: claims.subject().as_str().to_owned(),
            email: claims.email().map(|e| e.as_str().to_owned()),
            email_verified: claims.email_verified().unwrap_or(false),
            name: claims.name().and_then(|n| n.get(None)).map(|n| n.as_str().to_owned()),
            amr: claims
                .auth_method_refs()
                .map(|amr| amr.iter().map(|a| a.as_str().to_owned()).collect())
                .unwrap_or_default(),
        })
    }
}

impl Provider {
    /// The groups the provider's userinfo endpoint lists for `subject` (OpenID Connect Core
    /// 5.3), read with the sign-in's access token.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] when the provider refuses the request or answers for
    /// another subject; [`ServiceError::Unavailable`] when it cannot be reached or answers a
    /// server error.
    async fn userinfo_groups(
        &self,
        client: &CoreClientWithEndpoints,
        access_token: &AccessToken,
        subject: SubjectIdentifier,
    ) -> Result<Vec<String>, ServiceError> {
        let request = client
            .user_info(access_token.clone(), Some(subject))
            .map_err(|e| unreachable_provider(&self.config.id, e))?;
        let answer = request.request_async::<OtherClaims, _, CoreGenderClaim>(&self.http).await;
        let claims = answer.map_err(|e| {
            tracing::warn!(provider = %self.config.id, error = %e, "userinfo refused");
            match e {
                UserInfoError::Request(_) => unreachable_provider(&self.config.id, "userinfo"),
                UserInfoError::Response(status, _, _) if status.is_server_error() => {
                    unreachable_provider(&self.config.id, status)
                }
                UserInfoError::ClaimsVerification(ClaimsVerificationError::InvalidSubject(_)) => {
                    ServiceError::rejected(
                        "single sign-on refused: the provider's userinfo is for another subject",
                    )
                }
                _ => ServiceError::rejected(
                    "single sign-on refused: the provider's userinfo endpoint refused",
                ),
            }
        })?;
        let other = serde_json::Value::Object(claims.additional_claims().claims.clone());
        Ok(groups_in(&other, self.config.groups_claim()))
    }
}

/// The claims of a userinfo answer besides the standard ones.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OtherClaims {
    #[serde(flatten)]
    claims: serde_json::Map<String, serde_json::Value>,
}

impl AdditionalClaims for OtherClaims {}

/// The client type `from_provider_metadata` and a redirect URI make.
type CoreClientWithEndpoints = CoreClient<
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
>;

/// What a refused ID token's answer says.
fn refusal(e: &ClaimsVerificationError) -> &'static str {
    match e {
        ClaimsVerificationError::Expired(_) => "single sign-on refused: the ID token has expired",
        ClaimsVerificationError::InvalidAudience(_) => {
            "single sign-on refused: the ID token is for another client"
        }
        ClaimsVerificationError::InvalidIssuer(_) => {
            "single sign-on refused: the ID token is from another issuer"
        }
        ClaimsVerificationError::InvalidNonce(_) => {
            "single sign-on refused: the ID token's nonce is not this sign-in's"
        }
        ClaimsVerificationError::SignatureVerification(_) => {
            "single sign-on refused: the ID token's signature does not verify"
        }
        _ => "single sign-on refused: the ID token is not valid",
    }
}

/// The strings of claim `claim` in the payload of `compact`, an ID token already verified
/// (the typed claims do not carry extra claims; an absent or malformed claim is no groups).
fn groups_of(compact: &str, claim: &str) -> Vec<String> {
    use base64::Engine;
    let payload = compact.split('.').nth(1).unwrap_or_default();
    let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload) else {
        return Vec::new();
    };
    let Ok(claims) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Vec::new();
    };
    groups_in(&claims, claim)
}

/// The strings of claim `claim` of `claims`: a list (its non-strings skipped) or one string.
fn groups_in(claims: &serde_json::Value, claim: &str) -> Vec<String> {
    match &claims[claim] {
        serde_json::Value::Array(items) => {
            items.iter().filter_map(|g| g.as_str().map(str::to_owned)).collect()
        }
        serde_json::Value::String(one) => vec![one.clone()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn groups_are_read_from_the_payload() {
        use base64::Engine;
        let encode = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        let token = |payload: &str| format!("{}.{}.sig", encode("{}"), encode(payload));
        let groups = super::groups_of(&token(r#"{"groups":["a","b",3]}"#), "groups");
        assert_eq!(groups, ["a", "b"]);
        assert_eq!(super::groups_of(&token(r#"{"roles":"x"}"#), "roles"), ["x"]);
        assert!(super::groups_of(&token(r#"{"sub":"s"}"#), "groups").is_empty());
        assert!(super::groups_of("not a token", "groups").is_empty());
    }
}
