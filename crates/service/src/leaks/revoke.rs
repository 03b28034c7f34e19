//! The use case: the secrets of a report (GitHub's, an admin's or an operator's list) are
//! told apart into aigw keys and the rest, and every valid aigw key among them is revoked, all
//! in one transaction with the report's record and its audit events, through the revocation
//! path every use case shares (`crate::api_keys::manage::revoke_in_transaction`). The answer comes
//! once every live node refuses the revoked keys (the change feed, bounded as any revocation).
//!
//! What each secret is found to be ([`Finding`]) and how it is labelled for GitHub
//! ([`Label`]):
//!
//! | secret | finding | label | change |
//! |---|---|---|---|
//! | an aigw key, not revoked (expired ones included: a `PATCH` of `expires_at` would revive it) | `revoked` | `true_positive` | revoked now |
//! | the secret a rotation replaced, still in its grace period | `revoked` | `true_positive` | the key is revoked, its new secret too |
//! | an aigw key already revoked | `already_revoked` | `false_positive` | none |
//! | the secret a rotation replaced, past its grace period | `rotated_away` | `false_positive` | none |
//! | aigw-shaped with a valid checksum, but no key has it | `unknown_key` | `false_positive` | none |
//! | not aigw-shaped, or a bad checksum | `not_an_api_key` | `false_positive` | none, and no database read |

use super::report::{token_hash, ReportedToken, VerifiedReport};
use crate::admin::caller::Admin;
use crate::api_keys::manage::revoke_in_transaction;
use crate::audit::Event;
use crate::credential_cache;
use crate::error::ServiceError;
use crate::leaks::LeakReports;
use crate::metrics::name as metric;
use aigw_domain::{ApiKeySecret, AuditAction, CredentialChangeKind};
use aigw_persistence::changes::ChangeRow;
use aigw_persistence::leak_reports::{self, LeakReportRow};
use aigw_persistence::models::ApiKeyRow;
use aigw_persistence::{api_keys, transaction, users, DbConnection, PersistenceError};
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// GitHub's verdict on a reported secret (its `label`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// `true_positive`: a working aigw key (now revoked).
    TruePositive,
    /// `false_positive`: not a working aigw key.
    FalsePositive,
}

impl Label {
    /// `true_positive` or `false_positive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Label::TruePositive => "true_positive",
            Label::FalsePositive => "false_positive",
        }
    }
}

/// What a reported secret was found to be (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    /// A valid aigw key: revoked by this report.
    Revoked,
    /// An aigw key revoked before this report.
    AlreadyRevoked,
    /// The secret a rotation replaced, whose grace period is over.
    RotatedAway,
    /// Shaped like an aigw key, checksum valid, but no key has it.
    UnknownKey,
    /// Not an aigw key (wrong shape or checksum); not looked up.
    NotAnApiKey,
}

impl Finding {
    /// `revoked`, `already_revoked`, `rotated_away`, `unknown_key` or `not_an_api_key`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finding::Revoked => "revoked",
            Finding::AlreadyRevoked => "already_revoked",
            Finding::RotatedAway => "rotated_away",
            Finding::UnknownKey => "unknown_key",
            Finding::NotAnApiKey => "not_an_api_key",
        }
    }

    /// The label GitHub is answered: `true_positive` only for a key this report revoked.
    pub fn label(self) -> Label {
        match self {
            Finding::Revoked => Label::TruePositive,
            _ => Label::FalsePositive,
        }
    }
}

/// The answer about one reported secret, in the report's order. Never the secret itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenVerdict {
    /// SHA-256 hex of the secret as reported (GitHub's `token_hash`).
    pub token_hash: String,
    /// The reporter's `type`, echoed.
    pub token_type: Option<String>,
    /// What the secret was found to be.
    pub finding: Finding,
    /// The key's id, when the secret is (or was) one of aigw's keys.
    pub key_id: Option<String>,
    /// The secret's first 12 characters when it is aigw-shaped with a valid checksum.
    pub key_prefix: Option<String>,
}

impl TokenVerdict {
    /// GitHub's label for it.
    pub fn label(&self) -> Label {
        self.finding.label()
    }
}

