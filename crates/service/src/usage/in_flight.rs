//! Calls in flight: every metered call is known to the database within one flush interval
//! of its start, with what it reserved, until its usage record is written (docs/budgets.md
//! "Calls in flight").
//!
//! - **On the request path**: a call enters the node's [`InFlight`] book when it is admitted
//!   and leaves it when its record is made (a map insert and remove, sharded: no lock shared
//!   by every worker).
//! - **Every `usage.flush_interval_ms`** the writer task writes the calls of the book not yet
//!   written to `calls_in_flight`, and deletes this node's rows whose usage record is in the
//!   ledger. A call shorter than the interval is usually never written, and a tick with
//!   nothing new and no row of this node left touches no database.
//! - **What it is for**: a budget counter opened while calls run (a PATCH of the period, a
//!   Redis restart, an expired counter) starts at the ledger's spend plus these rows'
//!   reservations (`aigw_persistence::budgets::committed_since`), so it never forgets a
//!   running call; and a call cut by a crash is billed: every
//!   [`RECOVERY_EVERY`], each node bills the rows of nodes that stopped reporting to the
//!   change feed (`usage.interrupted_after_secs`) at their reservation, as records with
//!   outcome `interrupted`, then deletes them. The ledger is unique by request id: a record
//!   written meanwhile by its own node wins, and two nodes recovering at once (or one retrying
//!   after a failure between the two writes) bill a call once.
//! - **At shutdown** (after the recorder has written or spooled every record) the node deletes
//!   its rows: their records are durable in the ledger or the spool file.

use crate::db::Db;
use aigw_domain::usage::{TokenUsage, UsageOutcome, UsageRecord};
use aigw_persistence::in_flight::{self, CallInFlight};
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How often a node looks for calls of stopped nodes to bill.
pub const RECOVERY_EVERY: Duration = Duration::from_secs(2);

/// Most calls of stopped nodes billed in one transaction.
const RECOVERY_BATCH: i64 = 500;

/// One call of the book and whether its row was written.
#[derive(Debug)]
struct Entry {
    call: CallInFlight,
    written: bool,
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
    /// Rows this node wrote and has not deleted yet: while 0 and nothing is new, a tick
    /// touches no database (no write lock taken on SQLite by an idle node).
    outstanding: AtomicU64,
}

