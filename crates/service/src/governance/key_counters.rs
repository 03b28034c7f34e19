//! Where a node keeps the counters of keys' budgets and `rpm_limit` / `tpm_limit`
//! (docs/budgets.md "Where the counters live"): in the database (default; exact across every
//! node sharing it), on a deployment of one node in this process's memory, or in Redis
//! ([`crate::governance::redis_counters`]).
//!
//! The memory counters are exact on their node: an admission and a reservation are one
//! check-and-add under a mutex held for a few map operations (never across an `.await`). A
//! budget counter opens from the usage ledger (the daily rollups, as the database counter
//! does) the first time a key is seen in a period, and again whenever the key's budget
//! period is not the one it was opened for (a PATCH of `budget_period`). A PATCH of
//! `max_budget_usd` alone keeps the counter: what it holds (spend and running calls) does not
//! depend on the limit, which every reservation passes anew. Rate windows start empty at every restart, as the window of one
//! minute would have.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

pub use crate::config::KeyCounters;

/// The budget counter of one key: the period it was opened for (kind and first day), and the
/// micro-USD committed (settled spend plus running worst cases).
#[derive(Debug, Clone, PartialEq, Eq)]
struct BudgetCounter {
    period: String,
    committed: i64,
}

/// The rate window of one key: its start (Unix seconds), requests and tokens counted.
#[derive(Debug, Clone, Copy, Default)]
struct RateWindow {
    start: i64,
    requests: i64,
    tokens: i64,
}

/// The outcome of [`NodeCounters::reserve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeReserved {
    /// Reserved.
    Yes,
    /// Refused; micro-USD committed now.
    No(i64),
    /// No counter open for this period: open it with [`NodeCounters::open`].
    NotOpen,
}

/// The in-memory counters of a node (cheap to clone; clones share the counters).
#[derive(Debug, Clone, Default)]
pub struct NodeCounters {
    budgets: Arc<Mutex<HashMap<String, BudgetCounter>>>,
    windows: Arc<Mutex<HashMap<String, RateWindow>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain numbers behind: still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl NodeCounters {
    /// Empty counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reserves `cost` micro-USD of key `key_id` in `period` against `limit`, leaving at least
    /// `room` micro-USD of it free (0: the whole budget may be used).
    pub(crate) fn reserve(
        &self,
        key_id: &str,
        period: &str,
        cost: i64,
        (limit, room): (i64, i64),
    ) -> NodeReserved {
        let mut budgets = lock(&self.budgets);
        match budgets.get_mut(key_id) {
            Some(c) if c.period == period => {
                if c.committed <= limit.saturating_sub(cost).saturating_sub(room) {
                    c.committed += cost;
                    NodeReserved::Yes
                } else {
                    NodeReserved::No(c.committed)
                }
            }
            _ => NodeReserved::NotOpen,
        }
    }

    /// Opens the counter of key `key_id` for `period` at `spent` micro-USD (read from the
    /// ledger), unless a concurrent caller opened the same one first.
    pub(crate) fn open(&self, key_id: &str, period: &str, spent: i64) {
        let mut budgets = lock(&self.budgets);
        let fresh = BudgetCounter { period: period.to_owned(), committed: spent };
        match budgets.get(key_id) {
            Some(c) if c.period == period => {}
            _ => {
                budgets.insert(key_id.to_owned(), fresh);
            }
        }
    }

    /// Adds `delta` micro-USD (real cost minus reservation) to key `key_id`'s counter of
    /// `period`, never below 0; a counter since reopened (a new period) is left alone.
    pub(crate) fn settle(&self, key_id: &str, period: &str, delta: i64) {
        let mut budgets = lock(&self.budgets);
        if let Some(c) = budgets.get_mut(key_id) {
            if c.period == period {
                c.committed = c.committed.saturating_add(delta).max(0);
            }
        }
    }

    /// Admits one call of key `key_id` using `tokens` worst-case tokens in the window starting
    /// at `window_start`, against `rpm` requests and `tpm` tokens (`i64::MAX`: no limit).
    /// Returns whether it was admitted and the window's requests and tokens after.
    pub(crate) fn admit(
        &self,
        key_id: &str,
        window_start: i64,
        tokens: i64,
        rpm: i64,
        tpm: i64,
    ) -> (bool, i64, i64) {
        let mut windows = lock(&self.windows);
        if windows.len() > 4096 {
            // Forget the windows of keys idle for a minute or more.
            windows.retain(|_, w| w.start >= window_start);
        }
        let w = windows.entry(key_id.to_owned()).or_default();
        if w.start != window_start {
            *w = RateWindow { start: window_start, requests: 0, tokens: 0 };
        }
        let admitted = w.requests < rpm && w.tokens <= tpm.saturating_sub(tokens);
        if admitted {
            w.requests += 1;
            w.tokens = w.tokens.saturating_add(tokens);
        }
        (admitted, w.requests, w.tokens)
    }

    /// Adds `delta` tokens to key `key_id`'s window starting at `window_start`, if it is still
    /// the current one; never below 0.
    pub(crate) fn settle_tokens(&self, key_id: &str, window_start: i64, delta: i64) {
        let mut windows = lock(&self.windows);
        if let Some(w) = windows.get_mut(key_id) {
            if w.start == window_start {
                w.tokens = w.tokens.saturating_add(delta).max(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_open_reserve_refuse_and_reopen_on_a_new_period() {
        let c = NodeCounters::new();
        assert_eq!(c.reserve("k", "total", 10, (100, 0)), NodeReserved::NotOpen);
        c.open("k", "total", 85);
        assert_eq!(c.reserve("k", "total", 10, (100, 0)), NodeReserved::Yes);
        assert_eq!(c.reserve("k", "total", 10, (100, 0)), NodeReserved::No(95));
        c.settle("k", "total", -10);
        assert_eq!(c.reserve("k", "total", 10, (100, 0)), NodeReserved::Yes);
        c.open("k", "total", 0);
        assert_eq!(c.reserve("k", "total", 10, (100, 0)), NodeReserved::No(95), "not reopened");
        // A new limit keeps what the counter holds, running calls included.
        assert_eq!(c.reserve("k", "total", 10, (104, 0)), NodeReserved::No(95), "new limit");
        assert_eq!(c.reserve("k", "total", 10, (105, 0)), NodeReserved::Yes);
        // A new period opens a new counter; settlements of the old one are left alone.
        assert_eq!(c.reserve("k", "daily/2026-11-26", 10, (100, 0)), NodeReserved::NotOpen);
        c.open("k", "daily/2026-11-26", 7);
        c.settle("k", "total", -1000);
        assert_eq!(c.reserve("k", "daily/2026-11-26", 93, (100, 0)), NodeReserved::Yes);
    }

    #[test]
    fn windows_count_requests_and_tokens_and_reset_each_minute() {
        let c = NodeCounters::new();
        assert_eq!(c.admit("k", 60, 5, 2, 100), (true, 1, 5));
        assert_eq!(c.admit("k", 60, 5, 2, 100), (true, 2, 10));
        assert_eq!(c.admit("k", 60, 5, 2, 100), (false, 2, 10));
        c.settle_tokens("k", 60, -20);
        assert_eq!(c.admit("k", 60, 100, 3, 100), (true, 3, 100));
        assert_eq!(c.admit("k", 120, 101, 3, 100), (false, 0, 0));
        assert_eq!(c.admit("k", 120, 100, 3, 100), (true, 1, 100));
    }
}
