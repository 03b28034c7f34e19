//! Probes for load balancers and the metrics scrape, outside `/api/v1`, without credentials.

use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use aigw_domain::time::format_timestamp;
use serde_json::json;

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "Alive")))]
pub(crate) async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Readiness: the database answers a read and commits a one-row write within 1.5 s (so a
/// hung, unreachable, full or read-only database makes the node unready within 2 s).
///
/// The body also reports the credential change feed: `change_feed.status` is `ok`, or `stale`
/// when the feed has not been read for more than `credential_cache.max_feed_lag_ms` (the node
/// then reads every credential from the database, so it stays ready), and `lag_ms` the
/// milliseconds since its last read. With `rate_limit.backend = "redis"` or
/// `gateway.key_counters = "redis"` the body also says whether Redis answers; a Redis outage
/// does not make the node unready (it then limits from its own memory and counts keys in the
/// database), so that losing Redis never takes every node out of the balancer. `usage`
/// reports the usage recorder (records queued, spooled, last write); a metering backlog never
/// makes the node unready either, since no record is lost meanwhile. After a stop signal, for
/// `server.drain_delay_secs`, it answers 503 `{"status": "draining"}` while the node still
/// serves every other request.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, description = "Ready: `{status, database, change_feed: {status, lag_ms}, usage: {status, queued, spooled, spool_bytes, last_flush_at, recorded, flushes, restarts, lost, records_dropped}}`, plus `redis` (`ok` or `unreachable`) when configured"), (status = 503, description = "Database unreachable, hung, full or read-only (same body, `status: unavailable`); or stopping, during `server.drain_delay_secs` after SIGTERM (`{\"status\": \"draining\"}`)")))]
pub(crate) async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    if state.draining.load(std::sync::atomic::Ordering::Acquire) {
        return HttpResponse::ServiceUnavailable().json(json!({"status": "draining"}));
    }
    let feed = state.context.credential_cache().health();
    let change_feed = json!({
        "status": if feed.fresh { "ok" } else { "stale" },
        "lag_ms": feed.lag_ms,
    });
    let mut response = match state.context.db().readiness().await {
        Ok(()) => {
            let mut body = json!({"status": "ready", "database": "ok", "change_feed": change_feed});
            if state.limits.limiter().uses_redis() {
                let ready = state.limits.limiter().redis_ready().await;
                body["redis"] = json!(if ready { "ok" } else { "unreachable" });
            }
            (StatusCode::OK, body)
        }
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "status": "unavailable",
                    "database": "unreachable",
                    "change_feed": change_feed,
                }),
            )
        }
    };
    if let Some(h) = state.usage.health() {
        response.1["usage"] = json!({
            "status": if h.database_ok && h.spooled == 0 { "ok" } else { "backlog" },
            "queued": h.queued,
            "spooled": h.spooled,
            "spool_bytes": h.spool_bytes,
            "last_flush_at": h.last_flush_at.map(format_timestamp),
            "recorded": h.recorded,
            "flushes": h.flushes,
            "restarts": h.restarts,
            "lost": h.lost,
            "records_dropped": h.records_dropped,
        });
    }
    HttpResponse::build(response.0).json(response.1)
}

/// `GET /metrics`: the Prometheus exposition of this server (docs/operations.md lists every
/// metric). Not served here when `server.metrics_listen` is set.
// `operation_id`: the OpenAPI document's, from when the handler was `observe::serve`.
#[utoipa::path(get, path = "/metrics", tag = "health", operation_id = "serve",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4 (docs/operations.md)",
        content_type = "text/plain; version=0.0.4; charset=utf-8", body = String)))]
pub(crate) async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let body = state.telemetry.render(&state.context, state.limits.limiter(), &state.usage);
    HttpResponse::Ok().content_type(crate::observe::CONTENT_TYPE).body(body)
}
