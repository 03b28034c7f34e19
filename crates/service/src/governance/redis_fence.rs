//! When a key's budget counter may be opened from the ledger after the counting moved: from
//! Redis to the database when Redis fails, from the database (or a lost master) back to
//! Redis, or to a new master that Sentinel promoted.
//!
//! A counter opens at the ledger's spend plus the calls in flight. Both are written by every
//! node within [`Fence::ledger_lag`] of an admission (the usage recorder and the book of calls
//! in flight flush every `usage.flush_interval_ms`; a lease admits from memory for at most
//! `key_leases::LEASE_TTL`; the sum and a margin for the writes is computed where the
//! governance is built, `key_limits::SpendGovernance::from_config`). A counter opened sooner after the counting moved would miss the last calls
//! the previous counters admitted, and the key could spend them twice. So:
//!
//! - **Into the database**: while Redis fails, a node admits budgeted calls in the database
//!   only [`Fence::ledger_lag`] after it saw the outage begin ([`Fence::wait_for_ledger`]).
//! - **Back into Redis**: a node that reconciles the database's counters, or that is the first
//!   to use a new master (the master's replication id, marked once in Redis by
//!   [`FIRST_ON_EPOCH`]), raises a fence in Redis (`{prefix}kc:fence`, expiring after
//!   [`Fence::ledger_lag`]); no node opens a budget counter while it stands
//!   ([`Fence::wait`], and the opening script checks it again).
//!
//! The calls that need a counter opened wait for the fence (at most [`Fence::ledger_lag`]);
//! calls on open counters do not.

use crate::redis_link::{RedisConn, RedisLink};
use std::time::Duration;

/// Seconds a master's mark lives (a week: far longer than any counter).
const EPOCH_MARK_SECS: u64 = 7 * 24 * 3600;

/// Marks a master's replication id as seen and, the first time, raises the fence. KEYS[1]:
/// the mark, KEYS[2]: the fence. ARGV[1]: the fence's life in milliseconds, ARGV[2]: the
/// mark's in seconds. Returns 1 when this call was the first on the master.
pub(super) const FIRST_ON_EPOCH: &str = r"
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[2]) then
  redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[1], 'GT')
  return 1
end
return 0
";

/// The fence of one deployment's counters (its key prefix).
#[derive(Debug)]
pub(super) struct Fence {
    key: String,
    prefix: String,
    ledger_lag: Duration,
    first_on_epoch: redis::Script,
}

impl Fence {
    /// The fence of the counters under `prefix`, for nodes whose admissions are all in the
    /// database `ledger_lag` after they were made.
    pub(super) fn new(prefix: &str, ledger_lag: Duration) -> Self {
        Self {
            key: format!("{prefix}kc:fence"),
            prefix: prefix.to_owned(),
            ledger_lag,
            first_on_epoch: redis::Script::new(FIRST_ON_EPOCH),
        }
    }

    /// The fence's name in Redis (the opening script's second key).
    pub(super) fn key(&self) -> &str {
        &self.key
    }

    /// Waits until this node has been in its Redis outage for [`Self::ledger_lag`], so that a
    /// counter the database opens now holds every call Redis admitted before it failed.
    pub(super) async fn wait_for_ledger(&self, link: &RedisLink) {
        let Some(since) = link.failing_since() else {
            return;
        };
        let until = since + self.ledger_lag;
        tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
    }

    /// Waits while the fence stands (at most [`Self::ledger_lag`]); `None` when Redis failed.
    pub(super) async fn wait(&self, conn: &RedisConn) -> Option<()> {
        let left: i64 = conn.query(redis::cmd("PTTL").arg(&self.key)).await?;
        if let Ok(ms) = u64::try_from(left) {
            tokio::time::sleep(Duration::from_millis(ms).min(self.ledger_lag)).await;
        }
        Some(())
    }

    /// Adds to `pipeline` the raising of the fence for [`Self::ledger_lag`] (or leaves a
    /// longer one standing).
    pub(super) fn raise(&self, pipeline: &mut redis::Pipeline) {
        let ms = u64::try_from(self.ledger_lag.as_millis()).unwrap_or(u64::MAX);
        pipeline.cmd("SET").arg(&self.key).arg("1").arg("NX").arg("PX").arg(ms).ignore();
        pipeline.cmd("PEXPIRE").arg(&self.key).arg(ms).arg("GT").ignore();
    }

    /// Marks the master `epoch` as seen; the first node to use it raises the fence, since the
    /// counters named by it open from the ledger. `None` when Redis failed.
    pub(super) async fn mark_epoch(&self, conn: &RedisConn, epoch: &str) -> Option<()> {
        let mark = format!("{}kc:epoch:{epoch}", self.prefix);
        let ms = u64::try_from(self.ledger_lag.as_millis()).unwrap_or(u64::MAX);
        let mut invocation = self.first_on_epoch.key(mark);
        invocation.key(&self.key).arg(ms).arg(EPOCH_MARK_SECS);
        let first: i64 = conn.invoke(&invocation).await?;
        if first == 1 {
            tracing::info!(
                replication_id = epoch,
                fence_ms = ms,
                "first node on this Redis master: keys' budget counters open from the ledger \
                 once the calls admitted before have been written"
            );
        }
        Some(())
    }
}
