//! Single sign-on for single-page applications (docs/sso.md "Single-page applications"): a
//! sign-in started with a `redirect_uri` (one of `sso.app_redirect_uris`) and a PKCE
//! challenge of the application's own (RFC 7636, S256) ends at that URI with a one-time
//! `code` (or an `error`, RFC 6749 4.1.2.1), which the application exchanges once, within
//! [`CODE_TTL_SECS`], with its verifier, for the answer a login gets: a token set or an MFA
//! challenge.

use crate::accounts::sso::SsoAdmission;
use crate::db::Db;
use crate::error::ServiceError;
use crate::Clock;
use aigw_domain::digest::TokenDigest;
use aigw_domain::FieldError;
use aigw_persistence::sso::{self, SsoCodeRow};
use base64::Engine;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How long a one-time code may wait for its exchange, in seconds.
pub const CODE_TTL_SECS: i64 = 60;

/// The longest `state` an application may pass through, in bytes.
const MAX_APP_STATE: usize = 512;

/// Where a sign-in started by a single-page application ends, and the PKCE challenge its
/// code is bound to.
#[derive(Clone, Serialize, Deserialize)]
pub struct AppReturn {
    /// One of `sso.app_redirect_uris`, exactly.
    pub redirect_uri: String,
    /// BASE64URL(SHA-256(verifier)) of the application's verifier.
    code_challenge: String,
    /// The application's own `state`, given back unchanged.
    state: Option<String>,
}

// The challenge and state stay out of debug output.
impl std::fmt::Debug for AppReturn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppReturn")
            .field("redirect_uri", &self.redirect_uri)
            .finish_non_exhaustive()
    }
}

impl AppReturn {
    /// The return a start asks for, checked against the allowed `uris`.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] naming `redirect_uri` when it is not one of `uris`;
    /// `code_challenge` when missing or not 43 base64url characters; `code_challenge_method`
    /// when not `S256`; `state` when longer than 512 bytes.
    pub fn parse(
        uris: &[String],
        redirect_uri: &str,
        code_challenge: Option<&str>,
        method: Option<&str>,
        state: Option<&str>,
    ) -> Result<Self, ServiceError> {
        if !uris.iter().any(|u| u == redirect_uri) {
            return Err(
                FieldError::new("redirect_uri", "is not one of sso.app_redirect_uris").into()
            );
        }
        let challenge = code_challenge.unwrap_or_default();
        if challenge.len() != 43 || !is_base64url(challenge) {
            let why = "must be BASE64URL(SHA-256(code_verifier)): 43 characters";
            return Err(FieldError::new("code_challenge", why).into());
        }
        if method != Some("S256") {
            return Err(FieldError::new("code_challenge_method", "must be S256").into());
        }
        if state.is_some_and(|s| s.len() > MAX_APP_STATE) {
            return Err(FieldError::new("state", "is longer than 512 bytes").into());
        }
        Ok(Self {
            redirect_uri: redirect_uri.to_owned(),
            code_challenge: challenge.to_owned(),
            state: state.map(str::to_owned),
        })
    }

    /// The redirect URI with `pairs` and the application's `state` in its query.
    fn url_with(&self, pairs: &[(&str, &str)]) -> String {
        let Ok(mut url) = url::Url::parse(&self.redirect_uri) else {
            return self.redirect_uri.clone();
        };
        {
            let mut query = url.query_pairs_mut();
            for (name, value) in pairs {
                query.append_pair(name, value);
            }
            if let Some(state) = &self.state {
                query.append_pair("state", state);
            }
        }
        url.to_string()
    }

    /// Where a refused sign-in sends the browser: `error` (`access_denied`, or
    /// `temporarily_unavailable` when the provider or the database is down) with the reason.
    pub(crate) fn refused(&self, e: &ServiceError) -> String {
        let error = match e {
            ServiceError::Unavailable(_) => "temporarily_unavailable",
            _ => "access_denied",
        };
        self.url_with(&[("error", error), ("error_description", &e.to_string())])
    }
}

