//! The one error type of the persistence layer, and how database failures are classified.
//!
//! Callers branch on [`PersistenceError::Conflict`] (a unique constraint, e.g. a duplicate
//! e-mail, becomes a client error), [`PersistenceError::Unavailable`] (the database cannot do
//! the work now: down, hung, full, read-only, overloaded, cancelled; a 503 that clients retry)
//! and [`PersistenceError::Retryable`] (PostgreSQL says the transaction may simply be run
//! again: SQLSTATE 40001; [`crate::transaction`] retries it once). Everything else is an
//! internal error whose text goes to the logs only.
//!
//! The classification uses diesel's [`DatabaseErrorKind`], which diesel derives from the
//! SQLSTATE (PostgreSQL) or the extended result code (SQLite), never the message text:
//!
//! | diesel kind | source | class |
//! |---|---|---|
//! | `UniqueViolation` | 23505, `SQLITE_CONSTRAINT_UNIQUE`/`_PRIMARYKEY` | [`PersistenceError::Conflict`] |
//! | `SerializationFailure` | 40001 | [`PersistenceError::Retryable`] |
//! | `ReadOnlyTransaction` | 25006 (a replica, or read-only after failover) | unavailable |
//! | `ClosedConnection`, `UnableToSendCommand` | class 08, a broken connection | unavailable |
//! | `ForeignKeyViolation`, `NotNullViolation`, `CheckViolation`, ... | class 23 | internal |
//! | `Unknown` | everything diesel 2.3 does not name | unavailable (see below) |
//!
//! diesel 2.3 exposes neither the SQLSTATE nor the SQLite result code of the errors it does not
//! name (an open change to diesel adds it). Those are, for aigw's fixed and tested statements,
//! the environment's faults: `SQLITE_FULL`, `SQLITE_BUSY` after `busy_timeout`,
//! `SQLITE_READONLY`, `SQLITE_IOERR`, `SQLITE_NOMEM`; PostgreSQL 57014 (statement timeout,
//! cancel), 55P03 (lock timeout), 40P01 (deadlock), class 53 (disk full, out of memory,
//! too many connections), 57P0x (shutdown). They are therefore answered 503 with
//! `Retry-After` and logged in full at error level, so that a genuine bug still shows.
//!
//! PostgreSQL's data exceptions (class 22: a `text` value with U+0000, a number or timestamp
//! out of its column's range) fall in that unnamed set too, so the layers above must never
//! pass such a value: `aigw-http` refuses NUL in every string of a request and checks every
//! client number and time against a documented range first (400 naming the field). One
//! logged here is a bug in that validation, never the client's fault to retry.

use diesel::result::{DatabaseErrorKind, Error as DieselError};

/// An error from the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum PersistenceError {
    /// A unique constraint was violated (duplicate e-mail, colliding digest).
    #[error("unique constraint violated")]
    Conflict,
    /// The database cannot do the work now: no connection in time, the connection broke, or
    /// the database refused for a reason of its own state (full, read-only, busy, timed out).
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The transaction failed in a way the database says is safe to retry (SQLSTATE 40001).
    #[error("database asks for a retry: {0}")]
    Retryable(String),
    /// Any other query failure.
    #[error("database query failed: {0}")]
    Query(DieselError),
    /// Migrations could not be applied.
    #[error("migrations failed: {0}")]
    Migration(String),
    /// The database URL is not one this build understands.
    #[error("unsupported database URL: {0}")]
    BadUrl(String),
}

impl PersistenceError {
    /// Whether the database said the transaction may be run again as it is.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Retryable(_))
    }
}

impl From<DieselError> for PersistenceError {
    fn from(e: DieselError) -> Self {
        match e {
            DieselError::DatabaseError(kind, info) => match kind {
                DatabaseErrorKind::UniqueViolation => Self::Conflict,
                DatabaseErrorKind::SerializationFailure => {
                    Self::Retryable(format!("serialization failure: {}", info.message()))
                }
                DatabaseErrorKind::ReadOnlyTransaction => {
                    Self::Unavailable(format!("read-only: {}", info.message()))
                }
                DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand => {
                    Self::Unavailable(format!("connection lost: {}", info.message()))
                }
                DatabaseErrorKind::ForeignKeyViolation
                | DatabaseErrorKind::NotNullViolation
                | DatabaseErrorKind::CheckViolation
                | DatabaseErrorKind::RestrictViolation
                | DatabaseErrorKind::ExclusionViolation => {
                    Self::Query(DieselError::DatabaseError(kind, info))
                }
                _ => {
                    tracing::error!(
                        error = info.message(),
                        "unclassified database error, answered as unavailable"
                    );
                    Self::Unavailable(format!("database error: {}", info.message()))
                }
            },
            DieselError::BrokenTransactionManager => {
                Self::Unavailable("connection lost inside a transaction".to_owned())
            }
            DieselError::RollbackErrorOnCommit { commit_error, .. } => Self::from(*commit_error),
            other => Self::Query(other),
        }
    }
}

impl From<r2d2::Error> for PersistenceError {
    fn from(e: r2d2::Error) -> Self {
        Self::Unavailable(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(kind: DatabaseErrorKind) -> PersistenceError {
        PersistenceError::from(DieselError::DatabaseError(kind, Box::new("x".to_owned())))
    }

    #[test]
    fn classification_follows_the_kind() {
        assert!(matches!(db(DatabaseErrorKind::UniqueViolation), PersistenceError::Conflict));
        assert!(db(DatabaseErrorKind::SerializationFailure).is_retryable());
        for unavailable in [
            DatabaseErrorKind::ReadOnlyTransaction,
            DatabaseErrorKind::ClosedConnection,
            DatabaseErrorKind::UnableToSendCommand,
            DatabaseErrorKind::Unknown,
        ] {
            assert!(matches!(db(unavailable), PersistenceError::Unavailable(_)), "{unavailable:?}");
        }
        assert!(matches!(db(DatabaseErrorKind::NotNullViolation), PersistenceError::Query(_)));
        assert!(matches!(
            PersistenceError::from(DieselError::NotFound),
            PersistenceError::Query(_)
        ));
    }
}
