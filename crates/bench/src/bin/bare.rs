//! The references of `scripts/bench.sh` built on aigw's own stack, nothing else:
//!
//! - `GET /`: actix-web answering a small JSON body, on the same number of workers as aigw
//!   (the number of CPUs it may run on, or WORKERS when above 0);
//! - `POST /v1/chat/completions`, when UPSTREAM (an `http://host:port` origin) is given: the
//!   least a proxy on aigw's stack does. The body is read whole and sent to
//!   `UPSTREAM/v1/chat/completions` through aigw's upstream client (`aigw_infra`'s per-thread
//!   connection pool and connector), and the answer's body is read whole and returned with
//!   its status. No authentication, no JSON, no log, no metrics: the floor that aigw's own
//!   work per call is measured above.
//!
//! ```text
//! bare 127.0.0.1:PORT [WORKERS [UPSTREAM]]
//! ```

use actix_web::http::StatusCode;
use actix_web::{web, App, HttpResponse, HttpServer};
use aigw_infra::upstream_pool::{connector, ConnectionPool};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http_body_util::Full;
use std::sync::Arc;
use std::time::Duration;

async fn me() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(
        r#"{"success":true,"data":{"user":{"id":"01a2b3c4-0000-7000-8000-000000000000","email":"bench@example.com","name":"bench","role":"user","created_at":"2026-11-22T00:00:00Z"}}}"#,
    )
}

/// Where the proxy route sends its calls.
struct Upstream {
    pool: Arc<ConnectionPool>,
    /// The upstream's origin, which its connections go to.
    origin: http::Uri,
    /// The request's origin-form target.
    path: http::Uri,
    /// The upstream's `Host`.
    host: http::HeaderValue,
}

impl Upstream {
    fn new(origin: &str) -> std::io::Result<Self> {
        let origin: http::Uri = origin.parse().map_err(std::io::Error::other)?;
        let authority = origin
            .authority()
            .ok_or_else(|| std::io::Error::other("UPSTREAM: http://host:port"))?;
        Ok(Self {
            pool: Arc::new(ConnectionPool::new(
                connector(Duration::from_secs(5)).map_err(std::io::Error::other)?,
                1,
            )),
            host: http::HeaderValue::from_str(authority.as_str()).map_err(std::io::Error::other)?,
            path: http::Uri::from_static("/v1/chat/completions"),
            origin,
        })
    }
}

/// Sends `body` upstream and answers what came back (502 when it could not be sent or read).
async fn proxy(upstream: web::Data<Upstream>, body: Bytes) -> HttpResponse {
    let request = http::Request::post(upstream.path.clone())
        .header(http::header::HOST, upstream.host.clone())
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body));
    let Ok(request) = request else {
        return HttpResponse::InternalServerError().finish();
    };
    let Ok((head, mut answer)) = upstream.pool.send(0, &upstream.origin, request).await else {
        return HttpResponse::BadGateway().finish();
    };
    let mut whole = BytesMut::new();
    while let Some(chunk) = answer.next().await {
        match chunk {
            Ok(chunk) => whole.extend_from_slice(&chunk),
            Err(_) => return HttpResponse::BadGateway().finish(),
        }
    }
    let status = StatusCode::from_u16(head.status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    HttpResponse::build(status).content_type("application/json").body(whole.freeze())
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:8090".to_owned());
    let workers = args
        .next()
        .map(|w| w.parse::<usize>().map_err(|_| std::io::Error::other("WORKERS: a number")))
        .transpose()?
        .filter(|&w| w > 0);
    let upstream = args.next().map(|u| Upstream::new(&u)).transpose()?.map(web::Data::new);
    let mut server = HttpServer::new(move || {
        let app = App::new().route("/", web::get().to(me));
        match &upstream {
            Some(upstream) => {
                app.app_data(upstream.clone()).route("/v1/chat/completions", web::post().to(proxy))
            }
            None => app,
        }
    });
    if let Some(workers) = workers {
        server = server.workers(workers);
    }
    server.bind(listen)?.run().await
}