/// `verifier`'s S256 challenge (RFC 7636 4.2).
fn challenge_of(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Whether `text` is all of base64url's alphabet (RFC 4648 5, no padding).
fn is_base64url(text: &str) -> bool {
    text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Whether `verifier` is a PKCE verifier: 43 to 128 unreserved characters (RFC 7636 4.1).
fn is_verifier(verifier: &str) -> bool {
    let unreserved = |c: char| c.is_ascii_alphanumeric() || "-._~".contains(c);
    (43..=128).contains(&verifier.len()) && verifier.chars().all(unreserved)
}

/// Issues a one-time code for `admission`, bound to `app`'s challenge: where to send the
/// browser (the application's redirect URI with `code` and its `state`).
///
/// # Errors
/// [`ServiceError::Unavailable`] when the database is down.
pub(crate) async fn issue_code(
    db: &Db,
    clock: &Clock,
    app: &AppReturn,
    admission: &SsoAdmission,
) -> Result<String, ServiceError> {
    let mut secret = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let code = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    let row = SsoCodeRow {
        code_hash: TokenDigest::of(&code).into_string(),
        admission: serde_json::to_string(admission)
            .map_err(|e| ServiceError::Internal(format!("sso admission: {e}")))?,
        code_challenge: app.code_challenge.clone(),
        expires_at: clock.now() + chrono::Duration::seconds(CODE_TTL_SECS),
    };
    db.run(move |conn| Ok(sso::insert_code(conn, &row)?)).await?;
    Ok(app.url_with(&[("code", &code)]))
}

/// Takes a one-time `code`, checked against the PKCE `verifier`: the admission it was
/// issued for. A code is taken by its first exchange, right or wrong.
///
/// # Errors
/// [`ServiceError::Invalid`] naming `code` or `code_verifier` when malformed;
/// [`ServiceError::Unauthorized`] when the code is unknown, used or expired, or the verifier
/// does not match; [`ServiceError::Unavailable`] when the database is down.
pub(crate) async fn take_code(
    db: &Db,
    clock: &Clock,
    code: &str,
    verifier: &str,
) -> Result<SsoAdmission, ServiceError> {
    if code.is_empty() || code.len() > 128 || !is_base64url(code) {
        let why = "must be 1 to 128 characters of A-Z, a-z, 0-9, - and _";
        return Err(FieldError::new("code", why).into());
    }
    if !is_verifier(verifier) {
        let why = "must be 43 to 128 characters of A-Z, a-z, 0-9, -, ., _ and ~";
        return Err(FieldError::new("code_verifier", why).into());
    }
    let digest = TokenDigest::of(code).into_string();
    let taken = db.run(move |conn| Ok(sso::take_code(conn, &digest)?)).await?;
    let Some(row) = taken else {
        return Err(ServiceError::rejected(
            "single sign-on refused: the code is unknown or was exchanged already",
        ));
    };
    if row.expires_at <= clock.now() {
        return Err(ServiceError::rejected("single sign-on refused: the code has expired"));
    }
    // Compared as digests: equal lengths, and their timing says nothing of the challenge.
    if TokenDigest::of(&challenge_of(verifier)) != TokenDigest::of(&row.code_challenge) {
        return Err(ServiceError::rejected(
            "single sign-on refused: the code_verifier does not match the code_challenge",
        ));
    }
    serde_json::from_str::<SsoAdmission>(&row.admission)
        .map_err(|e| ServiceError::Internal(format!("stored sso admission: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_is_rfc_7636s() {
        // RFC 7636 appendix B.
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert_eq!(challenge_of(verifier), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
        assert!(is_verifier(verifier));
        assert!(!is_verifier("short") && !is_verifier(&"a".repeat(129)));
        assert!(!is_verifier(&format!("{}!", "a".repeat(43))));
    }

    #[test]
    fn a_start_names_the_field_it_refuses() {
        let uris = vec!["https://app.test/cb".to_owned()];
        let challenge = challenge_of("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk");
        let field = |r: Result<AppReturn, ServiceError>| match r {
            Err(ServiceError::Invalid(f)) => f.field,
            _ => "none".to_owned(),
        };
        let parse = |uri: &str, c: Option<&str>, m: Option<&str>, s: Option<&str>| {
            AppReturn::parse(&uris, uri, c, m, s)
        };
        let ok = Some(challenge.as_str());
        assert_eq!(field(parse("https://app.test/cb/", ok, Some("S256"), None)), "redirect_uri");
        assert_eq!(field(parse("https://app.test/cb", None, Some("S256"), None)), "code_challenge");
        assert_eq!(field(parse("https://app.test/cb", ok, None, None)), "code_challenge_method");
        let long = "s".repeat(513);
        assert_eq!(field(parse("https://app.test/cb", ok, Some("S256"), Some(&long))), "state");
        let app = parse("https://app.test/cb", ok, Some("S256"), Some("a b")).ok();
        let url = app.map(|a| a.url_with(&[("code", "c1")]));
        assert_eq!(url.as_deref(), Some("https://app.test/cb?code=c1&state=a+b"));
    }
}