/// A key revoked because its secret leaked: what the owner's notice needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakedKey {
    /// The owner's user id (for a team key, the member who created it).
    pub owner_user_id: String,
    /// The owner's e-mail address (normalised); `None` if the account is gone.
    pub owner_email: Option<String>,
    /// The key's id.
    pub key_id: String,
    /// The key's name.
    pub key_name: String,
    /// The leaked secret's first 12 characters.
    pub key_prefix: String,
    /// The team the key belongs to or is scoped to.
    pub team_id: Option<String>,
    /// Where the secret was found, as reported.
    pub url: Option<String>,
    /// What kind of place that is, as reported (GitHub's `source`).
    pub source: Option<String>,
    /// When it was revoked, UTC.
    pub revoked_at: DateTime<Utc>,
}

/// The outcome of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakOutcome {
    /// The report's id (UUIDv7), named in its audit events.
    pub report_id: String,
    /// One verdict per reported secret, in the report's order.
    pub verdicts: Vec<TokenVerdict>,
    /// The keys this report revoked, one each (a secret reported twice counts once).
    pub leaked: Vec<LeakedKey>,
}

/// Why a report was refused by the use case.
#[derive(Debug, thiserror::Error)]
pub enum LeakError {
    /// The same signed body was accepted before (a replay): 409, nothing changed.
    #[error("this report was received before")]
    Replayed {
        /// SHA-256 hex of the body.
        body_digest: String,
    },
    /// Any other failure (the database): nothing changed.
    #[error(transparent)]
    Service(#[from] ServiceError),
}

impl From<PersistenceError> for LeakError {
    fn from(e: PersistenceError) -> Self {
        LeakError::Service(e.into())
    }
}

/// Who reported, for the record, the audit trail and `by_admin`.
struct Reporter<'a> {
    /// `github`, `admin` or `operator` (stored in `leak_reports.reporter`).
    kind: &'static str,
    /// The audit `actor`.
    actor: &'a str,
}

/// What one unique aigw-shaped secret of a report turned out to be, in the transaction.
struct Looked {
    finding: Finding,
    /// The key's id, when a key has the secret.
    key_id: Option<String>,
    /// The key's owner (user id), when a key has the secret.
    owner: Option<String>,
}

impl LeakReports {
    /// Revokes the keys of a GitHub report whose signature verified (see
    /// [`super::report::verify_github_report`]); each revoked key's owner is e-mailed.
    ///
    /// # Errors
    /// [`LeakError::Replayed`] when this exact body was accepted before;
    /// [`LeakError::Service`] ([`ServiceError::Unavailable`]) when the database is down.
    pub async fn revoke_reported_by_github(
        &self,
        report: VerifiedReport,
    ) -> Result<LeakOutcome, LeakError> {
        let reporter = Reporter { kind: "github", actor: "github" };
        self.revoke_reported(&reporter, Some(report.body_digest), report.tokens).await
    }

    /// An admin's pasted list (`POST /admin/leaked-keys`): as GitHub's report, without a
    /// signature (and without replay refusal: the same list again finds its keys revoked).
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn admin_revoke_leaked_keys(
        &self,
        admin: &Admin,
        tokens: Vec<ReportedToken>,
    ) -> Result<LeakOutcome, ServiceError> {
        let reporter = Reporter { kind: "admin", actor: admin.actor() };
        self.revoke_pasted(&reporter, tokens).await
    }

    /// The operator's pasted list (`aigw admin revoke-leaked`), as
    /// [`LeakReports::admin_revoke_leaked_keys`].
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn operator_revoke_leaked_keys(
        &self,
        tokens: Vec<ReportedToken>,
    ) -> Result<LeakOutcome, ServiceError> {
        let reporter = Reporter { kind: "operator", actor: "operator" };
        self.revoke_pasted(&reporter, tokens).await
    }

    /// Queues the notice of each revoked key to its owner (a key whose owner's account is
    /// gone has nobody to tell).
    fn tell_owners(&self, leaked: &[LeakedKey]) {
        for key in leaked {
            let Some(email) = &key.owner_email else { continue };
            let values = serde_json::json!({
                "name": email.split('@').next().unwrap_or_default(),
                "key_name": key.key_name,
                "key_prefix": key.key_prefix,
                "url": key.url,
                "source": key.source,
                "at": aigw_domain::time::format_timestamp(key.revoked_at),
            });
            self.email.send_mail(crate::email::MailKind::KeyLeaked, email, values);
        }
    }

