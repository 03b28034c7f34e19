//! Claims of a JWT access token (RFC 7519 §4.1; RFC 8725 for the hardening rules).

use serde::{Deserialize, Serialize};

/// The value of the `typ` claim in every access token. Any other value is refused, so no
/// other kind of JWT can stand in for an access token (RFC 8725 §3.11).
pub const ACCESS_TOKEN_TYPE: &str = "access";

/// The claims of an access token. All times are Unix seconds (UTC).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessClaims {
    /// Issuer (`auth.issuer`, default `"aigw"`).
    pub iss: String,
    /// Audience (`auth.audience`, default `"aigw"`).
    pub aud: String,
    /// Subject: the user's id (UUIDv7 string).
    pub sub: String,
    /// Session id: the login session this token belongs to (revoked with it).
    pub sid: String,
    /// Unique id of this token (UUIDv7 string).
    pub jti: String,
    /// Issued at, Unix seconds.
    pub iat: i64,
    /// Not before, Unix seconds (equal to `iat`).
    pub nbf: i64,
    /// Expiry, Unix seconds (`iat` + `auth.access_token_ttl_secs`, default 3600).
    pub exp: i64,
    /// Token type, always [`ACCESS_TOKEN_TYPE`].
    pub typ: String,
    /// The user's role at issue time (e.g. `"user"`).
    pub role: String,
    /// How the session was made (RFC 8176 §2): `["pwd"]`, or `["pwd", "otp"]` after a second
    /// factor ([`crate::mfa::SessionAmr`]). Absent from tokens issued before it existed, which
    /// read as `["pwd"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amr: Option<Vec<String>>,
}
