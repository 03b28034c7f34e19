//! Single sign-on's API shapes (docs/sso.md "Single-page applications"): the providers a
//! single-page application may offer, and the exchange of a sign-in's one-time code.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /auth/sso/exchange` body: the one-time code a sign-in ended with, and the PKCE
/// verifier of the `code_challenge` it started with (RFC 7636).
#[derive(Deserialize, ToSchema)]
pub(crate) struct SsoExchangeRequest {
    /// The `code` the sign-in's redirect carried: 1 to 128 characters of `A-Z a-z 0-9 - _`.
    #[schema(min_length = 1, max_length = 128)]
    pub(crate) code: String,
    /// The verifier: 43 to 128 characters of `A-Z a-z 0-9 - . _ ~`.
    #[schema(min_length = 43, max_length = 128)]
    pub(crate) code_verifier: String,
}

impl std::fmt::Debug for SsoExchangeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SsoExchangeRequest")
            .field("code", &"***")
            .field("code_verifier", &"***")
            .finish()
    }
}

/// A provider people may sign in with.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SsoProviderDto {
    /// Its id.
    pub(crate) id: String,
    /// Its display name (`Sign in with <name>`).
    pub(crate) name: String,
    /// Where a sign-in starts (a path of this server): `/sso/<id>/start`.
    pub(crate) start_path: String,
}

/// `GET /auth/sso/providers` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SsoProviderListData {
    /// The providers, in id order (none when single sign-on is not configured).
    pub(crate) providers: Vec<SsoProviderDto>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_exchange_keeps_its_secrets_out_of_debug_output() {
        let body = super::SsoExchangeRequest {
            code: "TOPSECRET".into(),
            code_verifier: "VERIFIERSECRET".into(),
        };
        let shown = format!("{body:?}");
        assert!(!shown.contains("TOPSECRET") && !shown.contains("VERIFIERSECRET"), "{shown}");
    }
}
