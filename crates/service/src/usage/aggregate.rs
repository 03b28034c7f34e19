//! Sums of the calls a node has metered since its last flush, kept per thread.
//!
//! Every thread that finishes calls (each actix worker) adds them to its own shard: the sums
//! per rollup row (API key, model, endpoint, UTC day), plus the per-request records where those are
//! kept. A shard's lock is taken by its own thread on every call and by the recorder once per
//! flush, so it is never contended between workers: nothing on the request path is shared by
//! all cores. [`Aggregate::take`] empties every shard and merges them into one
//! [`UsageFlush`].
//!
//! Memory: the sums grow with the distinct keys and models active in an interval, not with the
//! call rate. Per-request records are bounded: once a shard holds [`EARLY_FLUSH_RECORDS`] the
//! recorder is woken to flush early (records are written in batches of about that size rather
//! than held for a whole interval); at a shard's share of `usage.queue_capacity` (the
//! database is behind), further records are dropped and counted (`records_dropped`), while
//! their calls still count in the sums, which stay exact. Calls that may have a row among the calls in
//! flight ([`UsageFlush::tracked`]) are always kept one by one: there are at most as many as
//! calls running.

use super::pending::Settlement;
use aigw_domain::ledger::{RollupKey, UsageFlush, UsageRollup, UsageSums};
use aigw_domain::usage::UsageRecord;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use thread_local::ThreadLocal;

/// Per-request records a shard gathers before it wakes the recorder to flush early: about
/// 300 KiB, and a batch large enough for the bulk insert to cost little per row.
pub const EARLY_FLUSH_RECORDS: usize = 1024;

/// Whether per-request records are kept (`usage.request_records`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepRecords {
    /// One record per call in the database, stored in batches (`"database"`).
    Database,
    /// Sums only (`"none"`).
    None,
}

/// One thread's calls since the last flush.
#[derive(Debug, Default)]
struct Shard {
    sums: HashMap<RollupKey, UsageSums, foldhash::fast::RandomState>,
    records: Vec<UsageRecord>,
    tracked: Vec<UsageRecord>,
    /// The tracked calls' settlements, applied once their flush is in the ledger.
    settlements: Vec<Settlement>,
    dropped: u64,
    /// Calls added since the last take.
    calls: u64,
}

/// What adding a call asks of the recorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// Nothing.
    Kept,
    /// The shard's records reached [`EARLY_FLUSH_RECORDS`]: flush early.
    FlushSoon,
}

/// The node's calls since the last flush (see the module docs).
#[derive(Debug)]
pub(crate) struct Aggregate {
    shards: ThreadLocal<Mutex<Shard>>,
    keep: KeepRecords,
    /// Records one shard holds before it drops further ones.
    records_per_shard: usize,
}

