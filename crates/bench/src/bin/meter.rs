//! The metering capacity benchmark: how many calls a second the usage pipeline takes in and
//! makes durable, with no HTTP in front of it.
//!
//! `meter --database URL [--records database|none] [--secs N] [--threads N] [--keys N]
//! [--models N]`
//!
//! Generator threads (default: one per core) feed finished calls (records of `--keys` keys ×
//! `--models` models, round robin) to a [`Recorder`] as the gateway's meter does, for `--secs`
//! seconds, pausing while more than `--backlog` calls wait in memory (so the rate is what the
//! pipeline makes durable, not what it could buffer); then the recorder is shut down, which writes everything still in memory. The
//! rate reported is calls ÷ the time from the first call until the last is durable (in the
//! database or the spool file), and the ledger is checked: the sum of `requests` in the
//! rollups equals the calls fed, and with records on, so does the number of records. Prints
//! one line of JSON.

use aigw_domain::usage::{TokenUsage, UsageOutcome, UsageRecord};
use aigw_persistence::{DatabaseUrl, Pool, PoolOptions};
use aigw_service::db::Db;
use aigw_service::prices::PriceTable;
use aigw_service::usage::aggregate::KeepRecords;
use aigw_service::usage::recorder::{Recorder, RecorderOptions};
use anyhow::{bail, Context};
use clap::Parser;
use diesel::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The allocator aigw itself runs with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
struct Args {
    /// `sqlite://PATH` or `postgres://…` (a fresh database: the ledger is checked).
    #[arg(long)]
    database: String,
    /// `database` (one row per call) or `none` (sums only).
    #[arg(long, default_value = "none")]
    records: String,
    #[arg(long, default_value_t = 5)]
    secs: u64,
    /// Generator threads (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    #[arg(long, default_value_t = 1000)]
    keys: usize,
    #[arg(long, default_value_t = 5)]
    models: usize,
    /// Most calls waiting in memory for the next write (the running one aside) before a
    /// generator pauses: the generators feed as fast as the pipeline makes calls durable,
    /// never faster than it can hold them (with records on, a shard past its share of
    /// `usage.queue_capacity` would drop records).
    #[arg(long, default_value_t = 16_384)]
    backlog: u64,
}

/// Generator `t`: records calls of `keys` keys and `models` models into `recorder`, 256 at a
/// time, until `stop`; pauses while more than `backlog` wait for a write (records kept).
/// Returns how many it recorded.
fn generate(
    t: usize,
    recorder: &Recorder,
    stop: &AtomicBool,
    (keys, models): (usize, usize),
    backlog: u64,
    keep: KeepRecords,
) -> u64 {
    let key_ids: Vec<String> = (0..keys).map(|k| format!("bench-key-{k}")).collect();
    let model_names: Vec<String> = (0..models).map(|m| format!("model-{m}")).collect();
    // Request ids: unique, made from one UUID per thread and a counter.
    let base = uuid::Uuid::now_v7().simple().to_string();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if keep == KeepRecords::Database && {
            let h = recorder.health();
            h.queued - h.writing > backlog
        } {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let started_at = aigw_domain::time::now();
        for _ in 0..256 {
            let i = (n as usize).wrapping_mul(31).wrapping_add(t);
            recorder.record(UsageRecord {
                request_id: format!("{base}-{n:x}"),
                api_key_id: key_ids[i % keys].as_str().into(),
                user_id: "bench-user".into(),
                model: model_names[i % models].clone(),
                provider: "bench".to_owned(),
                served_model: None,
                attempts: 1,
                endpoint: aigw_domain::usage::Endpoint::Chat,
                streamed: false,
                outcome: UsageOutcome::Ok,
                tokens: TokenUsage::new(12, 30),
                estimated: false,
                cost_micros: 7,
                priced: true,
                latency_ms: 3,
                started_at,
                team_id: None,
                member_id: None,
            });
            n += 1;
        }
    }
    n
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let keep = match args.records.as_str() {
        "database" => KeepRecords::Database,
        "none" => KeepRecords::None,
        other => bail!("--records: database or none, not {other}"),
    };
    let url = DatabaseUrl::parse(&args.database).context("--database")?;
    let pool = Pool::new(&url, &PoolOptions::default()).context("opening the database")?;
    {
        let mut conn = pool.get().context("connecting")?;
        aigw_persistence::migrations::run_pending(&mut conn).context("migrating")?;
    }
    let spool = tempfile::tempdir()?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, std::num::NonZero::get));
    let (fed, elapsed, health) = runtime.block_on(async {
        let db = Db::new(pool.clone())?;
        let options = RecorderOptions {
            flush_interval: Duration::from_secs(1),
            queue_capacity: 65_536,
            keep_records: keep,
            request_log: false,
            spool_dir: spool.path().to_path_buf(),
            metrics: aigw_service::metrics::Metrics::default(),
            signals: aigw_service::spend_signal::SpendSignals::default(),
        };
        let recorder = Arc::new(Recorder::start(db, PriceTable::default(), options)?);
        let stop = Arc::new(AtomicBool::new(false));
        let fed = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let generators: Vec<_> = (0..threads)
            .map(|t| {
                let (recorder, stop, fed) = (recorder.clone(), stop.clone(), fed.clone());
                let (keys, models, backlog) = (args.keys.max(1), args.models.max(1), args.backlog);
                std::thread::spawn(move || {
                    let n = generate(t, &recorder, &stop, (keys, models), backlog, keep);
                    fed.fetch_add(n, Ordering::Relaxed);
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(args.secs)).await;
        stop.store(true, Ordering::Relaxed);
        for g in generators {
            let _ = g.join();
        }
        recorder.shutdown().await;
        let elapsed = start.elapsed();
        anyhow::Ok((fed.load(Ordering::Relaxed), elapsed, recorder.health()))
    })?;
    let mut conn = pool.get()?;
    let requests: Option<i64> = aigw_persistence::schema::usage_daily::table
        .select(diesel::dsl::sql::<diesel::sql_types::Nullable<diesel::sql_types::BigInt>>(
            "CAST(SUM(requests) AS BIGINT)",
        ))
        .first(&mut conn)?;
    let records = aigw_persistence::usage_records::count(&mut conn)?;
    let summed = u64::try_from(requests.unwrap_or(0)).unwrap_or(0);
    let durable = summed + health.spooled;
    let rate = fed as f64 / elapsed.as_secs_f64();
    println!(
        "{{\"records\":\"{}\",\"threads\":{threads},\"fed\":{fed},\"secs\":{:.3},\"per_sec\":{rate:.0},\"summed\":{summed},\"spooled\":{},\"rows\":{records},\"flushes\":{},\"dropped\":{}}}",
        args.records,
        elapsed.as_secs_f64(),
        health.spooled,
        health.flushes,
        health.records_dropped,
    );
    if durable != fed {
        bail!("the ledger counts {summed} calls (+{} spooled), {fed} were fed", health.spooled);
    }
    if keep == KeepRecords::Database && records + health.records_dropped + health.spooled < fed {
        bail!("{records} records for {fed} calls");
    }
    Ok(())
}
