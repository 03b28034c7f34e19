//! JWT access tokens: issuing and verifying (RFC 7519; hardened per RFC 8725).
//!
//! - The algorithm is pinned per key: a token whose header names another algorithm is refused
//!   (`alg: none`, another HMAC size, asymmetric algorithms: RFC 8725 §3.1).
//! - `kid` selects the key from a fixed set; an unknown or missing `kid` is a 401 (§3.10).
//! - `exp iss aud sub nbf` are required; `iss` and `aud` must match; `exp`/`nbf` use an explicit
//!   leeway (§3.8, §3.9); `typ` must be `access` (§3.11).
//! - Keys form a set: the active key signs, every key verifies, so rotating the signing key
//!   logs nobody out. HS256 secrets are never published; EdDSA (Ed25519) public keys are, as a
//!   JWK Set (RFC 7517) at `/.well-known/jwks.json`.

use crate::error::ServiceError;
use aigw_domain::{AccessClaims, ACCESS_TOKEN_TYPE};
use chrono::{DateTime, Utc};
use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use sha2::{Digest, Sha256};

/// Shortest accepted HMAC secret, in bytes (RFC 7518 §3.2: at least the hash size).
pub const MIN_HMAC_SECRET_BYTES: usize = 32;

/// One verification (and possibly signing) key.
pub struct SigningKey {
    kid: String,
    algorithm: Algorithm,
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// The public JWK (EdDSA only).
    public_jwk: Option<Jwk>,
    /// Secret key material, from which the refresh-successor sealing key is derived.
    material: Vec<u8>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// An HS256 key from `secret`. Its `kid` is `hs256-` followed by the first 16 hex characters
    /// of SHA-256(secret), so the same secret always has the same `kid` on every node.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when the secret is empty. Callers enforce
    /// [`MIN_HMAC_SECRET_BYTES`] (refused in production, a warning in development).
    pub fn hs256(secret: &[u8]) -> Result<Self, ServiceError> {
        let digest = Sha256::digest(secret);
        let kid = base16ct::lower::encode_string(&digest[..8]);
        Self::hs256_with_kid(format!("hs256-{kid}"), secret)
    }

    /// An HS256 key from `secret` with an explicit `kid`.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when the secret is empty.
    pub fn hs256_with_kid(kid: String, secret: &[u8]) -> Result<Self, ServiceError> {
        if secret.is_empty() {
            return Err(ServiceError::Internal(format!("the HS256 secret of key {kid} is empty")));
        }
        Ok(Self {
            kid,
            algorithm: Algorithm::HS256,
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            public_jwk: None,
            material: secret.to_vec(),
        })
    }

    /// An EdDSA (Ed25519) key from a PKCS 8 PEM private key (`openssl genpkey -algorithm
    /// ed25519`). Its public half is published in the JWK Set.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when the PEM is not an Ed25519 private key.
    pub fn eddsa_pem(kid: String, private_pem: &[u8]) -> Result<Self, ServiceError> {
        use base64::Engine as _;
        use ed25519_dalek::pkcs8::DecodePrivateKey;
        use jsonwebtoken::jwk::{
            AlgorithmParameters, CommonParameters, EllipticCurve, KeyAlgorithm,
            OctetKeyPairParameters, OctetKeyPairType,
        };
        let bad = |e: String| {
            ServiceError::Internal(format!("key {kid}: not an Ed25519 PKCS 8 PEM private key: {e}"))
        };
        let pem = std::str::from_utf8(private_pem).map_err(|e| bad(e.to_string()))?;
        let signing =
            ed25519_dalek::SigningKey::from_pkcs8_pem(pem).map_err(|e| bad(e.to_string()))?;
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(signing.verifying_key().as_bytes());
        let encoding = EncodingKey::from_ed_pem(private_pem).map_err(|e| bad(e.to_string()))?;
        let decoding = DecodingKey::from_ed_components(&x).map_err(|e| bad(e.to_string()))?;
        let jwk = Jwk {
            common: CommonParameters {
                public_key_use: Some(PublicKeyUse::Signature),
                key_algorithm: Some(KeyAlgorithm::EdDSA),
                key_id: Some(kid.clone()),
                ..CommonParameters::default()
            },
            algorithm: AlgorithmParameters::OctetKeyPair(OctetKeyPairParameters {
                key_type: OctetKeyPairType::OctetKeyPair,
                curve: EllipticCurve::Ed25519,
                x,
            }),
        };
        let public_jwk = Some(jwk);
        Ok(Self {
            kid,
            algorithm: Algorithm::EdDSA,
            encoding,
            decoding,
            public_jwk,
            material: private_pem.to_vec(),
        })
    }

