//! Supervised background tasks: restarted when they panic.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Pause before a panicked task is started again.
const RESTART_DELAY: Duration = Duration::from_millis(500);

/// Runs `make()`'s future as a task and starts a new one whenever it panics (counting the
/// restarts in `restarts`), until one returns. A task cancelled because the runtime shuts
/// down is not restarted.
pub(crate) fn supervise<F, Fut>(
    name: &'static str,
    restarts: Arc<AtomicU64>,
    make: F,
) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            match tokio::spawn(make()).await {
                Ok(()) => return,
                Err(e) if e.is_panic() => {
                    restarts.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(task = name, "background task panicked; restarting it");
                    tokio::time::sleep(RESTART_DELAY).await;
                }
                Err(_) => return,
            }
        }
    })
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_is_restarted() {
        let runs = Arc::new(AtomicU64::new(0));
        let restarts = Arc::new(AtomicU64::new(0));
        let counter = runs.clone();
        let handle = supervise("test", restarts.clone(), move || {
            let counter = counter.clone();
            async move {
                if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("first run fails");
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), handle).await.unwrap().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(restarts.load(Ordering::SeqCst), 1);
    }
}
