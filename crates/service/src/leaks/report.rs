//! Reports of leaked secrets as they arrive, and their checks: GitHub's signed report (its
//! signature over the exact body, then its JSON), and an operator's pasted list.
//!
//! A GitHub report is a JSON array of `{"token", "type", "url", "source"}` objects, signed with
//! ECDSA P-256 over SHA-256 of the raw body: the key's id in `Github-Public-Key-Identifier`,
//! the DER signature, base64, in `Github-Public-Key-Signature`. The signature is checked
//! before the body is parsed and before any database work.

use super::keys::{GithubKeys, KeysError};
use aigw_domain::{FieldError, TokenDigest};
use base64::Engine;
use p256::ecdsa::signature::Verifier;
use std::fmt;

/// The request header naming the key that signed a GitHub report.
pub const KEY_ID_HEADER: &str = "Github-Public-Key-Identifier";
/// The request header carrying a GitHub report's signature (base64 of the DER encoding).
pub const SIGNATURE_HEADER: &str = "Github-Public-Key-Signature";

/// Most secrets in one report (GitHub's or a pasted list).
pub const MAX_REPORT_TOKENS: usize = 1000;
/// Longest secret considered, in bytes (an aigw key has 43; longer ones are still answered).
pub const MAX_TOKEN_BYTES: usize = 4096;
/// Longest `url` kept, in characters.
pub const MAX_URL_CHARS: usize = 2048;
/// Longest `type` and `source` kept, in characters.
pub const MAX_LABEL_CHARS: usize = 256;
/// Longest signature header read, in bytes (a P-256 DER signature is at most 72 bytes, 96 in
/// base64).
const MAX_SIGNATURE_CHARS: usize = 512;

/// One secret a report names, with where it was found. `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ReportedToken {
    /// The secret as found.
    pub token: String,
    /// The reporter's name for the kind of secret (GitHub's `type`), if given.
    pub token_type: Option<String>,
    /// Where it was found (GitHub's `url`), if given.
    pub url: Option<String>,
    /// What kind of place that is (GitHub's `source`: `content`, `commit`, `npm`, ...), if
    /// given.
    pub source: Option<String>,
}

impl fmt::Debug for ReportedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReportedToken")
            .field("token", &"***")
            .field("token_type", &self.token_type)
            .field("url", &self.url)
            .field("source", &self.source)
            .finish()
    }
}

/// A GitHub report whose signature verified: made only by [`verify_github_report`], taken by
/// the use case that revokes its keys.
#[derive(Debug, Clone)]
pub struct VerifiedReport {
    /// SHA-256 hex of the exact body (what makes a replay fail).
    pub(crate) body_digest: String,
    /// The secrets, in the body's order.
    pub(crate) tokens: Vec<ReportedToken>,
}

impl VerifiedReport {
    /// SHA-256 hex of the exact body that was signed.
    pub fn body_digest(&self) -> &str {
        &self.body_digest
    }

    /// The secrets, in the body's order.
    pub fn tokens(&self) -> &[ReportedToken] {
        &self.tokens
    }
}

/// Why a GitHub report is refused before any database work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// A signature header is missing or malformed, names an unknown key, or the signature does
    /// not verify over the body: 400 naming the header (`field`). Counts as a failed
    /// authentication of the client's address.
    #[error("{field}: {issue}")]
    Signature {
        /// [`KEY_ID_HEADER`] or [`SIGNATURE_HEADER`].
        field: &'static str,
        /// What is wrong.
        issue: String,
    },
    /// The body verified but is not a report: 400 naming the field (`body`, `[3].token`).
    #[error("invalid report: {0}")]
    Invalid(FieldError),
    /// No keys are held and none could be loaded: 503 (the reason is logged).
    #[error("{0}")]
    KeysUnavailable(String),
}

fn signature_error(field: &'static str, issue: impl Into<String>) -> ReportError {
    ReportError::Signature { field, issue: issue.into() }
}

