//! Runs blocking database work on tokio's blocking pool, never on an async worker.

use crate::error::ServiceError;
use aigw_persistence::{DbConnection, Pool};

/// A handle to the connection pool that runs closures on the blocking thread pool.
///
/// At most as many closures run at once as the pool has connections; the others wait on an
/// async semaphore, not on a blocking thread, so a burst of requests does not park hundreds
/// of threads inside the pool's checkout.
#[derive(Debug, Clone)]
pub struct Db {
    pool: Pool,
    permits: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Db {
    /// Wraps a pool.
    pub fn new(pool: Pool) -> Self {
        let permits = usize::try_from(pool.max_size()).unwrap_or(1).max(1);
        Self { pool, permits: std::sync::Arc::new(tokio::sync::Semaphore::new(permits)) }
    }

    /// The pool itself (for connections kept outside it, such as the change-feed tailer's).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Checks out a connection and runs `f` on it, both on the blocking pool
    /// (`tokio::task::spawn_blocking`).
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when no connection can be had within the pool's acquire
    /// timeout; whatever `f` returns; [`ServiceError::Internal`] if `f` panicked.
    pub async fn run<T, F>(&self, f: F) -> Result<T, ServiceError>
    where
        T: Send + 'static,
        F: FnOnce(&mut DbConnection) -> Result<T, ServiceError> + Send + 'static,
    {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| ServiceError::Internal(format!("database semaphore closed: {e}")))?;
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = pool.get()?;
            f(&mut conn)
        })
        .await
        .map_err(|e| ServiceError::Internal(format!("database task failed: {e}")))?
    }

    /// Whether the database answers a trivial query (for readiness probes).
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when it does not.
    pub async fn ping(&self) -> Result<(), ServiceError> {
        self.run(|conn| Ok(aigw_persistence::ping(conn)?)).await
    }
}