/// What [`Aggregate::take`] took.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    /// The flush to write (its id left empty).
    pub(crate) flush: UsageFlush,
    /// Records dropped since the last take because memory for them was full.
    pub(crate) dropped: u64,
    /// The settlements of the flush's tracked calls, to apply once it is written or spooled.
    pub(crate) settlements: Vec<Settlement>,
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Aggregate {
    /// An empty aggregate keeping per-request records as `keep` says, about `capacity` of them
    /// in memory in all (shared out among the threads of the machine).
    pub(crate) fn new(keep: KeepRecords, capacity: usize) -> Self {
        let threads = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        Self { shards: ThreadLocal::new(), keep, records_per_shard: (capacity / threads).max(256) }
    }

    /// Counts one finished call. `tracked`: the call may have a row among the calls in
    /// flight (it is then kept one by one, see [`UsageFlush::tracked`], with its `settlement`,
    /// which the take hands over with the flush that holds the call).
    pub(crate) fn add(
        &self,
        record: UsageRecord,
        tracked: bool,
        settlement: Option<Settlement>,
    ) -> Added {
        let mut shard = lock(self.shards.get_or_default());
        shard.calls += 1;
        if let Some(settlement) = settlement {
            shard.settlements.push(settlement);
        }
        if tracked {
            shard.tracked.push(record);
            return Added::Kept;
        }
        match self.keep {
            KeepRecords::None => {
                let sums = UsageSums::of(&record);
                let day = record.day();
                let key = RollupKey {
                    api_key_id: record.api_key_id,
                    model: record.model,
                    endpoint: record.endpoint,
                    day,
                    user_id: record.user_id,
                    team_id: record.team_id,
                    member_id: record.member_id,
                    provider: record.provider,
                };
                shard.sums.entry(key).or_default().add(&sums);
                Added::Kept
            }
            KeepRecords::Database => {
                // The record is kept whole; its sums are added when the shard is taken, off
                // the request path. Only a record that finds no room adds its sums now.
                let held = shard.records.len();
                if held >= self.records_per_shard {
                    shard.dropped += 1;
                    shard.sums.entry(RollupKey::of(&record)).or_default().add_record(&record);
                    return Added::FlushSoon;
                }
                shard.records.push(record);
                if held + 1 == EARLY_FLUSH_RECORDS.min(self.records_per_shard) {
                    Added::FlushSoon
                } else {
                    Added::Kept
                }
            }
        }
    }

    /// Calls added since the last take (for health reports: takes every shard's lock).
    pub(crate) fn pending(&self) -> u64 {
        self.shards.iter().map(|shard| lock(shard).calls).sum()
    }

    /// Whether some shard holds [`EARLY_FLUSH_RECORDS`] records or more (checked after a
    /// write, which new records may have outrun).
    pub(crate) fn wants_flush(&self) -> bool {
        let early = EARLY_FLUSH_RECORDS.min(self.records_per_shard);
        self.shards.iter().any(|shard| lock(shard).records.len() >= early)
    }

    /// Empties every shard into one flush: sums merged per row and ordered by row, records,
    /// tracked calls.
    pub(crate) fn take(&self) -> Taken {
        let mut sums: HashMap<RollupKey, UsageSums, foldhash::fast::RandomState> =
            HashMap::default();
        let mut taken = Taken::default();
        for shard in self.shards.iter() {
            let (shard_sums, mut records, mut tracked, dropped, mut settlements) = {
                let mut shard = lock(shard);
                if shard.calls == 0 {
                    continue;
                }
                shard.calls = 0;
                let capacity = shard.records.capacity();
                (
                    std::mem::take(&mut shard.sums),
                    std::mem::replace(&mut shard.records, Vec::with_capacity(capacity)),
                    std::mem::take(&mut shard.tracked),
                    std::mem::take(&mut shard.dropped),
                    std::mem::take(&mut shard.settlements),
                )
            };
            if sums.is_empty() {
                sums = shard_sums;
            } else {
                for (key, add) in shard_sums {
                    sums.entry(key).or_default().add(&add);
                }
            }
            for record in &records {
                sums.entry(RollupKey::of(record)).or_default().add_record(record);
            }
            taken.flush.records.append(&mut records);
            taken.flush.tracked.append(&mut tracked);
            taken.dropped += dropped;
            taken.settlements.append(&mut settlements);
        }
        let mut rollups: Vec<UsageRollup> =
            sums.into_iter().map(|(key, sums)| UsageRollup { key, sums }).collect();
        rollups.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        taken.flush.rollups = rollups;
        taken.flush.keep_records = self.keep == KeepRecords::Database;
        taken
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use aigw_domain::usage::{TokenUsage, UsageOutcome};
    use std::sync::Arc;

    fn record(key: &str, model: &str, cost: u64) -> UsageRecord {
        UsageRecord {
            request_id: uuid::Uuid::now_v7().to_string(),
            api_key_id: key.into(),
            user_id: "u".into(),
            model: model.into(),
            provider: "p".into(),
            served_model: None,
            attempts: 1,
            endpoint: aigw_domain::usage::Endpoint::Chat,
            streamed: false,
            outcome: UsageOutcome::Ok,
            tokens: TokenUsage::new(2, 3),
            estimated: false,
            cost_micros: cost,
            priced: true,
            latency_ms: 1,
            started_at: aigw_domain::time::now(),
            team_id: None,
            member_id: None,
        }
    }

    #[test]
    fn calls_from_many_threads_are_summed_exactly_per_row() {
        for keep in [KeepRecords::None, KeepRecords::Database] {
            let aggregate = Arc::new(Aggregate::new(keep, 1 << 20));
            let threads: Vec<_> = (0..8)
                .map(|t| {
                    let aggregate = aggregate.clone();
                    std::thread::spawn(move || {
                        for i in 0..1000u64 {
                            let model = if i % 2 == 0 { "a" } else { "b" };
                            aggregate.add(record(&format!("k{}", t % 3), model, i), i == 7, None);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let taken = aggregate.take();
            assert_eq!(taken.flush.calls(), 8000, "{keep:?}");
            assert_eq!(taken.flush.rollups.len(), 6, "3 keys × 2 models");
            assert_eq!(taken.flush.tracked.len(), 8);
            let cost: u64 = taken.flush.rollups.iter().map(|r| r.sums.cost_micros).sum::<u64>()
                + taken.flush.tracked.iter().map(|r| r.cost_micros).sum::<u64>();
            assert_eq!(cost, 8 * (0..1000).sum::<u64>());
            let kept = if keep == KeepRecords::Database { 7992 } else { 0 };
            assert_eq!(taken.flush.records.len(), kept);
            assert!(taken.flush.rollups.windows(2).all(|w| w[0].key < w[1].key), "ordered");
            assert!(aggregate.take().flush.is_empty(), "a take empties the shards");
        }
    }

    #[test]
    fn records_past_the_capacity_are_dropped_but_still_counted() {
        let aggregate = Aggregate::new(KeepRecords::Database, 0);
        let share = aggregate.records_per_shard;
        let asks: Vec<Added> =
            (0..share + 10).map(|_| aggregate.add(record("k", "m", 1), false, None)).collect();
        let early = EARLY_FLUSH_RECORDS.min(share);
        assert_eq!(asks[early - 1], Added::FlushSoon, "a batch's worth asks for a flush");
        assert_eq!(asks[early - 2], Added::Kept);
        assert!(aggregate.wants_flush());
        assert_eq!(asks[share + 5], Added::FlushSoon);
        let taken = aggregate.take();
        assert_eq!(taken.flush.records.len(), share);
        assert_eq!(taken.dropped, 10);
        assert_eq!(taken.flush.calls(), share as u64 + 10, "the sums count every call");
    }
}
