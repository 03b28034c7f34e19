//! Bodies of the leaked-key endpoints with their OpenAPI schemas: GitHub's secret-scanning
//! report and answer (`POST /api/v1/secret-scanning/github`, in GitHub's own format, without
//! the success envelope), and an admin's pasted list (`POST /api/v1/admin/leaked-keys`).

use aigw_service::leaks::{LeakOutcome, TokenVerdict};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One secret of a GitHub secret-scanning report (the body is a JSON array of these). Read by
/// the service after the signature verified, not through this type: it describes the shape.
#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)] // Only its schema is used (see above).
pub(crate) struct GithubReportedToken {
    /// The secret found, as GitHub matched it.
    #[schema(example = "aigw_4fJ9kQ2mXz7pL0aB3cD5eF6gH8iJ1kLm0ab3Cd", max_length = 4096)]
    pub(crate) token: String,
    /// The secret type registered with GitHub.
    #[serde(rename = "type")]
    #[schema(example = "aigw_api_key", max_length = 256)]
    pub(crate) token_type: Option<String>,
    /// Where it was found.
    #[schema(example = "https://github.com/octo/app/blob/0123abc/config.yml", max_length = 2048)]
    pub(crate) url: Option<String>,
    /// What kind of place that is (`content`, `commit`, `pull_request_comment`, `npm`, ...).
    #[schema(example = "content", max_length = 256)]
    pub(crate) source: Option<String>,
}

/// `true_positive` (a working aigw key, revoked by this report) or `false_positive`.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = LeakLabel)]
pub(crate) enum LeakLabel {
    /// A working aigw key; revoked now.
    TruePositive,
    /// Not a working aigw key: not aigw's format or checksum, unknown, already revoked, or a
    /// secret replaced by a rotation whose grace period is over.
    FalsePositive,
}

impl From<aigw_service::leaks::Label> for LeakLabel {
    fn from(label: aigw_service::leaks::Label) -> Self {
        match label {
            aigw_service::leaks::Label::TruePositive => LeakLabel::TruePositive,
            aigw_service::leaks::Label::FalsePositive => LeakLabel::FalsePositive,
        }
    }
}

/// GitHub's answer format: one per reported secret, in the report's order. The secret itself
/// is never sent back, only its SHA-256.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GithubTokenVerdict {
    /// SHA-256 of the reported `token`, lower-case hex.
    #[schema(example = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")]
    pub(crate) token_hash: String,
    /// The report's `type`, echoed (empty when it had none).
    pub(crate) token_type: String,
    /// The verdict.
    pub(crate) label: LeakLabel,
}

impl From<&TokenVerdict> for GithubTokenVerdict {
    fn from(v: &TokenVerdict) -> Self {
        Self {
            token_hash: v.token_hash.clone(),
            token_type: v.token_type.clone().unwrap_or_default(),
            label: v.label().into(),
        }
    }
}

/// `POST /admin/leaked-keys` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeakedKeysRequest {
    /// The secrets found, 1 to 1000, each 1 to 4096 bytes (white space around each is
    /// removed).
    #[schema(example = json!(["aigw_4fJ9kQ2mXz7pL0aB3cD5eF6gH8iJ1kLm0ab3Cd"]))]
    pub(crate) secrets: Vec<String>,
    /// Where they were found (kept in the audit trail and the owners' notices), at most 2048
    /// characters.
    #[schema(example = "https://pastebin.example/abc", max_length = 2048)]
    pub(crate) url: Option<String>,
    /// What kind of place that is, at most 256 characters.
    #[schema(example = "paste", max_length = 256)]
    pub(crate) source: Option<String>,
}

/// What one secret of an admin's list was found to be.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeakVerdictDto {
    /// SHA-256 of the secret as given (trimmed), lower-case hex.
    pub(crate) token_hash: String,
    /// The verdict.
    pub(crate) label: LeakLabel,
    /// `revoked` (by this request), `already_revoked`, `rotated_away` (a secret a rotation
    /// replaced, past its grace period), `unknown_key` (aigw's format and checksum, but no
    /// key has it) or `not_an_api_key` (not aigw's format or checksum; not looked up).
    #[schema(example = "revoked")]
    pub(crate) finding: String,
    /// The key's id, when the secret is (or was) one of aigw's keys.
    pub(crate) key_id: Option<String>,
    /// The secret's first 12 characters, when it has aigw's format and checksum.
    #[schema(example = "aigw_4fJ9kQ2")]
    pub(crate) key_prefix: Option<String>,
}

impl From<&TokenVerdict> for LeakVerdictDto {
    fn from(v: &TokenVerdict) -> Self {
        Self {
            token_hash: v.token_hash.clone(),
            label: v.label().into(),
            finding: v.finding.as_str().to_owned(),
            key_id: v.key_id.clone(),
            key_prefix: v.key_prefix.clone(),
        }
    }
}

/// `POST /admin/leaked-keys` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeakReportData {
    /// The report's id (UUIDv7), named in its audit events (`api_key_leak_reported`).
    pub(crate) report_id: String,
    /// How many keys this request revoked.
    pub(crate) revoked: usize,
    /// One per secret, in the request's order.
    pub(crate) results: Vec<LeakVerdictDto>,
}

impl From<&LeakOutcome> for LeakReportData {
    fn from(outcome: &LeakOutcome) -> Self {
        Self {
            report_id: outcome.report_id.clone(),
            revoked: outcome.leaked.len(),
            results: outcome.verdicts.iter().map(LeakVerdictDto::from).collect(),
        }
    }
}
