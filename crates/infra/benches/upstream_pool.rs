//! Upstream calls as aigw's chat route sends them: a 300-byte JSON POST answered with a
//! 500-byte JSON body over HTTP/1.1 keep-alive, to a hyper server on 127.0.0.1 (a random
//! port) started here, on a multi-thread runtime of 2 threads of its own.
//!
//! The callers are shaped like actix workers: `threads/N` is N OS threads, each running a
//! current-thread runtime with a `LocalSet`, each with 16 calls in flight at once (16 local
//! tasks calling back to back), sharing one client. Two figures per case:
//!
//! - `wall`: wall time per call of all threads together (the reciprocal of the calls a
//!   second); it includes the server's work on the same cores and whatever else runs there;
//! - `client_cpu`: the CPU time of the calling threads per call (Linux:
//!   `/proc/thread-self/schedstat`), which is every bit of the client's work (hyper-util and
//!   reqwest run their connections' tasks on the thread that opened them) and none of the
//!   server's, so less disturbed by other load.
//!
//! Clients, each sending the request the way aigw would with it (the request built as an
//! `http::Request<Bytes>` with the absolute URI, the answer read to its end as a stream):
//!
//! - `per_thread_pool`: `aigw_infra::upstream_pool`, hyper `client::conn::http1` connections
//!   pooled per thread, as aigw's direct calls use it;
//! - `hyper_util_client`: hyper-util's legacy pooled `Client` on the same hyper-rustls
//!   connector (connect timeout, `TCP_NODELAY`);
//! - `reqwest`: `reqwest::Client` as aigw builds it (no proxy, no redirects).
//!
//! `cargo bench -p aigw-infra --bench upstream_pool`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use aigw_infra::upstream_pool::{ConnectionPool, Connector};
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Calls in flight on each thread at once.
const IN_FLIGHT: u64 = 16;

/// A chat completion request of about 300 bytes.
fn request_body() -> Bytes {
    let mut body = br#"{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"Summarise the following in one sentence: "#.to_vec();
    body.resize(280, b'x');
    body.extend_from_slice(br#""}],"max_tokens":64}"#);
    Bytes::from(body)
}

/// A chat completion answer of about 500 bytes.
fn answer_body() -> Bytes {
    let mut body = br#"{"id":"chatcmpl-019a0000000070008000000000000000","object":"chat.completion","created":1764200000,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"message":{"role":"assistant","content":"#.to_vec();
    body.push(b'"');
    body.resize(400, b'y');
    body.extend_from_slice(br#"","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":61,"completion_tokens":40,"total_tokens":101},"system_fingerprint":"fp_0000"}"#);
    Bytes::from(body)
}

/// Starts the upstream: each request's body read to its end, then the fixed answer.
fn start_upstream() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = answer_body();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                stream.set_nodelay(true).unwrap();
                let answer = answer.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let answer = answer.clone();
                        async move {
                            let body = http_body_util::BodyExt::collect(
                                request.into_body() as hyper::body::Incoming
                            )
                            .await?
                            .to_bytes();
                            assert!(body.len() > 200);
                            let mut response = http::Response::new(Full::new(answer));
                            response.headers_mut().insert(
                                http::header::CONTENT_TYPE,
                                http::HeaderValue::from_static("application/json"),
                            );
                            Ok::<_, hyper::Error>(response)
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
    });
    addr
}

/// The connector of aigw's direct calls.
fn connector() -> Connector {
    aigw_infra::upstream_pool::connector(Duration::from_secs(5)).unwrap()
}

/// One of the clients measured, shared by every calling thread.
#[derive(Clone)]
enum Client {
    PerThreadPool { pool: Arc<ConnectionPool>, origin_form: http::Uri, host: http::HeaderValue },
    HyperUtil(hyper_util::client::legacy::Client<Connector, Full<Bytes>>),
    Reqwest(reqwest::Client),
}

impl Client {
    fn new(name: &str, url: &http::Uri) -> Self {
        match name {
            "per_thread_pool" => Client::PerThreadPool {
                pool: Arc::new(ConnectionPool::new(connector(), 1)),
                origin_form: url.path_and_query().unwrap().as_str().parse().unwrap(),
                host: http::HeaderValue::from_str(url.authority().unwrap().as_str()).unwrap(),
            },
            "hyper_util_client" => Client::HyperUtil(
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .pool_timer(hyper_util::rt::TokioTimer::new())
                    .pool_idle_timeout(Duration::from_secs(90))
                    .pool_max_idle_per_host(64)
                    .build(connector()),
            ),
            "reqwest" => Client::Reqwest(
                reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .build()
                    .unwrap(),
            ),
            other => unreachable!("{other}"),
        }
    }

