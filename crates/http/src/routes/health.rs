//! Probes for load balancers, outside `/api/v1`, without credentials.

use crate::startup::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use aigw_domain::time::format_timestamp;
use serde_json::json;

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "Alive")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Readiness: the database answers a read and commits a one-row write within 1.5 s (so a
/// hung, unreachable, full or read-only database makes the node unready within 2 s). With `rate_limit.backend = "redis"` the body also
/// says whether Redis answers; a Redis outage does not make the node unready (it then limits
/// from its own memory), so that losing Redis never takes every node out of the balancer.
/// `usage` reports the usage recorder (records queued, spooled, last write); a metering
/// backlog never makes the node unready either, since no record is lost meanwhile.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, description = "Ready (`redis` is `ok` or `unreachable` when configured; `usage`: the usage recorder's `queued`, `spooled`, `spool_bytes`, `last_flush_at`)"), (status = 503, description = "Database unreachable, hung, full or read-only")))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let mut response = match state.auth.db().readiness().await {
        Ok(()) if state.limits.limiter().uses_redis() => {
            let redis =
                if state.limits.limiter().redis_ready().await { "ok" } else { "unreachable" };
            (StatusCode::OK, json!({"status": "ready", "database": "ok", "redis": redis}))
        }
        Ok(()) => (StatusCode::OK, json!({"status": "ready", "database": "ok"})),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"status": "unavailable", "database": "unreachable"}),
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
            "restarts": h.restarts,
            "lost": h.lost,
        });
    }
    HttpResponse::build(response.0).json(response.1)
}
