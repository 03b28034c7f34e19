//! An open-loop load generator at a fixed request rate (what wrk2 does; wrk2 is not in
//! Debian). Request `i` is sent at `start + i / rate` whether or not earlier answers have come
//! back, so a slow server cannot slow the generator down and hide its queueing (coordinated
//! omission). Latency runs from the moment the request is handed to the HTTP client: measuring
//! from the due time instead would add the timer's overshoot (tokio's timers tick in
//! milliseconds), about 1 ms, to every sample.
//!
//! ```text
//! rate URL [--rate 1000] [--secs 5] [--warmup-secs 1] [--method GET] [--header 'k: v']... [--body JSON]
//! ```
//!
//! Prints one line: `requests=N errors=E p50_us=… p90_us=… p99_us=… max_us=…` (warm-up
//! requests excluded; a non-2xx answer or a transport error counts as an error).

use anyhow::Context;
use clap::Parser;
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
struct Args {
    /// Target URL.
    url: String,
    /// Requests per second.
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Measured seconds.
    #[arg(long, default_value_t = 5)]
    secs: u32,
    /// Seconds sent before measuring.
    #[arg(long, default_value_t = 1)]
    warmup_secs: u32,
    /// HTTP method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Request header `name: value` (repeatable).
    #[arg(long)]
    header: Vec<String>,
    /// Request body (sent with `content-type: application/json`).
    #[arg(long)]
    body: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let client =
        reqwest::Client::builder().tcp_nodelay(true).pool_max_idle_per_host(256).build()?;
    let method: reqwest::Method = args.method.parse().context("--method")?;
    let mut headers = reqwest::header::HeaderMap::new();
    for h in &args.header {
        let (name, value) = h.split_once(':').context("--header needs 'name: value'")?;
        headers.insert(
            reqwest::header::HeaderName::from_bytes(name.trim().as_bytes())?,
            reqwest::header::HeaderValue::from_str(value.trim())?,
        );
    }
    if args.body.is_some() {
        headers.insert(reqwest::header::CONTENT_TYPE, "application/json".parse()?);
    }
    let rate = args.rate.max(1);
    let warmup = u64::from(rate) * u64::from(args.warmup_secs);
    let total = warmup + u64::from(rate) * u64::from(args.secs.max(1));
    let step = Duration::from_secs(1) / rate;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Option<Duration>)>();
    let start = Instant::now() + Duration::from_millis(50);
    for i in 0..total {
        let due = start + step * u32::try_from(i).unwrap_or(u32::MAX);
        tokio::time::sleep_until(due.into()).await;
        let request = client
            .request(method.clone(), &args.url)
            .headers(headers.clone())
            .body(args.body.clone().unwrap_or_default());
        let tx = tx.clone();
        tokio::spawn(async move {
            let sent = Instant::now();
            let ok = match request.send().await {
                Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                _ => false,
            };
            let _ = tx.send((i, ok.then(|| sent.elapsed())));
        });
    }
    drop(tx);
    let (mut latencies, mut errors) = (Vec::new(), 0u64);
    while let Some((i, latency)) = rx.recv().await {
        if i < warmup {
            continue;
        }
        match latency {
            Some(l) => latencies.push(l),
            None => errors += 1,
        }
    }
    latencies.sort();
    let pct = |p: f64| -> u128 {
        if latencies.is_empty() {
            return 0;
        }
        let index = ((latencies.len() as f64 - 1.0) * p).round() as usize;
        latencies[index.min(latencies.len() - 1)].as_micros()
    };
    println!(
        "requests={} errors={errors} p50_us={} p90_us={} p99_us={} max_us={}",
        latencies.len(),
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(1.0)
    );
    Ok(())
}
