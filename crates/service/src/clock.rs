//! The time the use cases read. In production it is the system clock; a test builds an
//! [`Clock::adjustable`] one and moves it forward instead of sleeping (a reset token's 30
//! minutes, a TOTP time step, a challenge's lifetime).

use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A source of the current time (UTC, whole microseconds, as [`aigw_domain::time::now`]).
///
/// Clones share one offset: moving one moves all of them.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    /// Microseconds added to the system time; `None` for the plain system clock.
    offset_micros: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self::default()
    }

    /// A clock that reads the system time plus an offset that [`Clock::advance`] moves
    /// (starting at zero). Time still passes: it never stands still, it only jumps.
    pub fn adjustable() -> Self {
        Self { offset_micros: Some(Arc::new(AtomicI64::new(0))) }
    }

    /// The current time, truncated to whole microseconds.
    pub fn now(&self) -> DateTime<Utc> {
        let now = aigw_domain::time::now();
        match &self.offset_micros {
            None => now,
            Some(offset) => {
                let micros = offset.load(Ordering::Relaxed);
                now + chrono::Duration::microseconds(micros)
            }
        }
    }

    /// Moves an adjustable clock forward by `by` (backward when negative).
    ///
    /// # Panics
    /// On the system clock: only a test moves time, and it must have asked for a clock it
    /// can move.
    #[allow(clippy::expect_used)] // documented above: moving the system clock is a test's bug
    pub fn advance(&self, by: chrono::Duration) {
        let offset = self.offset_micros.as_ref().expect("only an adjustable clock can be moved");
        let micros = by.num_microseconds().unwrap_or(i64::MAX);
        offset.fetch_add(micros, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adjustable_clock_moves_every_clone() {
        let clock = Clock::adjustable();
        let copy = clock.clone();
        let before = copy.now();
        clock.advance(chrono::Duration::minutes(31));
        let moved = copy.now() - before;
        assert!(moved >= chrono::Duration::minutes(31), "{moved}");
        assert!(moved < chrono::Duration::minutes(32), "{moved}");
    }

    #[test]
    fn the_system_clock_follows_the_system_time() {
        let clock = Clock::system();
        let (a, b) = (aigw_domain::time::now(), clock.now());
        assert!((b - a).num_seconds().abs() < 2);
    }
}
