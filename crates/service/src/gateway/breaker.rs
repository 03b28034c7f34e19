//! A deployment's circuit breaker, counted in this node's memory (`[gateway.breaker]`).
//!
//! Closed, it lets every call through and counts failures: `failures` in a row, or a share of
//! at least `failure_ratio` of a window's calls (`min_calls` of them at least), open it for
//! `cooldown_secs`. Open, it lets nothing through. Once the cooldown has passed it is half
//! open: exactly one call goes through as its probe ([`Pass::Probe`]); the probe's success
//! closes the breaker, its failure opens it for another cooldown, and a probe dropped without
//! a verdict (its caller went away) lets the next call probe.
//!
//! The closed path is a few atomic loads and two counter increments: no lock, so calls on
//! every worker pass the same deployment without waiting on each other.

use crate::config::BreakerConfig;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A breaker's state, as the `aigw_breaker_state` gauge reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through (gauge 0).
    Closed,
    /// No call goes through until the cooldown ends (gauge 1).
    Open,
    /// The cooldown ended: the next call is the probe (gauge 2).
    HalfOpen,
}

impl BreakerState {
    /// The gauge's value.
    pub fn gauge(self) -> f64 {
        match self {
            Self::Closed => 0.0,
            Self::Open => 1.0,
            Self::HalfOpen => 2.0,
        }
    }
}

/// One deployment's breaker (cheap to clone: shared).
#[derive(Debug, Clone)]
pub struct Breaker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: BreakerConfig,
    /// Where the millisecond clock of `open_until` and `window_start` starts.
    epoch: Instant,
    /// Milliseconds since `epoch` until which the breaker is open; 0 when closed.
    open_until: AtomicU64,
    /// Whether a probe is out.
    probing: AtomicBool,
    /// Failures in a row.
    consecutive: AtomicU32,
    /// The window's start, in milliseconds since `epoch`, and its calls and failures.
    window_start: AtomicU64,
    calls: AtomicU32,
    failed: AtomicU32,
}

/// Whether a call may go to the deployment.
#[derive(Debug)]
pub enum Pass {
    /// Closed: the call goes through.
    Closed,
    /// Half open: the call is the probe; its verdict closes or reopens the breaker.
    Probe(ProbeGuard),
    /// Open (or another call is probing): not before the time given.
    Refused(Duration),
}

/// The one probe of a half-open breaker. Dropped without [`Breaker::succeeded`] or
/// [`Breaker::failed`] (the call was abandoned), it lets the next call probe.
#[derive(Debug)]
pub struct ProbeGuard {
    inner: Arc<Inner>,
}

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        self.inner.probing.store(false, Ordering::Release);
    }
}