/// A call's place in the book: it leaves the book when this is dropped (its record made).
#[derive(Debug)]
pub struct InFlightTicket {
    book: Arc<Book>,
    id: u64,
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
        Self {
            inner: Arc::new(Book {
                node_id,
                calls: DashMap::new(),
                next: AtomicU64::new(0),
                outstanding: AtomicU64::new(0),
            }),
        }
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
            streamed: facts.streamed,
            reserved_micros: to_i64(reserved_micros),
            priced,
            prompt_tokens: to_i64(worst.prompt_tokens),
            completion_tokens: to_i64(worst.completion_tokens),
            started_at: facts.started_at,
            team_id: facts.team_id.map(str::to_owned),
            member_id: facts.member_id.map(str::to_owned),
        };
        self.inner.calls.insert(id, Entry { call, written: false });
        InFlightTicket { book: self.inner.clone(), id }
    }

    /// The calls not written yet, with their ids in the book.
    fn unwritten(&self) -> (Vec<u64>, Vec<CallInFlight>) {
        let mut ids = Vec::new();
        let mut calls = Vec::new();
        for entry in self.inner.calls.iter().filter(|e| !e.written) {
            ids.push(*entry.key());
            let mut call = entry.call.clone();
            call.node_id.clone_from(&self.inner.node_id);
            calls.push(call);
        }
        (ids, calls)
    }

    /// Marks the calls `ids` written (those still in the book).
    fn mark_written(&self, ids: &[u64]) {
        for id in ids {
            if let Some(mut entry) = self.inner.calls.get_mut(id) {
                entry.written = true;
            }
        }
    }

    /// Starts the writer task (see the module docs): every `interval` it writes the book's new
    /// calls and deletes this node's recorded ones; every [`RECOVERY_EVERY`] it bills the
    /// calls of nodes silent for `stopped_after`. Must run on a tokio runtime.
    pub fn spawn_writer(
        &self,
        db: Db,
        interval: Duration,
        stopped_after: Duration,
    ) -> JoinHandle<()> {
        let book = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval.max(Duration::from_millis(10)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut recovered_at = Instant::now() - RECOVERY_EVERY;
            loop {
                tick.tick().await;
                book.write(&db).await;
                if recovered_at.elapsed() >= RECOVERY_EVERY {
                    recovered_at = Instant::now();
                    book.bill_stopped_nodes(&db, stopped_after).await;
                }
            }
        })
    }

    /// Writes the book's new calls and deletes this node's rows whose record is in the
    /// ledger. A failure is logged and retried at the next tick.
    async fn write(&self, db: &Db) {
        let (ids, calls) = self.unwritten();
        let outstanding = self.inner.outstanding.load(Ordering::Acquire);
        if calls.is_empty() && outstanding == 0 {
            return;
        }
        let node = self.inner.node_id.clone();
        let written = db
            .run(move |conn| {
                let written = in_flight::insert(conn, &calls)?;
                Ok((written, in_flight::forget_recorded(conn, &node)?))
            })
            .await;
        match written {
            Ok((written, forgotten)) => {
                self.mark_written(&ids);
                let left = (outstanding + written as u64).saturating_sub(forgotten as u64);
                self.inner.outstanding.store(left, Ordering::Release);
            }
            Err(e) => tracing::debug!(error = %e, "writing the calls in flight failed; retrying"),
        }
    }

    /// Bills the calls of nodes that stopped reporting for `stopped_after` (see the module
    /// docs); returns how many were billed.
    async fn bill_stopped_nodes(&self, db: &Db, stopped_after: Duration) -> usize {
        let me = self.inner.node_id.clone();
        let live_since = aigw_domain::time::now()
            - chrono::Duration::from_std(stopped_after).unwrap_or(chrono::Duration::seconds(30));
        let billed = db
            .run(move |conn| {
                let calls = in_flight::of_stopped_nodes(conn, &me, live_since, RECOVERY_BATCH)?;
                if calls.is_empty() {
                    return Ok((0, 0));
                }
                let records: Vec<UsageRecord> = calls.iter().map(interrupted_record).collect();
                let ids: Vec<String> = calls.into_iter().map(|c| c.request_id).collect();
                // The records first, in their own transaction; then the rows. A reader in
                // between counts a call twice (refusing early at worst), and a failure in
                // between bills nothing twice: the ledger is unique by request id.
                let inserted = aigw_persistence::usage::insert_batch(conn, &records)?;
                in_flight::forget(conn, &ids)?;
                Ok((ids.len(), inserted))
            })
            .await;
        match billed {
            Ok((0, _)) => 0,
            Ok((calls, inserted)) => {
                tracing::warn!(
                    calls,
                    billed = inserted,
                    "calls cut by a stopped node billed at their reservation (outcome interrupted)"
                );
                calls
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
/// tokens, outcome `interrupted`, estimated.
fn interrupted_record(call: &CallInFlight) -> UsageRecord {
    let to_u64 = |n: i64| u64::try_from(n).unwrap_or(0);
    UsageRecord {
        request_id: call.request_id.clone(),
        api_key_id: call.api_key_id.clone(),
        user_id: call.user_id.clone(),
        model: call.model.clone(),
        provider: call.provider.clone(),
        streamed: call.streamed,
        outcome: UsageOutcome::Interrupted,
        tokens: TokenUsage::new(to_u64(call.prompt_tokens), to_u64(call.completion_tokens)),
        estimated: true,
        cost_micros: to_u64(call.reserved_micros),
        priced: call.priced,
        latency_ms: 0,
        started_at: call.started_at,
        team_id: call.team_id.clone(),
        member_id: call.member_id.clone(),
    }
}