/// Checks a GitHub report: the headers' key id and signature (as sent; `None` when absent)
/// against `keys` over the exact `body`, then the body's shape.
///
/// # Errors
/// [`ReportError::Signature`] naming the header at fault; [`ReportError::KeysUnavailable`];
/// [`ReportError::Invalid`] naming the field of a body that verified but is not a report.
pub async fn verify_github_report(
    keys: &GithubKeys,
    key_id: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
) -> Result<VerifiedReport, ReportError> {
    let key_id = key_id.map(str::trim).filter(|k| !k.is_empty());
    let key_id = key_id.ok_or_else(|| signature_error(KEY_ID_HEADER, "is required"))?;
    let signature = signature.map(str::trim).filter(|s| !s.is_empty());
    let signature = signature.ok_or_else(|| signature_error(SIGNATURE_HEADER, "is required"))?;
    if key_id.len() > MAX_LABEL_CHARS || !key_id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(signature_error(KEY_ID_HEADER, "is not a key identifier"));
    }
    let signature = decode_signature(signature)?;
    let key = keys.key(key_id).await.map_err(|e| match e {
        KeysError::UnknownKeyId => {
            signature_error(KEY_ID_HEADER, "names no key of GitHub's secret-scanning keys")
        }
        other => ReportError::KeysUnavailable(other.to_string()),
    })?;
    key.verify(body, &signature).map_err(|_| {
        signature_error(
            SIGNATURE_HEADER,
            "does not verify over the request body with the key named by \
             Github-Public-Key-Identifier",
        )
    })?;
    let tokens = parse_github_report(body).map_err(ReportError::Invalid)?;
    Ok(VerifiedReport { body_digest: digest_hex(body), tokens })
}

fn decode_signature(text: &str) -> Result<p256::ecdsa::Signature, ReportError> {
    let malformed =
        || signature_error(SIGNATURE_HEADER, "must be the base64 of a DER-encoded ECDSA signature");
    if text.len() > MAX_SIGNATURE_CHARS {
        return Err(malformed());
    }
    let der = base64::engine::general_purpose::STANDARD.decode(text).map_err(|_| malformed())?;
    p256::ecdsa::Signature::from_der(&der).map_err(|_| malformed())
}

/// SHA-256 of `bytes`, lower-case hex.
fn digest_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    base16ct::lower::encode_string(&sha2::Sha256::digest(bytes))
}

/// Parses GitHub's report body: a JSON array of 1 to [`MAX_REPORT_TOKENS`] objects, each with
/// a string `token` (1 to [`MAX_TOKEN_BYTES`] bytes) and optional strings `type`, `url`,
/// `source` (other members ignored). No string may contain U+0000.
///
/// # Errors
/// [`FieldError`] naming `body` or the element's field (`[0].token`).
pub fn parse_github_report(body: &[u8]) -> Result<Vec<ReportedToken>, FieldError> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|_| FieldError::new("body", "must be a JSON array of reported tokens"))?;
    let serde_json::Value::Array(items) = value else {
        return Err(FieldError::new("body", "must be a JSON array of reported tokens"));
    };
    check_count(items.len())?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let serde_json::Value::Object(object) = item else {
                return Err(FieldError::new(format!("[{i}]"), "must be an object"));
            };
            let text = |name: &str, max: usize| -> Result<Option<String>, FieldError> {
                let field = || format!("[{i}].{name}");
                match object.get(name) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(serde_json::Value::String(s)) => {
                        aigw_domain::validation::refuse_nul(&field(), s)?;
                        if s.chars().count() > max {
                            return Err(FieldError::new(
                                field(),
                                format!("must be at most {max} characters"),
                            ));
                        }
                        Ok(Some(s.clone()))
                    }
                    Some(_) => Err(FieldError::new(field(), "must be a string")),
                }
            };
            let token = match object.get("token") {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(_) => return Err(FieldError::new(format!("[{i}].token"), "must be a string")),
                None => return Err(FieldError::new(format!("[{i}].token"), "is required")),
            };
            check_token(&format!("[{i}].token"), &token)?;
            Ok(ReportedToken {
                token,
                token_type: text("type", MAX_LABEL_CHARS)?,
                url: text("url", MAX_URL_CHARS)?,
                source: text("source", MAX_LABEL_CHARS)?,
            })
        })
        .collect()
}

