//! `GET /api/v1/openapi.json`: the OpenAPI description (built from the handlers' annotations
//! in `crate::openapi`), serialised once at start-up and served from memory.

use actix_web::http::header::ContentType;
use actix_web::{web, HttpResponse};

/// The OpenAPI description as served: its JSON, made once by start-up and handed to the
/// server as app data.
#[derive(Debug, Clone)]
pub(crate) struct ApiDescription(web::Bytes);

impl ApiDescription {
    /// The JSON of `doc`.
    ///
    /// # Errors
    /// When `doc` cannot be serialised (it always can: its types are plain data).
    pub(crate) fn new(doc: &utoipa::openapi::OpenApi) -> Result<Self, serde_json::Error> {
        Ok(Self(web::Bytes::from(serde_json::to_vec(doc)?)))
    }
}

/// `GET /api/v1/openapi.json`.
pub(crate) async fn openapi(description: web::Data<ApiDescription>) -> HttpResponse {
    HttpResponse::Ok().content_type(ContentType::json()).body(description.0.clone())
}
