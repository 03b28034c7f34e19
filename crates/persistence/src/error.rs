//! The one error type of the persistence layer.
//!
//! Callers branch on [`PersistenceError::Conflict`] (a unique constraint, e.g. a duplicate
//! e-mail, becomes a client error) and [`PersistenceError::Unavailable`] (the database cannot
//! be reached: a 503, retried by clients); everything else is an internal error whose text
//! goes to the logs only.

use diesel::result::{DatabaseErrorKind, Error as DieselError};

/// An error from the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum PersistenceError {
    /// A unique constraint was violated (duplicate e-mail, colliding digest).
    #[error("unique constraint violated")]
    Conflict,
    /// No connection could be had: the database is down, unreachable or saturated.
    #[error("database unavailable: {0}")]
    Unavailable(String),
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

impl From<DieselError> for PersistenceError {
    fn from(e: DieselError) -> Self {
        match e {
            DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _) => Self::Conflict,
            DieselError::DatabaseError(DatabaseErrorKind::ClosedConnection, info)
            | DieselError::DatabaseError(DatabaseErrorKind::UnableToSendCommand, info) => {
                Self::Unavailable(info.message().to_owned())
            }
            DieselError::BrokenTransactionManager => {
                Self::Unavailable("connection lost inside a transaction".to_owned())
            }
            other => Self::Query(other),
        }
    }
}

impl From<r2d2::Error> for PersistenceError {
    fn from(e: r2d2::Error) -> Self {
        Self::Unavailable(e.to_string())
    }
}