    async fn revoke_pasted(
        &self,
        reporter: &Reporter<'_>,
        tokens: Vec<ReportedToken>,
    ) -> Result<LeakOutcome, ServiceError> {
        self.revoke_reported(reporter, None, tokens).await.map_err(|e| match e {
            LeakError::Service(e) => e,
            // No digest is stored for a pasted list, so none can collide.
            LeakError::Replayed { .. } => {
                ServiceError::Internal("a pasted list was refused as a replay".to_owned())
            }
        })
    }

    /// Counts and logs each key of report `report_id` (from `reporter`) revoked as leaked.
    fn announce(&self, leaked: &[LeakedKey], report_id: &str, reporter: &str) {
        for key in leaked {
            self.metrics.count(metric::API_KEYS_REVOKED_TOTAL, &[("how", "leak")]);
            tracing::warn!(
                event = "api_key_leaked",
                key_id = %key.key_id,
                user_id = %key.owner_user_id,
                report_id = %report_id,
                reporter = reporter,
                "API key revoked: its secret was reported leaked"
            );
        }
    }

    /// The one path of every report: see the module documentation.
    async fn revoke_reported(
        &self,
        reporter: &Reporter<'_>,
        body_digest: Option<String>,
        tokens: Vec<ReportedToken>,
    ) -> Result<LeakOutcome, LeakError> {
        let now = self.clock.now();
        let report_id = uuid::Uuid::now_v7().to_string();
        // Parsed here, with no I/O: what is not an aigw key is never looked up.
        let secrets: Vec<Option<ApiKeySecret>> =
            tokens.iter().map(|t| ApiKeySecret::parse(&t.token).ok()).collect();
        let record = LeakReportRow {
            id: report_id.clone(),
            reporter: reporter.kind.to_owned(),
            body_digest: body_digest.clone(),
            received_at: now.naive_utc(),
            tokens: i64::try_from(tokens.len()).unwrap_or(i64::MAX),
        };
        // Built on the request's task, which holds the audit context.
        let revoked_event = Event::new(AuditAction::ApiKeyRevoked, None, Some(reporter.actor), now);
        let reported_event =
            Event::new(AuditAction::ApiKeyLeakReported, None, Some(reporter.actor), now);
        let by_admin = reporter.kind != "github";
        let kind = reporter.kind;
        let work_tokens = tokens.clone();
        let work_secrets = secrets.clone();
        let committed = self
            .db
            .run(move |conn| {
                let done = transaction(conn, |conn| {
                    leak_reports::insert(conn, &record).map_err(|e| match e {
                        PersistenceError::Conflict => LeakError::Replayed {
                            body_digest: record.body_digest.clone().unwrap_or_default(),
                        },
                        other => other.into(),
                    })?;
                    let templates = Templates {
                        revoked: &revoked_event,
                        reported: &reported_event,
                        by_admin,
                        report_id: &record.id,
                        reporter: kind,
                    };
                    revoke_all(conn, &templates, &work_tokens, &work_secrets, now)
                });
                match done {
                    Ok(done) => Ok(Ok(done)),
                    Err(LeakError::Service(e)) => Err(e),
                    Err(replayed) => Ok(Err(replayed)),
                }
            })
            .await??;
        let (looked, leaked, changes) = committed;
        if !changes.is_empty() {
            self.cache.publish(changes).await;
        }
        self.announce(&leaked, &report_id, reporter.kind);
        self.tell_owners(&leaked);
        let verdicts = verdicts(&tokens, &secrets, &looked);
        Ok(LeakOutcome { report_id, verdicts, leaked })
    }
}

/// What each reported token turned out to be, in the report's order: not an aigw key, an
/// unknown key, or what `looked` (the transaction's lookups by digest) found.
fn verdicts(
    tokens: &[ReportedToken],
    secrets: &[Option<ApiKeySecret>],
    looked: &HashMap<String, Looked>,
) -> Vec<TokenVerdict> {
    tokens
        .iter()
        .zip(secrets)
        .map(|(token, secret)| {
            let (finding, key_id) = match secret {
                None => (Finding::NotAnApiKey, None),
                Some(secret) => match looked.get(secret.digest().as_str()) {
                    Some(l) => (l.finding, l.key_id.clone()),
                    None => (Finding::UnknownKey, None),
                },
            };
            TokenVerdict {
                token_hash: token_hash(&token.token),
                token_type: token.token_type.clone(),
                finding,
                key_id,
                key_prefix: secret.as_ref().map(|s| s.key_prefix().to_owned()),
            }
        })
        .collect()
}