    /// The key id written in the `kid` header.
    pub fn kid(&self) -> &str {
        &self.kid
    }
}

/// A freshly issued access token. `Debug` never prints the token.
#[derive(Clone)]
pub struct IssuedAccessToken {
    /// The compact JWS.
    pub token: String,
    /// Expiry (the `exp` claim), UTC.
    pub expires_at: DateTime<Utc>,
    /// Lifetime in seconds.
    pub expires_in: u64,
}

impl std::fmt::Debug for IssuedAccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedAccessToken")
            .field("token", &"***")
            .field("expires_at", &self.expires_at)
            .field("expires_in", &self.expires_in)
            .finish()
    }
}

/// Issues and verifies access tokens with a set of keys; the first key signs, all verify.
#[derive(Debug)]
pub struct TokenIssuer {
    keys: Vec<SigningKey>,
    issuer: String,
    audience: String,
    ttl_secs: u64,
    leeway_secs: u64,
}

impl TokenIssuer {
    /// An issuer signing with `keys[0]` and verifying with any of `keys`.
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when `keys` is empty.
    pub fn new(
        keys: Vec<SigningKey>,
        issuer: String,
        audience: String,
        ttl_secs: u64,
        leeway_secs: u64,
    ) -> Result<Self, ServiceError> {
        if keys.is_empty() {
            return Err(ServiceError::Internal("no JWT signing key configured".to_owned()));
        }
        Ok(Self { keys, issuer, audience, ttl_secs, leeway_secs })
    }

    /// Access-token lifetime in seconds.
    pub fn ttl_secs(&self) -> u64 {
        self.ttl_secs
    }

    /// The `kid` of the signing key.
    pub fn active_kid(&self) -> &str {
        &self.keys[0].kid
    }

    /// The public keys as a JWK Set (RFC 7517 §5): EdDSA keys only; HMAC secrets are never
    /// published.
    pub fn jwks(&self) -> JwkSet {
        JwkSet { keys: self.keys.iter().filter_map(|k| k.public_jwk.clone()).collect() }
    }

    /// Secret material of every key, the signing key first (for [`crate::seal::Sealer`]).
    pub fn key_materials(&self) -> impl Iterator<Item = &[u8]> {
        self.keys.iter().map(|k| k.material.as_slice())
    }

    /// Signs an access token for `user_id` in session `session_id`, valid from `now` for the
    /// configured lifetime, but never past `session_ends_at` (the session's absolute end).
    ///
    /// # Errors
    /// [`ServiceError::Internal`] if signing fails.
    pub fn issue(
        &self,
        user_id: &str,
        session_id: &str,
        role: &str,
        now: DateTime<Utc>,
        session_ends_at: DateTime<Utc>,
    ) -> Result<IssuedAccessToken, ServiceError> {
        self.issue_with_amr(user_id, session_id, role, None, now, session_ends_at)
    }

