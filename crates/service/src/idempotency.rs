//! `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header) for state-creating requests,
//! one reusable layer: the HTTP edge calls [`Idempotency::begin`], the use case records its
//! answer with [`Claim::record`] *inside its own transaction*, and the edge calls
//! [`Idempotency::release`] when the use case failed.
//!
//! - Keys are scoped per caller (`user:<id>`) and stored in the database, so they hold across
//!   nodes. A request is identified by the SHA-256 of its method, path and body (the
//!   *fingerprint*).
//! - The first request takes a lease (`locked_until`) on the key. The same key and
//!   fingerprint within `ttl` (24 h) answers the recorded status and body again; while the
//!   first is still running, [`ServiceError::IdempotencyInFlight`] (409); with another
//!   fingerprint, [`ServiceError::IdempotencyKeyReused`] (422).
//! - The answer is recorded in the same transaction as the change it reports, so either both
//!   are committed or neither: a client told 503 after a commit (a database crash mid-commit,
//!   a request past its deadline) gets the first answer on retry, never a second resource.
//!   A claim whose lease passed without an answer (the node died) is taken over by a retry.
//! - Answers are sealed (XChaCha20-Poly1305 under a key derived from the signing keys, bound to
//!   the scope and key), so a created API key's secret is never stored in clear; rows are
//!   erased once expired (swept at most once a minute per node, and on reuse).

use crate::db::Db;
use crate::error::ServiceError;
use crate::seal::Sealer;
use aigw_domain::time;
use aigw_persistence::idempotency::{self as repo, IdempotencyRow};
use aigw_persistence::{transaction, DbConnection, PersistenceError};
use chrono::{DateTime, Duration, Utc};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// How long an answer is kept and replayed, in seconds (24 h, as the draft suggests).
pub const TTL_SECS: i64 = 24 * 3600;

/// Longest `Idempotency-Key`, in characters.
pub const MAX_KEY_CHARS: usize = 255;

/// The idempotency store. Cheap to clone.
#[derive(Clone)]
pub struct Idempotency {
    db: Db,
    sealer: Sealer,
    lease: Duration,
    last_sweep: Arc<AtomicI64>,
}

impl std::fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotency").field("lease", &self.lease).finish_non_exhaustive()
    }
}

/// What one request asks: whose key, which key, and which request it stands for.
#[derive(Debug, Clone)]
pub struct IdempotentRequest {
    scope: String,
    key: String,
    fingerprint: String,
}

impl IdempotentRequest {
    /// The request of user `user_id` with key `key` (already validated) for `method` `path`
    /// with `body`.
    pub fn new(user_id: &str, key: &str, method: &str, path: &str, body: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        for part in [method.as_bytes(), path.as_bytes(), body] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        let fingerprint = base16ct::lower::encode_string(&hasher.finalize());
        Self { scope: format!("user:{user_id}"), key: key.to_owned(), fingerprint }
    }

    fn aad(&self) -> String {
        format!("{}\n{}", self.scope, self.key)
    }
}

/// The outcome of [`Idempotency::begin`].
#[derive(Debug)]
pub enum Begin {
    /// First time (or a retry after the first attempt failed): do the work, record the answer.
    Proceed(Claim),
    /// Done before: answer this again.
    Replay {
        /// The recorded HTTP status.
        status: u16,
        /// The recorded body.
        body: Vec<u8>,
    },
}

/// The right to do the work of one idempotent request and record its answer.
#[derive(Clone)]
pub struct Claim {
    request: IdempotentRequest,
    lease: chrono::DateTime<chrono::Utc>,
    sealer: Sealer,
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim").field("scope", &self.request.scope).finish_non_exhaustive()
    }
}

impl Claim {
    /// Records the answer on `conn`, inside the transaction that makes the change it reports.
    ///
    /// # Errors
    /// [`ServiceError::IdempotencyInFlight`] when the claim was lost (its lease passed and a
    /// retry took it over): the caller's transaction must then roll back.
    pub fn record(
        &self,
        conn: &mut DbConnection,
        status: u16,
        body: &[u8],
    ) -> Result<(), ServiceError> {
        let text = String::from_utf8_lossy(body);
        let sealed = self.sealer.seal(&self.request.aad(), &text).ok_or_else(|| {
            ServiceError::Internal("no key to seal an idempotent answer".to_owned())
        })?;
        let r = &self.request;
        if repo::complete(conn, &r.scope, &r.key, self.lease, i32::from(status), &sealed)? {
            Ok(())
        } else {
            Err(ServiceError::IdempotencyInFlight { key: r.key.clone() })
        }
    }
}

