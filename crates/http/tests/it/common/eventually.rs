//! Waiting for something the server does in the background (a usage record written, a change
//! feed applied, a process started): every test polls through [`eventually`] or
//! [`eventually_blocking`], never with a sleep of its own. Time that must pass for a rule that
//! reads the [`aigw_service::Clock`] (a token's lifetime, a grace window) is moved on an
//! adjustable one (`spawn_app_with_clock`, `advance`); the few sleeps left in the tests say
//! why real time must pass (`// Real time:`).

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long a poll waits between two checks.
const POLL: Duration = Duration::from_millis(25);

/// Calls `check` until it answers `Ok` (at once, then every 25 ms) and returns that value.
///
/// # Panics
/// After `timeout`, with `what` and the last `Err` that `check` answered (the state seen).
pub async fn eventually<T, S: Debug, F: Future<Output = Result<T, S>>>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(value) => return value,
            Err(last) => last,
        };
        assert!(Instant::now() < deadline, "{what} (after {timeout:?}; last seen: {last:?})");
        // On the blocking threads, so that the runtime runs the work polled for meanwhile.
        let _ = tokio::task::spawn_blocking(pause).await;
    }
}

/// [`eventually`] for code that is not async (waiting for a child process's port or exit).
///
/// # Panics
/// After `timeout`, with `what` and the last `Err` that `check` answered.
pub fn eventually_blocking<T, S: Debug>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, S>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check() {
            Ok(value) => return value,
            Err(last) => last,
        };
        assert!(Instant::now() < deadline, "{what} (after {timeout:?}; last seen: {last:?})");
        pause();
    }
}

/// The pause between two checks of a poll: the one sleep of every poll.
fn pause() {
    // Real time: what is polled for runs on other tasks, threads or processes (a record
    // written, a feed applied, a child process started or gone), on their own time.
    std::thread::sleep(POLL);
}

/// Whether something listens on 127.0.0.1:`port` (`Err` with the connect error if not).
pub fn listening(port: u16) -> Result<(), std::io::Error> {
    std::net::TcpStream::connect(("127.0.0.1", port)).map(drop)
}
