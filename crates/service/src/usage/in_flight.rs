//! Calls in flight: every metered call is known to the database within one flush interval
//! of its start, with what it reserved, until its usage is written (docs/budgets.md
//! "Calls in flight").
//!
//! - **On the request path**: a call enters the node's [`InFlight`] book when it is admitted
//!   and leaves it when its record is made (a map insert and remove, sharded: no lock shared
//!   by every worker). Leaving tells whether the call may have a row: such a call goes into
//!   its flush one by one ([`aigw_domain::ledger::UsageFlush::tracked`]), and the flush
//!   deletes its row in the transaction that counts it.
//! - **Every `usage.flush_interval_ms`** the writer task writes the calls of the book not yet
//!   written to `calls_in_flight`. A call shorter than the interval is usually never written,
//!   and a tick with nothing new touches no database. The writer takes turns with the
//!   recorder's flushes (the recorder's ledger lock): a flush never runs while a row of a
//!   call it counts is being written.
//! - **What it is for**: a budget counter opened while calls run (a PATCH of the period, a
//!   Redis restart, an expired counter) starts at the ledger's spend plus these rows'
//!   reservations (`aigw_persistence::budgets::committed_since`), so it never forgets a
//!   running call; and a call cut by a crash is billed: every [`RECOVERY_EVERY`], each node
//!   bills the rows of nodes that stopped reporting to the change feed
//!   (`usage.interrupted_after_secs`) at their reservation, with outcome `interrupted`, and
//!   marks them billed in the same transaction. A node that was only cut off and records such
//!   a call later finds its row marked and does not count it again; two nodes recovering at
//!   once bill a call once (the mark is taken by one of them).
//! - **At shutdown** (after the recorder has written or spooled everything) the node deletes
//!   its rows of calls that ended: their usage is durable in the ledger or the spool file.

use crate::db::Db;
use aigw_domain::usage::{Endpoint, TokenUsage, UsageOutcome, UsageRecord};
use aigw_persistence::in_flight::{self, CallInFlight};
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Settings of the writer task ([`InFlight::spawn_writer`]).
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Time between two writes of the book (`usage.flush_interval_ms`).
    pub interval: Duration,
    /// Silence on the change feed after which a node counts as stopped
    /// (`usage.interrupted_after_secs`).
    pub stopped_after: Duration,
    /// Whether the per-request records of billed calls are kept (`usage.request_records`).
    pub keep_records: bool,
    /// The lock the ledger's writes take (the recorder's).
    pub ledger_lock: Arc<tokio::sync::Mutex<()>>,
}

/// How often a node looks for calls of stopped nodes to bill.
pub const RECOVERY_EVERY: Duration = Duration::from_secs(2);

/// Most calls of stopped nodes billed in one transaction.
const RECOVERY_BATCH: i64 = 500;

/// Whether a call of the book has a row in `calls_in_flight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    /// None.
    Unwritten,
    /// Being written, or written: the call may have one.
    Written,
}

/// One call of the book and whether it has a row.
#[derive(Debug)]
struct Entry {
    call: CallInFlight,
    row: Row,
}

/// The calls in flight of this node (cheap to clone; clones share the book).
#[derive(Debug, Clone)]
pub struct InFlight {
    inner: Arc<Book>,
}

#[derive(Debug)]
struct Book {
    node_id: String,
    calls: DashMap<u64, Entry>,
    next: AtomicU64,
}

/// A call's place in the book: it leaves the book when this is dropped (its record made).
#[derive(Debug)]
pub struct InFlightTicket {
    book: Arc<Book>,
    id: u64,
}

impl InFlightTicket {
    /// The call leaves the book (its record is made); true when it may have a row in
    /// `calls_in_flight`.
    pub(crate) fn leave(self) -> bool {
        self.book.calls.remove(&self.id).is_some_and(|(_, entry)| entry.row == Row::Written)
    }
}

impl Drop for InFlightTicket {
    fn drop(&mut self) {
        self.book.calls.remove(&self.id);
    }
}

