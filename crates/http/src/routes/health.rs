//! Probes for load balancers, outside `/api/v1`, without credentials.

use crate::startup::AppState;
use actix_web::{web, HttpResponse};
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
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, description = "Ready (`redis` is `ok` or `unreachable` when configured)"), (status = 503, description = "Database unreachable, hung, full or read-only")))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    match state.auth.db().readiness().await {
        Ok(()) if state.limits.limiter().uses_redis() => {
            let redis =
                if state.limits.limiter().redis_ready().await { "ok" } else { "unreachable" };
            HttpResponse::Ok().json(json!({"status": "ready", "database": "ok", "redis": redis}))
        }
        Ok(()) => HttpResponse::Ok().json(json!({"status": "ready", "database": "ok"})),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            HttpResponse::ServiceUnavailable()
                .json(json!({"status": "unavailable", "database": "unreachable"}))
        }
    }
}