/// The audit events a report's transaction writes, as templates.
struct Templates<'a> {
    revoked: &'a Event,
    reported: &'a Event,
    by_admin: bool,
    report_id: &'a str,
    reporter: &'static str,
}

type Revoked = (HashMap<String, Looked>, Vec<LeakedKey>, Vec<ChangeRow>);

/// Inside the report's transaction: looks up each unique aigw-shaped secret, revokes the valid
/// keys, writes the events, and appends the feed rows last.
fn revoke_all(
    conn: &mut DbConnection,
    templates: &Templates<'_>,
    tokens: &[ReportedToken],
    secrets: &[Option<ApiKeySecret>],
    now: DateTime<Utc>,
) -> Result<Revoked, LeakError> {
    let mut looked: HashMap<String, Looked> = HashMap::new();
    let mut leaked = Vec::new();
    let mut revoked_ids = Vec::new();
    for (token, secret) in tokens.iter().zip(secrets) {
        let Some(secret) = secret else { continue };
        let digest = secret.digest().into_string();
        if !looked.contains_key(&digest) {
            let found = api_keys::find_by_hash(conn, &digest)?;
            let mut finding = match &found {
                None => Finding::UnknownKey,
                Some(row) if row.revoked_at.is_some() => Finding::AlreadyRevoked,
                Some(row) if row.key_hash != digest && !in_grace(row, now) => Finding::RotatedAway,
                Some(_) => Finding::Revoked,
            };
            if let (Finding::Revoked, Some(row)) = (finding, &found) {
                let event = templates.revoked.clone().action(AuditAction::ApiKeyRevoked);
                let by_admin = templates.by_admin;
                let reason = Some("leaked");
                let revoked =
                    revoke_in_transaction(conn, &row.id, None, &event, by_admin, reason, now)?;
                match revoked {
                    // Revoked meanwhile by another transaction (PostgreSQL: it waited for that
                    // one's row lock): not this report's revocation, and no second notice.
                    Some(row) if row.revoked_at != Some(now) => {
                        finding = Finding::AlreadyRevoked;
                    }
                    Some(row) => {
                        let owner = users::find_by_id(conn, &row.user_id)?;
                        leaked.push(LeakedKey {
                            owner_user_id: row.user_id.to_string(),
                            owner_email: owner.map(|u| u.email),
                            key_id: row.id.to_string(),
                            key_name: row.name.clone(),
                            key_prefix: secret.key_prefix().to_owned(),
                            team_id: row.team_id.clone().map(String::from),
                            url: token.url.clone(),
                            source: token.source.clone(),
                            revoked_at: row.revoked_at.unwrap_or(now),
                        });
                        revoked_ids.push(row.id);
                    }
                    // Deleted meanwhile.
                    None => finding = Finding::UnknownKey,
                }
            }
            let key_id = found.as_ref().map(|r| r.id.to_string());
            let owner = found.map(|r| r.user_id.into_string());
            looked.insert(digest.clone(), Looked { finding, key_id, owner });
        }
        let Some(Looked { finding, key_id: Some(key_id), owner }) = looked.get(&digest) else {
            continue;
        };
        // Every report of one of aigw's keys, with where it was found (never the secret).
        let details = serde_json::json!({
            "report_id": templates.report_id,
            "reporter": templates.reporter,
            "url": token.url,
            "source": token.source,
            "type": token.token_type,
            "key_prefix": secret.key_prefix(),
            "finding": finding.as_str(),
            "label": finding.label().as_str(),
        });
        let mut event = templates.reported.clone().action(AuditAction::ApiKeyLeakReported);
        if let Some(owner) = owner {
            event = event.user(owner);
        }
        event.target(key_id).details(details).insert(conn)?;
    }
    // Last statements of the transaction (see `aigw_persistence::changes`).
    let mut changes = Vec::with_capacity(revoked_ids.len());
    for key_id in &revoked_ids {
        let kind = CredentialChangeKind::ApiKeyRevoked;
        changes.push(credential_cache::append(conn, kind, key_id, now)?);
    }
    Ok((looked, leaked, changes))
}

/// Whether `row`'s replaced secret still works (its rotation's grace period runs).
fn in_grace(row: &ApiKeyRow, now: DateTime<Utc>) -> bool {
    row.previous_key_expires_at.is_some_and(|end| end > now)
}