/// What a call in flight is, as the meter knows it.
#[derive(Debug, Clone)]
pub struct CallFacts<'a> {
    /// The call's request id.
    pub request_id: &'a str,
    /// The API key that made it.
    pub api_key_id: &'a str,
    /// The key's owner.
    pub user_id: &'a str,
    /// The model asked for.
    pub model: &'a str,
    /// The provider serving it.
    pub provider: &'a str,
    /// The endpoint called.
    pub endpoint: Endpoint,
    /// Whether it streams.
    pub streamed: bool,
    /// When it started, UTC.
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// The team it counts against, if any.
    pub team_id: Option<&'a str>,
    /// The member whose team budget it counts against, if any.
    pub member_id: Option<&'a str>,
}

impl InFlight {
    /// An empty book of node `node_id` (its id in the change feed).
    pub fn new(node_id: String) -> Self {
        Self { inner: Arc::new(Book { node_id, calls: DashMap::new(), next: AtomicU64::new(0) }) }
    }

    /// Enters a call reserving `reserved_micros` (its worst case: what it is billed if a
    /// crash cuts it) for `worst` tokens.
    pub fn enter(
        &self,
        facts: &CallFacts<'_>,
        reserved_micros: u64,
        priced: bool,
        worst: TokenUsage,
    ) -> InFlightTicket {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let call = CallInFlight {
            request_id: facts.request_id.to_owned(),
            node_id: String::new(),
            api_key_id: facts.api_key_id.to_owned(),
            user_id: facts.user_id.to_owned(),
            model: facts.model.to_owned(),
            provider: facts.provider.to_owned(),
            endpoint: facts.endpoint,
            streamed: facts.streamed,
            reserved_micros: to_i64(reserved_micros),
            priced,
            prompt_tokens: to_i64(worst.prompt_tokens),
            completion_tokens: to_i64(worst.completion_tokens),
            started_at: facts.started_at,
            team_id: facts.team_id.map(str::to_owned),
            member_id: facts.member_id.map(str::to_owned),
        };
        self.inner.calls.insert(id, Entry { call, row: Row::Unwritten });
        InFlightTicket { book: self.inner.clone(), id }
    }

    /// The calls without a row yet, marked as written before their row is (a call that leaves
    /// the book meanwhile knows it may have one), with their ids in the book.
    fn take_unwritten(&self) -> (Vec<u64>, Vec<CallInFlight>) {
        let mut ids = Vec::new();
        let mut calls = Vec::new();
        for mut entry in self.inner.calls.iter_mut().filter(|e| e.row == Row::Unwritten) {
            entry.row = Row::Written;
            ids.push(*entry.key());
            let mut call = entry.call.clone();
            call.node_id.clone_from(&self.inner.node_id);
            calls.push(call);
        }
        (ids, calls)
    }

    /// Marks the calls `ids` unwritten again (those still in the book): their write failed.
    fn unmark(&self, ids: &[u64]) {
        for id in ids {
            if let Some(mut entry) = self.inner.calls.get_mut(id) {
                entry.row = Row::Unwritten;
            }
        }
    }

    /// Starts the writer task (see the module docs): every `interval` it writes the book's new
    /// calls, taking turns with the ledger's writes through `ledger_lock`; every
    /// [`RECOVERY_EVERY`] it bills the calls of nodes silent for `stopped_after`, keeping their
    /// per-request records when `keep_records`. Must run on a tokio runtime.
    pub fn spawn_writer(&self, db: Db, writer: WriterOptions) -> JoinHandle<()> {
        let book = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(writer.interval.max(Duration::from_millis(10)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut recovered_at = Instant::now() - RECOVERY_EVERY;
            loop {
                tick.tick().await;
                book.write(&db, &writer.ledger_lock).await;
                if recovered_at.elapsed() >= RECOVERY_EVERY {
                    recovered_at = Instant::now();
                    book.bill_stopped_nodes(&db, &writer).await;
                }
            }
        })
    }

    /// Writes the book's calls that have no row yet. A failure is logged and retried at the
    /// next tick.
    async fn write(&self, db: &Db, ledger_lock: &tokio::sync::Mutex<()>) {
        let _turn = ledger_lock.lock().await;
        let (ids, calls) = self.take_unwritten();
        if calls.is_empty() {
            return;
        }
        let written = db.run(move |conn| Ok(in_flight::insert(conn, &calls)?)).await;
        if let Err(e) = written {
            // A call that left the book meanwhile believes it may have a row: its flush finds
            // none and counts it, which is right.
            self.unmark(&ids);
            tracing::debug!(error = %e, "writing the calls in flight failed; retrying");
        }
    }