impl Breaker {
    /// A closed breaker with `config`.
    pub fn new(config: &BreakerConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config: config.clone(),
                epoch: Instant::now(),
                open_until: AtomicU64::new(0),
                probing: AtomicBool::new(false),
                consecutive: AtomicU32::new(0),
                window_start: AtomicU64::new(0),
                calls: AtomicU32::new(0),
                failed: AtomicU32::new(0),
            }),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The breaker's state now.
    pub fn state(&self) -> BreakerState {
        match self.inner.open_until.load(Ordering::Acquire) {
            0 => BreakerState::Closed,
            until if self.now_ms() < until => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }

    /// Whether a call may go through now (see [`Pass`]).
    pub fn pass(&self) -> Pass {
        let until = self.inner.open_until.load(Ordering::Acquire);
        if until == 0 {
            return Pass::Closed;
        }
        let now = self.now_ms();
        if now < until {
            return Pass::Refused(Duration::from_millis(until - now));
        }
        if self
            .inner
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return Pass::Probe(ProbeGuard { inner: self.inner.clone() });
        }
        // Another call is probing: its verdict comes within one call's time.
        Pass::Refused(Duration::from_secs(1))
    }

    /// How long until the breaker lets a call through, when it lets none now.
    pub fn refused_for(&self) -> Option<Duration> {
        match self.pass() {
            Pass::Refused(wait) => Some(wait),
            Pass::Closed | Pass::Probe(_) => None,
        }
    }

    /// A call that went through succeeded: the run of failures ends; a probe closes the
    /// breaker. Answers whether the state changed (to closed).
    pub fn succeeded(&self, probe: Option<ProbeGuard>) -> bool {
        self.count_call(false);
        if self.inner.consecutive.load(Ordering::Relaxed) != 0 {
            self.inner.consecutive.store(0, Ordering::Relaxed);
        }
        match probe {
            Some(_guard) => {
                self.reset_window(self.now_ms());
                self.inner.open_until.store(0, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// A call that went through failed: a probe reopens the breaker; otherwise the breaker
    /// opens when the run of failures or the window's share of them reaches its threshold.
    /// Answers whether the breaker opened.
    pub fn failed(&self, probe: Option<ProbeGuard>) -> bool {
        let config = &self.inner.config;
        let now = self.now_ms();
        let (calls, failed) = self.count_call(true);
        let run = self.inner.consecutive.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if probe.is_some() {
            self.open(now);
            return true;
        }
        if self.inner.open_until.load(Ordering::Acquire) != 0 {
            // Already open (a call that went through before it opened).
            return false;
        }
        let by_run = config.failures > 0 && run >= config.failures;
        let ratio = config.failure_ratio;
        let by_ratio = ratio > 0.0
            && ratio <= 1.0
            && calls >= config.min_calls.max(1)
            && f64::from(failed) >= ratio * f64::from(calls);
        if by_run || by_ratio {
            self.open(now);
            return true;
        }
        false
    }

    fn open(&self, now: u64) {
        let cooldown = self.inner.config.cooldown_secs.max(1).saturating_mul(1000);
        // Never 0, which means closed.
        self.inner.open_until.store(now.saturating_add(cooldown).max(1), Ordering::Release);
        self.inner.consecutive.store(0, Ordering::Relaxed);
        self.reset_window(now);
    }

    /// Counts a call in the current window (a new one when the last ended); answers the
    /// window's calls and failures with it.
    fn count_call(&self, failed: bool) -> (u32, u32) {
        let now = self.now_ms();
        let window = self.inner.config.window_secs.max(1).saturating_mul(1000);
        let start = self.inner.window_start.load(Ordering::Relaxed);
        if now.saturating_sub(start) >= window
            && self
                .inner
                .window_start
                .compare_exchange(start, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.inner.calls.store(0, Ordering::Relaxed);
            self.inner.failed.store(0, Ordering::Relaxed);
        }
        let calls = self.inner.calls.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        let failures = if failed {
            self.inner.failed.fetch_add(1, Ordering::Relaxed).saturating_add(1)
        } else {
            self.inner.failed.load(Ordering::Relaxed)
        };
        (calls, failures)
    }

    fn reset_window(&self, now: u64) {
        self.inner.window_start.store(now, Ordering::Relaxed);
        self.inner.calls.store(0, Ordering::Relaxed);
        self.inner.failed.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]
    use super::*;

    fn config(failures: u32, ratio: f64, min_calls: u32) -> BreakerConfig {
        BreakerConfig {
            failures,
            failure_ratio: ratio,
            min_calls,
            window_secs: 60,
            cooldown_secs: 1,
        }
    }

    #[test]
    fn a_run_of_failures_opens_it_and_nothing_passes_until_the_cooldown() {
        let breaker = Breaker::new(&config(3, 0.0, 1));
        assert!(!breaker.failed(None));
        assert!(!breaker.failed(None));
        assert!(breaker.failed(None));
        assert_eq!(breaker.state(), BreakerState::Open);
        match breaker.pass() {
            Pass::Refused(wait) => assert!(wait <= Duration::from_secs(1) && !wait.is_zero()),
            other => panic!("an open breaker let a call through: {other:?}"),
        }
    }

    #[test]
    fn a_success_ends_the_run() {
        let breaker = Breaker::new(&config(2, 0.0, 1));
        assert!(!breaker.failed(None));
        assert!(!breaker.succeeded(None));
        assert!(!breaker.failed(None));
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn a_share_of_failures_in_the_window_opens_it() {
        let breaker = Breaker::new(&config(0, 0.5, 4));
        breaker.succeeded(None);
        breaker.failed(None);
        breaker.succeeded(None);
        assert_eq!(breaker.state(), BreakerState::Closed, "3 calls: below min_calls");
        assert!(breaker.failed(None), "2 of 4 failed");
    }

    #[test]
    fn after_the_cooldown_exactly_one_probe_passes_and_its_verdict_decides() {
        let breaker = Breaker::new(&config(1, 0.0, 1));
        assert!(breaker.failed(None));
        std::thread::sleep(Duration::from_millis(1050));
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        let Pass::Probe(probe) = breaker.pass() else { panic!("no probe after the cooldown") };
        assert!(matches!(breaker.pass(), Pass::Refused(_)), "a second call probed at once");
        assert!(breaker.failed(Some(probe)), "a failed probe reopens it");
        assert_eq!(breaker.state(), BreakerState::Open);
        std::thread::sleep(Duration::from_millis(1050));
        let Pass::Probe(probe) = breaker.pass() else { panic!("no probe after the cooldown") };
        assert!(breaker.succeeded(Some(probe)));
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert!(matches!(breaker.pass(), Pass::Closed));
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_call_probe() {
        let breaker = Breaker::new(&config(1, 0.0, 1));
        breaker.failed(None);
        std::thread::sleep(Duration::from_millis(1050));
        let Pass::Probe(probe) = breaker.pass() else { panic!("no probe after the cooldown") };
        drop(probe);
        assert!(matches!(breaker.pass(), Pass::Probe(_)));
    }
}
