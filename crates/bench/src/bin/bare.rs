//! The reference of `scripts/bench.sh`: actix-web answering `GET /` with a small JSON body,
//! on the same number of workers as aigw (the number of CPUs it may run on, or WORKERS),
//! nothing else.
//!
//! ```text
//! bare 127.0.0.1:PORT [WORKERS]
//! ```

use actix_web::{web, App, HttpResponse, HttpServer};

async fn me() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(
        r#"{"success":true,"data":{"user":{"id":"01a2b3c4-0000-7000-8000-000000000000","email":"bench@example.com","name":"bench","role":"user","created_at":"2026-11-22T00:00:00Z"}}}"#,
    )
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:8090".to_owned());
    let mut server = HttpServer::new(|| App::new().route("/", web::get().to(me)));
    if let Some(workers) = args.next() {
        let workers: usize =
            workers.parse().map_err(|_| std::io::Error::other("WORKERS: a number"))?;
        server = server.workers(workers);
    }
    server.bind(listen)?.run().await
}
