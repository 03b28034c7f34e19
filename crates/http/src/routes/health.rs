//! Probes for load balancers, outside `/api/v1`, without credentials.

use crate::startup::AppState;
use actix_web::{web, HttpResponse};
use serde_json::json;

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "Alive")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Readiness: the database answers a query. The body also reports the credential change feed:
/// `change_feed.status` is `ok`, or `stale` when the feed has not been read for more than
/// `credential_cache.max_feed_lag_ms` (the node then reads every credential from the database,
/// so it stays ready), and `lag_ms` the milliseconds since its last read. With
/// `rate_limit.backend = "redis"` the body also says whether Redis answers; a Redis outage does
/// not make the node unready (it then limits from its own memory), so that losing Redis never
/// takes every node out of the balancer.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, description = "Ready: `{status, database, change_feed: {status, lag_ms}}`, plus `redis` (`ok` or `unreachable`) when configured"), (status = 503, description = "Database unreachable")))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let feed = state.auth.credential_cache().health();
    let change_feed = json!({
        "status": if feed.fresh { "ok" } else { "stale" },
        "lag_ms": feed.lag_ms,
    });
    match state.auth.db().ping().await {
        Ok(()) => {
            let mut body = json!({"status": "ready", "database": "ok", "change_feed": change_feed});
            if state.limits.limiter().uses_redis() {
                let ready = state.limits.limiter().redis_ready().await;
                body["redis"] = json!(if ready { "ok" } else { "unreachable" });
            }
            HttpResponse::Ok().json(body)
        }
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            HttpResponse::ServiceUnavailable().json(json!({
                "status": "unavailable",
                "database": "unreachable",
                "change_feed": change_feed,
            }))
        }
    }
}