    /// Bills the calls of nodes that stopped reporting for `stopped_after` (see the module
    /// docs); returns how many were billed.
    async fn bill_stopped_nodes(&self, db: &Db, writer: &WriterOptions) -> u64 {
        let me = self.inner.node_id.clone();
        let live_since = aigw_domain::time::now()
            - chrono::Duration::from_std(writer.stopped_after)
                .unwrap_or(chrono::Duration::seconds(30));
        let keep_records = writer.keep_records;
        let _turn = writer.ledger_lock.lock().await;
        let billed = db
            .run(move |conn| {
                let calls = in_flight::of_stopped_nodes(conn, &me, live_since, RECOVERY_BATCH)?;
                if calls.is_empty() {
                    return Ok((0, 0));
                }
                let records: Vec<UsageRecord> = calls.iter().map(interrupted_record).collect();
                let billed =
                    aigw_persistence::usage::bill_interrupted(conn, &records, keep_records)?;
                Ok((calls.len(), billed))
            })
            .await;
        match billed {
            Ok((0, _)) => 0,
            Ok((calls, billed)) => {
                tracing::warn!(
                    calls,
                    billed,
                    "calls cut by a stopped node billed at their reservation (outcome interrupted)"
                );
                billed
            }
            Err(e) => {
                tracing::debug!(error = %e, "billing the calls of stopped nodes failed; retrying");
                0
            }
        }
    }

    /// Deletes this node's rows at shutdown, after the recorder has written or spooled every
    /// record: every call that left the book has a durable record. Calls still in the book
    /// keep their rows (billed as interrupted once the node is gone).
    pub async fn shutdown(&self, db: &Db) {
        let open: std::collections::HashSet<String> =
            self.inner.calls.iter().map(|e| e.call.request_id.clone()).collect();
        let node = self.inner.node_id.clone();
        let result = db
            .run(move |conn| {
                let written = in_flight::request_ids_of_node(conn, &node)?;
                let done: Vec<String> =
                    written.into_iter().filter(|id| !open.contains(id)).collect();
                Ok(in_flight::forget(conn, &done)?)
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "deleting this node's calls in flight at shutdown failed");
        }
    }
}

/// The usage record of a call cut by a crash: billed at its reservation, its worst-case
/// tokens, outcome `interrupted`, estimated, under the endpoint it was made to.
fn interrupted_record(call: &CallInFlight) -> UsageRecord {
    let to_u64 = |n: i64| u64::try_from(n).unwrap_or(0);
    UsageRecord {
        request_id: call.request_id.clone(),
        api_key_id: call.api_key_id.as_str().into(),
        user_id: call.user_id.as_str().into(),
        model: call.model.clone(),
        provider: call.provider.clone(),
        served_model: None,
        attempts: 1,
        endpoint: call.endpoint,
        streamed: call.streamed,
        outcome: UsageOutcome::Interrupted,
        tokens: TokenUsage::new(to_u64(call.prompt_tokens), to_u64(call.completion_tokens)),
        estimated: true,
        cost_micros: to_u64(call.reserved_micros),
        priced: call.priced,
        latency_ms: 0,
        started_at: call.started_at,
        team_id: call.team_id.as_deref().map(Into::into),
        member_id: call.member_id.as_deref().map(Into::into),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_call_is_billed_under_its_endpoint_at_its_reservation() {
        let call = CallInFlight {
            request_id: "r".into(),
            node_id: "n".into(),
            api_key_id: "k".into(),
            user_id: "u".into(),
            model: "m".into(),
            provider: "p".into(),
            endpoint: Endpoint::Embeddings,
            streamed: false,
            reserved_micros: 42,
            priced: true,
            prompt_tokens: 10,
            completion_tokens: 0,
            started_at: aigw_domain::time::now(),
            team_id: None,
            member_id: None,
        };
        let record = interrupted_record(&call);
        assert_eq!(record.endpoint, Endpoint::Embeddings);
        assert_eq!((record.outcome, record.cost_micros), (UsageOutcome::Interrupted, 42));
        assert_eq!(record.tokens, TokenUsage::new(10, 0));
    }
}
