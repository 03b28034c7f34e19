//! The OpenAPI 3.1 description, generated from the handlers and DTOs (utoipa), served at
//! `GET /api/v1/openapi.json`.

use crate::dto;
use crate::routes::{account, admin, api_keys, auth, chat, health, usage};
use actix_web::HttpResponse;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(title = "aigw", description = "Account, token and API key service of an AI gateway."),
    paths(
        auth::register, auth::login, auth::me, auth::refresh, auth::logout, auth::jwks,
        api_keys::create, api_keys::list, api_keys::revoke, api_keys::delete,
        api_keys::update, api_keys::rotate,
        chat::completions, chat::models, health::healthz, health::readyz,
        usage::summary, usage::requests, crate::observe::serve,
        admin::list_users, admin::get_user, admin::update_user, admin::list_api_keys,
        admin::revoke_api_key,
        account::list_sessions, account::end_session, account::update_me, account::change_password,
        account::audit, admin::audit, admin::create_invitation
    ),
    components(schemas(
        dto::ErrorEnvelope, dto::ErrorBody, dto::RegisterRequest, dto::LoginRequest,
        dto::RefreshRequest, dto::LogoutRequest, dto::PermissionName, dto::LogoutScopeDto, dto::CreateApiKeyRequest,
        dto::UserDto, dto::TokenSetDto, dto::RegisterData, dto::MeData, dto::LogoutData,
        dto::ApiKeyDto, dto::CreatedApiKeyDto, dto::ApiKeyListData, dto::DeletedData,
        dto::ChatCompletionRequest, dto::ChatMessage, dto::ChatRole, dto::ChatContent,
        dto::ChatContentPart, dto::ChatCompletionEvent, dto::ModelList, dto::ModelDto,
        dto::KeyUsageDto, dto::UpdateApiKeyRequest, dto::RotateApiKeyRequest, dto::BudgetPeriodName,
        crate::dto_usage::UsageTotalsDto, crate::dto_usage::UsageRowDto,
        crate::dto_usage::UsageSummaryData, crate::dto_usage::UsageRecordDto,
        crate::dto_usage::UsageRequestsData,
        crate::dto_admin::AdminUserDto, crate::dto_admin::RoleName,
        crate::dto_admin::UpdateUserRequest, crate::dto_admin::UserListData,
        crate::dto_admin::AdminApiKeyDto, crate::dto_admin::AdminApiKeyListData,
        crate::dto_account::SessionDto, crate::dto_account::SessionListData,
        crate::dto_account::EndedSessionData, crate::dto_account::UpdateMeRequest,
        crate::dto_account::ChangePasswordRequest, crate::dto_account::AuditEventDto,
        crate::dto_account::AuditListData, crate::dto_admin::CreateInvitationRequest,
        crate::dto_admin::InvitationData
    )),
    modifiers(&SecuritySchemes, &AtLeastOneField),
    tags(
        (name = "auth", description = "Register, log in, refresh, log out"),
        (name = "api-keys", description = "Long-lived API keys"),
        (name = "ai", description = "OpenAI-compatible gateway"),
        (name = "usage", description = "The caller's metered usage of the gateway"),
        (name = "health", description = "Probes"),
        (name = "admin", description = "Administration: every user and API key (role admin)")
    )
)]
#[derive(Debug)]
pub struct ApiDoc;

#[derive(Debug)]
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "access_token",
            SecurityScheme::Http(
                HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build(),
            ),
        );
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Authorization",
                "`Bearer aigw_…` or the bare key `aigw_…`",
            ))),
        );
    }
}

/// `minProperties: 1` on the bodies that must change something (`UpdateUserRequest`), set
/// here because utoipa-gen 5.5 writes `#[schema(min_properties = …)]` as `maxProperties`.
#[derive(Debug)]
struct AtLeastOneField;

impl Modify for AtLeastOneField {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{RefOr, Schema};
        let schemas = openapi.components.as_mut().map(|c| &mut c.schemas);
        if let Some(RefOr::T(Schema::Object(object))) =
            schemas.and_then(|s| s.get_mut("UpdateUserRequest"))
        {
            object.min_properties = Some(1);
        }
    }
}

/// `GET /api/v1/openapi.json`.
pub async fn serve() -> HttpResponse {
    HttpResponse::Ok().json(ApiDoc::openapi())
}
