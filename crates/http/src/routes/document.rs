//! `GET /api/v1/openapi.json`: the OpenAPI description (built from the handlers' annotations
//! in `crate::openapi`), serialised on the first request and served from memory after.

use actix_web::http::header::ContentType;
use actix_web::{web, HttpResponse};
use std::sync::{Arc, OnceLock};

/// The OpenAPI description as served, handed to the server as app data by start-up: how to
/// build the document, and its JSON once built (on the first request, so that a server never
/// asked for it never builds it).
#[derive(Debug, Clone)]
pub(crate) struct ApiDescription {
    build: fn() -> utoipa::openapi::OpenApi,
    json: Arc<OnceLock<web::Bytes>>,
}

impl ApiDescription {
    /// The description that `build` makes.
    pub(crate) fn new(build: fn() -> utoipa::openapi::OpenApi) -> Self {
        Self { build, json: Arc::default() }
    }

    /// The document's JSON, built on the first call.
    fn json(&self) -> web::Bytes {
        // The document's types are plain data: serialising them cannot fail.
        self.json
            .get_or_init(|| serde_json::to_vec(&(self.build)()).unwrap_or_default().into())
            .clone()
    }
}

/// `GET /api/v1/openapi.json`.
pub(crate) async fn openapi(description: web::Data<ApiDescription>) -> HttpResponse {
    HttpResponse::Ok().content_type(ContentType::json()).body(description.json())
}
