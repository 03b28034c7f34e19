//! `GET /api/v1/ai/models` and `GET /api/v1/ai/models/{model}` (OpenAI's `models.list` and
//! `models.retrieve`), with the endpoints each model is served on.

use crate::dto::{ErrorEnvelope, ModelDto, ModelList, ServerErrors};
use crate::error::ApiError;
use crate::extract::Authorized;
use crate::state::AppState;
use actix_web::{web, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::usage::Endpoint;
use aigw_service::ServiceError;

/// A model as OpenAI's SDKs read it, with its endpoints.
fn model_dto(id: String, endpoints: &[Endpoint]) -> ModelDto {
    ModelDto {
        id,
        object: "model".to_owned(),
        created: 0,
        owned_by: "aigw".to_owned(),
        endpoints: endpoints.iter().map(|e| e.as_str().to_owned()).collect(),
    }
}

/// The models this gateway routes that the key may call (API key with `ai_gateway`; only
/// those its `allowed_models` match), each with the endpoints it is served on.
#[utoipa::path(get, path = "/api/v1/ai/models", tag = "ai", security(("api_key" = [])),
    responses((status = 200, body = ModelList), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn list(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ChatCompletion>,
) -> Result<HttpResponse, ApiError> {
    let data = state
        .gateway
        .models_for(&caller)
        .into_iter()
        .map(|(id, endpoints)| model_dto(id, endpoints))
        .collect();
    Ok(HttpResponse::Ok().json(ModelList { object: "list".to_owned(), data }))
}

/// One model (API key with `ai_gateway`), as in the list: 404 `not_found` for a model the
/// gateway does not route or the key's `allowed_models` do not match (the list does not show
/// it either), 400 for a name with U+0000. The name may contain `/` (`openai/gpt-4o`).
#[utoipa::path(get, path = "/api/v1/ai/models/{model}", tag = "ai", security(("api_key" = [])),
    params(("model" = String, Path, description = "The model's name, as in the list")),
    responses((status = 200, body = ModelDto), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
        (status = 400, description = "The name holds U+0000 (field: model)", body = ErrorEnvelope),
        (status = 404, description = "Unknown model, or one outside the key's allowed_models", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn retrieve(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ChatCompletion>,
    model: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let model = model.into_inner();
    aigw_domain::validation::refuse_nul("model", &model)?;
    match state.gateway.model_for(&caller, &model) {
        Some(endpoints) => Ok(HttpResponse::Ok().json(model_dto(model, endpoints))),
        None => {
            Err(ServiceError::NotFound { resource: "model", id: model.chars().take(128).collect() }
                .into())
        }
    }
}