    /// [`TokenIssuer::issue`] with an `amr` claim (RFC 8176 values, how the session was made;
    /// `None` writes no claim).
    ///
    /// # Errors
    /// [`ServiceError::Internal`] if signing fails.
    pub fn issue_with_amr(
        &self,
        user_id: &str,
        session_id: &str,
        role: &str,
        amr: Option<Vec<String>>,
        now: DateTime<Utc>,
        session_ends_at: DateTime<Utc>,
    ) -> Result<IssuedAccessToken, ServiceError> {
        let key = &self.keys[0];
        let iat = now.timestamp();
        let ttl = i64::try_from(self.ttl_secs).unwrap_or(i64::MAX / 2);
        let exp = iat.saturating_add(ttl).min(session_ends_at.timestamp()).max(iat);
        let claims = AccessClaims {
            iss: self.issuer.clone(),
            aud: self.audience.clone(),
            sub: user_id.to_owned(),
            sid: session_id.to_owned(),
            jti: uuid::Uuid::now_v7().to_string(),
            iat,
            nbf: iat,
            exp,
            typ: ACCESS_TOKEN_TYPE.to_owned(),
            role: role.to_owned(),
            amr,
        };
        let mut header = Header::new(key.algorithm);
        header.kid = Some(key.kid.clone());
        let token = jsonwebtoken::encode(&header, &claims, &key.encoding)
            .map_err(|e| ServiceError::Internal(format!("signing failed: {e}")))?;
        Ok(IssuedAccessToken {
            token,
            expires_at: DateTime::from_timestamp(exp, 0).unwrap_or(now),
            expires_in: u64::try_from(exp - iat).unwrap_or(0),
        })
    }

    /// Verifies an access token at `now` (the caller's [`crate::Clock`]) and returns its claims.
    ///
    /// One pass over the token: its header is decoded once (for `kid` and `alg`), the
    /// signature checked with the key that `kid` names (jsonwebtoken's `crypto::verify`), and
    /// the claims decoded once into [`AccessClaims`], whose fields are all required and typed
    /// (a claim of the wrong JSON type is an error, not an absence: GHSA-h395-gr6q-cpjc). Then
    /// `exp` and `nbf` are checked against `now` (whole seconds) with the configured leeway
    /// (`exp < now - leeway` is expired, `nbf > now + leeway` not yet valid, as
    /// jsonwebtoken's own validation does), `iss` and `aud` for equality and `typ` for
    /// `access` (RFC 8725 §3.8-3.11).
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] for every failure: bad shape, unknown `kid`, algorithm
    /// other than the key's, bad signature, expired, not yet valid, wrong `iss`/`aud`, missing
    /// required claim, or `typ` other than `access`.
    pub fn verify(&self, token: &str, now: DateTime<Utc>) -> Result<AccessClaims, ServiceError> {
        use base64::Engine as _;
        let invalid = || ServiceError::invalid_credential("the access token is invalid");
        let b64 = &base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (message, signature) = token.rsplit_once('.').ok_or_else(invalid)?;
        let (header, payload) = message.split_once('.').ok_or_else(invalid)?;
        let header = b64.decode(header).map_err(|_| invalid())?;
        let header: JoseHeader<'_> = serde_json::from_slice(&header).map_err(|_| invalid())?;
        let kid = header.kid.as_deref().ok_or_else(invalid)?;
        let key = self.keys.iter().find(|k| k.kid == kid).ok_or_else(invalid)?;
        if header.alg != key.algorithm {
            return Err(invalid());
        }
        let verified = jsonwebtoken::crypto::verify(
            signature,
            message.as_bytes(),
            &key.decoding,
            key.algorithm,
        )
        .map_err(|_| invalid())?;
        if !verified {
            return Err(invalid());
        }
        let claims: AccessClaims =
            serde_json::from_slice(&b64.decode(payload).map_err(|_| invalid())?)
                .map_err(|_| invalid())?;
        let now = now.timestamp();
        let leeway = i64::try_from(self.leeway_secs).unwrap_or(i64::MAX);
        if claims.exp < now.saturating_sub(leeway) {
            return Err(ServiceError::expired_credential("the access token has expired"));
        }
        if claims.nbf > now.saturating_add(leeway)
            || claims.iss != self.issuer
            || claims.aud != self.audience
            || claims.typ != ACCESS_TOKEN_TYPE
        {
            return Err(invalid());
        }
        Ok(claims)
    }
}

/// The JOSE header fields a verifier needs (RFC 7515 §4.1); others are ignored.
#[derive(serde::Deserialize)]
struct JoseHeader<'a> {
    alg: Algorithm,
    #[serde(borrow)]
    kid: Option<std::borrow::Cow<'a, str>>,
}
