//! Structured logs (`tracing`) and the request id every answer carries as `x-request-id`.

use crate::error::REQUEST_ID;
use crate::settings::{LogFormat, LogSettings};
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::HttpMessage;
use tracing_actix_web::RequestId;
use tracing_subscriber::EnvFilter;

/// Keeps the log writer thread alive; logs still queued are written when it is dropped, so
/// hold it until the process ends.
#[derive(Debug)]
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard(#[allow(dead_code)] tracing_appender::non_blocking::WorkerGuard);

/// Installs the global subscriber (`RUST_LOG` overrides `log.level`), writing to stdout from a
/// dedicated thread (`tracing-appender`), so a request never waits on the terminal or a pipe.
/// The queue holds 128 000 lines; only a writer that far behind makes a logging thread wait
/// (nothing is dropped). Safe to call twice (the second subscriber is not installed).
pub fn init(settings: &LogSettings) -> LogGuard {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(settings.level.clone()));
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("aigw-log")
        .finish(std::io::stdout());
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_target(false).with_writer(writer);
    let _ = match settings.format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    LogGuard(guard)
}

/// Middleware: makes the request id (from `tracing-actix-web`, a UUIDv7) available to error
/// rendering and sets it as the `x-request-id` response header.
pub async fn request_id(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = req
        .extensions()
        .get::<RequestId>()
        .map(ToString::to_string)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let audit = audit_context(&req, &id);
    let mut response =
        aigw_service::audit::with_context(audit, REQUEST_ID.scope(id.clone(), next.call(req)))
            .await?;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HeaderName::from_static("x-request-id"), value);
    }
    Ok(response)
}

/// Where `req` comes from, for the audit trail: the client address (trusted-proxy rules), the
/// `User-Agent` (cut to 256 characters) and the request id.
fn audit_context(req: &ServiceRequest, request_id: &str) -> aigw_service::audit::AuditContext {
    let ip = req
        .app_data::<actix_web::web::Data<crate::startup::AppState>>()
        .map(|state| state.limits.client_ip(req.request()).to_string());
    let client = aigw_service::ClientInfo::new(
        ip,
        req.headers().get(actix_web::http::header::USER_AGENT).and_then(|v| v.to_str().ok()),
    );
    aigw_service::audit::AuditContext {
        ip: client.ip,
        user_agent: client.user_agent,
        request_id: Some(request_id.to_owned()),
    }
}