impl Idempotency {
    /// A store on `db`, sealing with `sealer`. A running request's lease lasts the database
    /// deadline plus 5 s: longer than any request that still gets an answer.
    pub fn new(db: Db, sealer: Sealer) -> Self {
        let lease_ms = i64::try_from(db.deadline().as_millis()).unwrap_or(10_000) + 5_000;
        Self {
            db,
            sealer,
            lease: Duration::milliseconds(lease_ms),
            last_sweep: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Claims `request`, or finds its recorded answer.
    ///
    /// # Errors
    /// [`ServiceError::IdempotencyKeyReused`] (422) when the key was used for another request;
    /// [`ServiceError::IdempotencyInFlight`] (409) while the first request runs;
    /// [`ServiceError::Unavailable`] when the database is.
    pub async fn begin(&self, request: IdempotentRequest) -> Result<Begin, ServiceError> {
        let now = time::now();
        let sweep = self.sweep_due(now);
        let (lease, ttl) = (self.lease, Duration::seconds(TTL_SECS));
        let r = request.clone();
        let found = self
            .db
            .run(move |conn| {
                if sweep {
                    let swept = repo::delete_expired(conn, now)?;
                    tracing::debug!(swept, "expired idempotency keys erased");
                }
                transaction(conn, |conn| claim(conn, &r, now, lease, ttl))
            })
            .await?;
        match found {
            Found::Claimed(lease) => {
                Ok(Begin::Proceed(Claim { request, lease, sealer: self.sealer.clone() }))
            }
            Found::Recorded { status, sealed } => {
                let body = self.sealer.open(&request.aad(), &sealed).ok_or_else(|| {
                    ServiceError::Internal("recorded answer cannot be opened".to_owned())
                })?;
                Ok(Begin::Replay {
                    status: u16::try_from(status).unwrap_or(500),
                    body: body.into_bytes(),
                })
            }
        }
    }

    /// Gives a claim up after the work failed, so that a retry starts afresh. Best effort: if
    /// the database cannot be reached the lease runs out instead.
    pub async fn release(&self, claim: Claim) {
        let r = claim.request;
        let now = time::now();
        let result = self
            .db
            .run(move |conn| Ok(repo::delete_unfinished(conn, &r.scope, &r.key, now)?))
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "releasing an idempotency key failed; its lease will pass");
        }
    }

    fn sweep_due(&self, now: DateTime<Utc>) -> bool {
        let now_s = now.timestamp();
        let last = self.last_sweep.load(Ordering::Relaxed);
        now_s - last >= 60
            && self
                .last_sweep
                .compare_exchange(last, now_s, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

enum Found {
    Claimed(chrono::DateTime<chrono::Utc>),
    Recorded { status: i32, sealed: String },
}

fn claim(
    conn: &mut DbConnection,
    r: &IdempotentRequest,
    now: DateTime<Utc>,
    lease: Duration,
    ttl: Duration,
) -> Result<Found, ServiceError> {
    let in_flight = || ServiceError::IdempotencyInFlight { key: r.key.clone() };
    let new_lease = now + lease;
    // First statement, a write: SQLite's write lock before any read (see
    // `repo::delete_expired_key`); concurrent duplicates then queue instead of failing.
    repo::delete_expired_key(conn, &r.scope, &r.key, now)?;
    let existing = repo::find(conn, &r.scope, &r.key)?.filter(|row| row.expires_at > now);
    let Some(row) = existing else {
        repo::delete_unfinished(conn, &r.scope, &r.key, now)?;
        let row = IdempotencyRow {
            scope: r.scope.clone(),
            idempotency_key: r.key.clone(),
            fingerprint: r.fingerprint.clone(),
            status: None,
            response_sealed: None,
            created_at: now,
            locked_until: new_lease,
            expires_at: now + ttl,
        };
        return match repo::insert(conn, &row) {
            Ok(()) => Ok(Found::Claimed(new_lease)),
            Err(PersistenceError::Conflict) => Err(in_flight()),
            Err(e) => Err(e.into()),
        };
    };
    if row.fingerprint != r.fingerprint {
        return Err(ServiceError::IdempotencyKeyReused { key: r.key.clone() });
    }
    match (row.status, row.response_sealed) {
        (Some(status), Some(sealed)) => Ok(Found::Recorded { status, sealed }),
        _ if row.locked_until > now => Err(in_flight()),
        _ => {
            if repo::take_over(conn, &r.scope, &r.key, row.locked_until, new_lease)? {
                Ok(Found::Claimed(new_lease))
            } else {
                Err(in_flight())
            }
        }
    }
}

/// How a use case records its answer for an idempotent request: the claim, the HTTP status of
/// success and how the edge renders the use case's result as the body. A use case that takes
/// an `Option<Recording<T>>` calls [`Recording::record`] inside the transaction of its change.
pub struct Recording<T> {
    /// The claim from [`Idempotency::begin`].
    pub claim: Claim,
    /// The success status (e.g. 201).
    pub status: u16,
    /// Renders the result as the answer's body, exactly as the edge will send it.
    pub render: fn(&T) -> Vec<u8>,
}

impl<T> std::fmt::Debug for Recording<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("claim", &self.claim)
            .field("status", &self.status)
            .finish()
    }
}

impl<T> Recording<T> {
    /// Records `value`'s answer on `conn` (inside the caller's transaction).
    ///
    /// # Errors
    /// As [`Claim::record`].
    pub fn record(&self, conn: &mut DbConnection, value: &T) -> Result<(), ServiceError> {
        self.claim.record(conn, self.status, &(self.render)(value))
    }
}