/// Checks a pasted list of secrets (the admin endpoint's `secrets`, the operator command's
/// lines): 1 to [`MAX_REPORT_TOKENS`] of them, each 1 to [`MAX_TOKEN_BYTES`] bytes without
/// U+0000, surrounding white space removed; `url` and `source`, given for all of them, are
/// checked as in a GitHub report.
///
/// # Errors
/// [`FieldError`] naming `secrets`, `secrets[i]`, `url` or `source`.
pub fn pasted_list(
    secrets: Vec<String>,
    url: Option<String>,
    source: Option<String>,
) -> Result<Vec<ReportedToken>, FieldError> {
    if secrets.is_empty() {
        return Err(FieldError::new("secrets", "must name at least one secret"));
    }
    check_count(secrets.len()).map_err(|e| FieldError::new("secrets", e.issue))?;
    for (name, value, max) in [("url", &url, MAX_URL_CHARS), ("source", &source, MAX_LABEL_CHARS)] {
        if let Some(value) = value {
            aigw_domain::validation::refuse_nul(name, value)?;
            if value.chars().count() > max {
                return Err(FieldError::new(name, format!("must be at most {max} characters")));
            }
        }
    }
    secrets
        .into_iter()
        .enumerate()
        .map(|(i, secret)| {
            let token = secret.trim().to_owned();
            check_token(&format!("secrets[{i}]"), &token)?;
            Ok(ReportedToken { token, token_type: None, url: url.clone(), source: source.clone() })
        })
        .collect()
}

fn check_count(count: usize) -> Result<(), FieldError> {
    if count == 0 {
        return Err(FieldError::new("body", "must name at least one token"));
    }
    if count > MAX_REPORT_TOKENS {
        return Err(FieldError::new(
            "body",
            format!("must name at most {MAX_REPORT_TOKENS} tokens per report"),
        ));
    }
    Ok(())
}

fn check_token(field: &str, token: &str) -> Result<(), FieldError> {
    if token.is_empty() {
        return Err(FieldError::new(field, "must not be empty"));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(FieldError::new(field, format!("must be at most {MAX_TOKEN_BYTES} bytes")));
    }
    aigw_domain::validation::refuse_nul(field, token)
}

/// SHA-256 hex of a reported secret: how answers and logs name it (GitHub's `token_hash`).
pub fn token_hash(token: &str) -> String {
    TokenDigest::of(token).into_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn field_of(body: &str) -> String {
        parse_github_report(body.as_bytes()).err().map(|e| e.field).unwrap_or_default()
    }

    #[test]
    fn reports_parse_and_bad_ones_name_the_field() {
        let ok = r#"[{"token":"aigw_x","type":"aigw_api_key","url":"https://github.com/o/r/blob/1/a","source":"content","extra":1}]"#;
        let tokens = parse_github_report(ok.as_bytes()).unwrap();
        assert_eq!(tokens[0].token, "aigw_x");
        assert_eq!(tokens[0].source.as_deref(), Some("content"));
        assert!(!format!("{tokens:?}").contains("aigw_x"));
        assert_eq!(field_of("{}"), "body");
        assert_eq!(field_of("not json"), "body");
        assert_eq!(field_of("[]"), "body");
        assert_eq!(field_of("[1]"), "[0]");
        assert_eq!(field_of(r#"[{"token":"a"},{"type":"x"}]"#), "[1].token");
        assert_eq!(field_of(r#"[{"token":5}]"#), "[0].token");
        assert_eq!(field_of(r#"[{"token":""}]"#), "[0].token");
        assert_eq!(field_of(r#"[{"token":"a","url":7}]"#), "[0].url");
        assert_eq!(field_of(r#"[{"token":"a","source":"\u0000"}]"#), "[0].source");
    }

    #[test]
    fn pasted_lists_are_trimmed_and_bounded() {
        let list = pasted_list(vec![" aigw_a \r".into()], Some("u".into()), None).unwrap();
        assert_eq!(list[0].token, "aigw_a");
        let field = |r: Result<Vec<ReportedToken>, FieldError>| r.err().map(|e| e.field);
        assert_eq!(field(pasted_list(vec![], None, None)), Some("secrets".into()));
        assert_eq!(
            field(pasted_list(vec!["a".into(), " ".into()], None, None)),
            Some("secrets[1]".into())
        );
        let many = vec!["a".to_owned(); MAX_REPORT_TOKENS + 1];
        assert_eq!(field(pasted_list(many, None, None)), Some("secrets".into()));
        assert_eq!(
            field(pasted_list(vec!["a".into()], Some("\0".into()), None)),
            Some("url".into())
        );
    }

    #[test]
    fn token_hashes_are_sha256_hex() {
        assert_eq!(
            token_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