    /// Sends one call and reads its answer to the end; answers the answer's length.
    async fn call(&self, url: &http::Uri, body: &Bytes) -> usize {
        let mut request = http::Request::new(body.clone());
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = url.clone();
        let map = request.headers_mut();
        map.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        map.insert(http::header::ACCEPT, http::HeaderValue::from_static("application/json"));
        map.insert(http::header::USER_AGENT, http::HeaderValue::from_static("aigw/0.1.0"));
        map.insert(http::header::AUTHORIZATION, http::HeaderValue::from_static("Bearer sk-bench"));
        let mut read = 0;
        match self {
            Client::PerThreadPool { pool, origin_form, host } => {
                let (mut parts, body) = request.into_parts();
                parts.uri = origin_form.clone();
                parts.headers.insert(http::header::HOST, host.clone());
                let request = http::Request::from_parts(parts, Full::new(body));
                let (head, mut body) = pool.send(0, url, request).await.unwrap();
                assert_eq!(head.status, 200);
                while let Some(chunk) = body.next().await {
                    read += chunk.unwrap().len();
                }
            }
            Client::HyperUtil(client) => {
                let response = client.request(request.map(Full::new)).await.unwrap();
                assert_eq!(response.status(), 200);
                let mut body = response.into_body();
                while let Some(frame) = body.frame().await {
                    if let Ok(data) = frame.unwrap().into_data() {
                        read += data.len();
                    }
                }
            }
            Client::Reqwest(client) => {
                let request = reqwest::Request::try_from(request).unwrap();
                let response = client.execute(request).await.unwrap();
                assert_eq!(response.status(), 200);
                let mut body = response.bytes_stream();
                while let Some(chunk) = body.next().await {
                    read += chunk.unwrap().len();
                }
            }
        }
        read
    }
}

/// A number of calls to make, and where to say that they are done (with the thread's CPU
/// time for them, in ns).
type Job = (u64, std::sync::mpsc::Sender<u64>);

/// This thread's CPU time so far, in ns (Linux: the first field of its `schedstat`).
fn thread_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    stat.split_whitespace().next().unwrap().parse().unwrap()
}

/// OS threads, each with a current-thread runtime and a `LocalSet` (as an actix worker),
/// calling through one shared client.
struct Callers {
    jobs: Vec<tokio::sync::mpsc::UnboundedSender<Job>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Callers {
    fn start(client: &Client, url: &http::Uri, threads: usize) -> Self {
        let body = request_body();
        let answer = answer_body().len();
        let mut callers = Callers { jobs: Vec::new(), threads: Vec::new() };
        for _ in 0..threads {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            callers.jobs.push(tx);
            callers.threads.push(std::thread::spawn(move || {
                let runtime =
                    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, async move {
                    while let Some((calls, done)) = rx.recv().await {
                        let cpu = thread_cpu_ns();
                        let tasks: Vec<_> = (0..IN_FLIGHT)
                            .map(|i| {
                                let share = calls / IN_FLIGHT + u64::from(i < calls % IN_FLIGHT);
                                let (client, url, body) =
                                    (client.clone(), url.clone(), body.clone());
                                tokio::task::spawn_local(async move {
                                    for _ in 0..share {
                                        assert_eq!(client.call(&url, &body).await, answer);
                                    }
                                })
                            })
                            .collect();
                        for task in tasks {
                            task.await.unwrap();
                        }
                        done.send(thread_cpu_ns() - cpu).unwrap();
                    }
                });
            }));
        }
        callers
    }

    /// Wall time of `calls` calls, shared out between the threads, and the CPU time the
    /// threads spent on them together.
    fn run(&self, calls: u64) -> (Duration, Duration) {
        let (done, finished) = std::sync::mpsc::channel();
        let threads = self.jobs.len() as u64;
        let began = Instant::now();
        for (i, jobs) in self.jobs.iter().enumerate() {
            let share = calls / threads + u64::from((i as u64) < calls % threads);
            jobs.send((share, done.clone())).unwrap();
        }
        let mut cpu = 0;
        for _ in 0..threads {
            cpu += finished.recv().unwrap();
        }
        (began.elapsed(), Duration::from_nanos(cpu))
    }

    fn stop(self) {
        drop(self.jobs);
        for thread in self.threads {
            thread.join().unwrap();
        }
    }
}

fn upstream_calls(c: &mut Criterion) {
    let addr = start_upstream();
    let url: http::Uri = format!("http://{addr}/v1/chat/completions").parse().unwrap();
    for threads in [1, 2, 4] {
        for name in ["per_thread_pool", "hyper_util_client", "reqwest"] {
            let client = Client::new(name, &url);
            let callers = Callers::start(&client, &url, threads);
            for (measure, cpu) in [("wall", false), ("client_cpu", true)] {
                let mut group = c.benchmark_group(measure);
                group.throughput(Throughput::Elements(1));
                group.sample_size(10);
                group.warm_up_time(Duration::from_secs(1));
                group.measurement_time(Duration::from_secs(3));
                group.bench_function(format!("{name}/threads/{threads}"), |b| {
                    b.iter_custom(|calls| {
                        let (wall, cpu_time) = callers.run(calls);
                        if cpu {
                            cpu_time
                        } else {
                            wall
                        }
                    });
                });
                group.finish();
            }
            callers.stop();
        }
    }
}

criterion_group!(benches, upstream_calls);
criterion_main!(benches);
