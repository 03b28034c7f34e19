//! The OpenAPI 3.1 description, generated from the handlers and DTOs (utoipa), served at
//! `GET /api/v1/openapi.json`.

use crate::dto;
use crate::routes::{
    account, account_email, admin, api_keys, auth, chat, embeddings, health, messages, mfa, models,
    responses, secret_scanning, sso, teams, usage, usage_export, webhooks,
};
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
        chat::completions, embeddings::create, responses::create, responses::retrieve,
        responses::delete, responses::input_items, messages::create, messages::count_tokens,
        models::list, models::retrieve, health::healthz, health::readyz,
        usage::summary, usage::requests, health::metrics,
        admin::list_users, admin::get_user, admin::update_user, admin::list_api_keys,
        admin::revoke_api_key,
        account::list_sessions, account::end_session, account::update_me, account::change_password,
        account::audit, admin::audit, admin::create_invitation, admin::list_invitations,
        admin::revoke_invitation, admin::resend_invitation,
        teams::create, teams::list, teams::get, teams::update, teams::delete,
        teams::list_members, teams::add_member, teams::update_member, teams::remove_member,
        teams::list_invitations, teams::revoke_invitation, teams::resend_invitation,
        teams::create_key, teams::create_member_key, teams::list_keys,
        teams::update_key, teams::rotate_key, teams::revoke_key, teams::delete_key, teams::usage,
        webhooks::set, webhooks::get, webhooks::delete, webhooks::deliveries,
        usage_export::summary, usage_export::team, usage_export::requests, usage::budget,
        account_email::request_verification, account_email::verify, account_email::change,
        account_email::request_reset, account_email::confirm_reset,
        secret_scanning::github, secret_scanning::admin_leaked_keys,
        mfa::status, mfa::enroll, mfa::confirm, mfa::disable, mfa::regenerate_recovery_codes,
        mfa::login_mfa, sso::providers, sso::exchange
    ),
    components(schemas(
        dto::ErrorEnvelope, dto::ErrorBody, dto::RegisterRequest, dto::LoginRequest,
        dto::RefreshRequest, dto::LogoutRequest, dto::PermissionName, dto::LogoutScopeDto, dto::CreateApiKeyRequest,
        dto::UserDto, dto::TokenSetDto, dto::RegisterData, dto::MeData, dto::LogoutData,
        dto::ApiKeyDto, dto::CreatedApiKeyDto, dto::ApiKeyListData, dto::DeletedData,
        dto::ChatCompletionRequest, dto::ChatMessage, dto::ChatRole, dto::ChatContent,
        dto::ChatContentPart, dto::ChatCompletionEvent, dto::ModelList, dto::ModelDto,
        dto::EmbeddingRequest, dto::EmbeddingInput, dto::EmbeddingEncoding, dto::ResponseRequest, dto::MessagesRequest,
        dto::KeyUsageDto, dto::UpdateApiKeyRequest, dto::RotateApiKeyRequest, dto::BudgetPeriodName, dto::BudgetModeName,
        crate::dto::usage::UsageTotalsDto, crate::dto::usage::UsageRowDto,
        crate::dto::usage::UsageSummaryData, crate::dto::usage::UsageRecordDto,
        crate::dto::usage::UsageRequestsData,
        crate::dto::admin::AdminUserDto, crate::dto::admin::RoleName,
        crate::dto::admin::UpdateUserRequest, crate::dto::admin::UserListData,
        crate::dto::admin::AdminApiKeyDto, crate::dto::admin::AdminApiKeyListData,
        crate::dto::account::SessionDto, crate::dto::account::SessionListData,
        crate::dto::account::EndedSessionData, crate::dto::account::UpdateMeRequest,
        crate::dto::account::ChangePasswordRequest, crate::dto::account::AuditEventDto,
        crate::dto::account::AuditListData, crate::dto::admin::CreateInvitationRequest,
        crate::dto::admin::InvitationData, crate::dto::admin::InvitationDto,
        crate::dto::admin::InvitationListData,
        crate::dto::teams::TeamRoleName, crate::dto::teams::CreateTeamRequest,
        crate::dto::teams::UpdateTeamRequest, crate::dto::teams::TeamDto,
        crate::dto::teams::TeamListData, crate::dto::teams::AddMemberRequest,
        crate::dto::teams::UpdateMemberRequest, crate::dto::teams::MemberDto,
        crate::dto::teams::MemberListData, crate::dto::teams::TeamInvitationDto,
        crate::dto::teams::InvitationStatusName,
        crate::dto::teams::TeamInvitationListData, crate::dto::teams::MemberAddedData,
        crate::dto::teams::TeamApiKeyListData, crate::dto::teams::TeamDeletedData,
        crate::dto::webhooks::SetWebhookRequest, crate::dto::webhooks::WebhookDto,
        crate::dto::webhooks::CreatedWebhookDto, crate::dto::webhooks::WebhookDeliveryDto,
        crate::dto::webhooks::WebhookDeliveryListData, crate::dto::usage::UserBudgetData,
        crate::dto::account_email::VerifyEmailRequest, crate::dto::account_email::ChangeEmailRequest,
        crate::dto::account_email::EmailSentData, crate::dto::account_email::PasswordResetRequest,
        crate::dto::account_email::PasswordResetAcceptedData,
        crate::dto::account_email::PasswordResetConfirmRequest,
        crate::dto::account_email::PasswordResetDoneData,
        crate::dto::leaks::GithubReportedToken, crate::dto::leaks::GithubTokenVerdict,
        crate::dto::leaks::LeakLabel, crate::dto::leaks::LeakedKeysRequest,
        crate::dto::leaks::LeakVerdictDto, crate::dto::leaks::LeakReportData,
        crate::dto::mfa::MfaConfirmRequest, crate::dto::mfa::MfaVerifyRequest,
        crate::dto::mfa::LoginMfaRequest, crate::dto::mfa::MfaEnrollmentData,
        crate::dto::mfa::MfaRecoveryCodesData, crate::dto::mfa::MfaStatusData,
        crate::dto::mfa::MfaDisabledData, crate::dto::mfa::MfaChallengeData,
        crate::dto::mfa::LoginData, crate::dto::sso::SsoExchangeRequest,
        crate::dto::sso::SsoProviderDto, crate::dto::sso::SsoProviderListData
    )),
    modifiers(&SecuritySchemes, &AtLeastOneField, &AuditActions, &NoNul),
    tags(
        (name = "auth", description = "Register, log in, refresh, log out"),
        (name = "accounts", description = "E-mail verification, e-mail change, password reset"),
        (name = "api-keys", description = "Long-lived API keys"),
        (name = "ai", description = "OpenAI-compatible gateway, and Anthropic's Messages API under /ai/anthropic"),
        (name = "usage", description = "The caller's metered usage of the gateway"),
        (name = "health", description = "Probes"),
        (name = "admin", description = "Administration: every user and API key (role admin)"),
        (name = "teams", description = "Teams: shared budgets, limits and models, members, team keys"),
        (name = "secret-scanning", description = "Leaked API keys reported by GitHub's secret scanning, revoked on report")
    )
)]
#[derive(Debug)]
pub(crate) struct ApiDoc;

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
        components.add_security_scheme(
            "x_api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "x-api-key",
                "The API key `aigw_…`, as Anthropic's SDKs send it (`/ai/anthropic` routes only)",
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

/// The query parameter that filters an audit trail by action (`GET /api/v1/audit`,
/// `GET /api/v1/admin/audit`).
const AUDIT_ACTION_PARAMETER: &str = "action";

/// The `pattern` of the audit filters' `action` parameter: every action the trail records,
/// from [`aigw_domain::AuditAction::pattern`], so that a new action needs no edit here. Runs
/// before [`NoNul`], which leaves a parameter that has a pattern as it is.
#[derive(Debug)]
struct AuditActions;

impl Modify for AuditActions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::ParameterIn;
        use utoipa::openapi::{RefOr, Schema};
        let pattern = aigw_domain::AuditAction::pattern();
        for item in openapi.paths.paths.values_mut() {
            for parameter in item.get.iter_mut().flat_map(|o| o.parameters.iter_mut().flatten()) {
                if parameter.name != AUDIT_ACTION_PARAMETER
                    || !matches!(parameter.parameter_in, ParameterIn::Query)
                {
                    continue;
                }
                if let Some(RefOr::T(Schema::Object(object))) = parameter.schema.as_mut() {
                    object.pattern = Some(pattern.clone());
                }
            }
        }
    }
}

/// What every free-text string a request carries says about U+0000.
const NO_NUL: &str = "Must not contain NUL (U+0000).";

/// The `pattern` of every free-text string a request carries: anything but U+0000 (ECMA-262
/// and Python regular expressions both read `\u0000`).
const NO_NUL_PATTERN: &str = "^[^\\u0000]*$";

/// States the NUL rule on every free-text string of a request, as [`NO_NUL`] in its
/// description and [`NO_NUL_PATTERN`] as its `pattern` (where it has none): the string path
/// and query parameters (header values cannot carry NUL at all), and the string fields, array
/// items, map keys and map values of every request body that aigw parses itself, i.e. all but
/// the chat completion, which is forwarded (`crate::extract` refuses NUL in all of them with
/// 400 naming the field).
#[derive(Debug)]
struct NoNul;

impl NoNul {
    /// Whether `schema` is a free-text string (a string type without `enum`).
    fn is_text(schema: &utoipa::openapi::RefOr<utoipa::openapi::Schema>) -> bool {
        use utoipa::openapi::schema::{SchemaType, Type};
        use utoipa::openapi::{RefOr, Schema};
        match schema {
            RefOr::T(Schema::Object(object)) => {
                let string = match &object.schema_type {
                    SchemaType::Type(t) => *t == Type::String,
                    SchemaType::Array(types) => types.contains(&Type::String),
                    SchemaType::AnyValue => false,
                };
                string && object.enum_values.is_none()
            }
            _ => false,
        }
    }

    /// Appends [`NO_NUL`] to `description` (once, as a sentence of its own).
    fn note(description: &mut Option<String>) {
        let text = description.get_or_insert_with(String::new);
        if !text.contains(NO_NUL) {
            let trimmed = text.trim_end().len();
            text.truncate(trimmed);
            if !text.is_empty() {
                text.push_str(if text.ends_with('.') { " " } else { ". " });
            }
            text.push_str(NO_NUL);
        }
    }

    /// Gives the free-text string `schema` [`NO_NUL_PATTERN`] (unless it has a pattern) and,
    /// when `describe`, [`NO_NUL`].
    fn restrict(schema: &mut utoipa::openapi::RefOr<utoipa::openapi::Schema>, describe: bool) {
        use utoipa::openapi::{RefOr, Schema};
        if let RefOr::T(Schema::Object(object)) = schema {
            if object.pattern.is_none() {
                object.pattern = Some(NO_NUL_PATTERN.to_owned());
            }
            if describe {
                Self::note(&mut object.description);
            }
        }
    }

    /// States the rule on every free-text string of `schema`: itself, its properties, its map
    /// keys and values and its array items (described on the map or the array itself).
    fn walk(schema: &mut utoipa::openapi::RefOr<utoipa::openapi::Schema>) {
        use utoipa::openapi::schema::{AdditionalProperties, ArrayItems, ObjectBuilder, Type};
        use utoipa::openapi::{RefOr, Schema};
        if Self::is_text(schema) {
            Self::restrict(schema, true);
            return;
        }
        match schema {
            RefOr::T(Schema::Object(object)) => {
                if let Some(AdditionalProperties::RefOr(values)) =
                    object.additional_properties.as_deref_mut()
                {
                    if Self::is_text(values) {
                        Self::restrict(values, false);
                        let keys = ObjectBuilder::new()
                            .schema_type(Type::String)
                            .pattern(Some(NO_NUL_PATTERN));
                        object.property_names = Some(Box::new(Schema::Object(keys.build())));
                        Self::note(&mut object.description);
                    }
                }
                for property in object.properties.values_mut() {
                    Self::walk(property);
                }
            }
            RefOr::T(Schema::Array(array)) => {
                if let ArrayItems::RefOrSchema(items) = &mut array.items {
                    if Self::is_text(items) {
                        Self::restrict(items, false);
                        Self::note(&mut array.description);
                    } else {
                        Self::walk(items);
                    }
                }
            }
            RefOr::T(Schema::OneOf(one_of)) => one_of.items.iter_mut().for_each(Self::walk),
            _ => {}
        }
    }
}

impl Modify for NoNul {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::ParameterIn;
        use utoipa::openapi::RefOr;
        let mut bodies = std::collections::BTreeSet::new();
        for item in openapi.paths.paths.values_mut() {
            let operations =
                [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
            for operation in operations.into_iter().flatten() {
                for parameter in operation.parameters.iter_mut().flatten() {
                    // Header values cannot carry NUL at all (HTTP refuses it before aigw).
                    let in_url =
                        matches!(parameter.parameter_in, ParameterIn::Path | ParameterIn::Query);
                    if let Some(schema) =
                        parameter.schema.as_mut().filter(|s| in_url && Self::is_text(s))
                    {
                        Self::restrict(schema, false);
                        Self::note(&mut parameter.description);
                    }
                }
                let contents = operation.request_body.iter().flat_map(|b| b.content.values());
                for schema in contents.filter_map(|content| content.schema.as_ref()) {
                    let mut refs = vec![schema];
                    if let RefOr::T(utoipa::openapi::Schema::OneOf(one_of)) = schema {
                        refs.extend(one_of.items.iter());
                    }
                    for found in refs {
                        if let RefOr::Ref(reference) = found {
                            let name = reference.ref_location.rsplit('/').next().unwrap_or("");
                            // The gateway's bodies are passed through: their texts are the
                            // caller's, whatever they hold.
                            if !matches!(
                                name,
                                "ChatCompletionRequest"
                                    | "EmbeddingRequest"
                                    | "ResponseRequest"
                                    | "MessagesRequest"
                            ) {
                                bodies.insert(name.to_owned());
                            }
                        }
                    }
                }
            }
        }
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        for name in bodies {
            if let Some(schema) = components.schemas.get_mut(&name) {
                Self::walk(schema);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]
    use super::*;

    /// Both audit filters take exactly the actions the trail records, and no other parameter
    /// is called `action`.
    #[test]
    fn audit_filters_list_every_action() {
        let doc = ApiDoc::openapi();
        let mut filters = Vec::new();
        for (path, item) in &doc.paths.paths {
            let get = item.get.iter().flat_map(|o| o.parameters.iter().flatten());
            for parameter in get.filter(|p| p.name == AUDIT_ACTION_PARAMETER) {
                let Some(utoipa::openapi::RefOr::T(utoipa::openapi::Schema::Object(schema))) =
                    &parameter.schema
                else {
                    panic!("{path}: `action` without an inline schema");
                };
                assert_eq!(schema.pattern, Some(aigw_domain::AuditAction::pattern()), "{path}");
                filters.push(path.as_str());
            }
        }
        assert_eq!(filters, ["/api/v1/admin/audit", "/api/v1/audit"]);
    }

    /// Every operation that the OpenAPI document marks with a credential is served, in the
    /// route table of [`crate::routes::configure`], by a resource with a rate-limit policy
    /// ([`LimitedBy`]). The extractors that authenticate count the request against that
    /// policy and answer 500 "route without a rate limit" where there is none; this finds such
    /// a route before any request does. Each operation is called once (no application state,
    /// so its extractors fail) and the policy is read from the request the route matched.
    #[actix_web::test]
    async fn every_authenticated_route_has_a_rate_limit_policy() {
        use crate::rate_limit::LimitedBy;
        use actix_web::dev::Service;
        use actix_web::http::header::{HeaderName, HeaderValue};
        use actix_web::http::{Method, StatusCode};
        use actix_web::{test, App};
        const POLICY: HeaderName = HeaderName::from_static("x-test-policy");
        let app = test::init_service(
            App::new().configure(|cfg| crate::routes::configure(cfg, 1024, 1024)).wrap_fn(
                |req, srv| {
                    let call = srv.call(req);
                    async move {
                        let mut response = call.await?;
                        let policy = response.request().app_data::<LimitedBy>().map(|l| l.0.name());
                        if let Some(name) = policy {
                            response.headers_mut().insert(POLICY, HeaderValue::from_static(name));
                        }
                        Ok(response)
                    }
                },
            ),
        )
        .await;
        let doc = ApiDoc::openapi();
        let mut checked = 0;
        for (path, item) in &doc.paths.paths {
            let operations = [
                (Method::GET, &item.get),
                (Method::POST, &item.post),
                (Method::PUT, &item.put),
                (Method::PATCH, &item.patch),
                (Method::DELETE, &item.delete),
            ];
            for (method, operation) in operations {
                let Some(operation) = operation else { continue };
                if operation.security.as_ref().is_none_or(Vec::is_empty) {
                    continue;
                }
                // `{id}`, `{key_id}`, …: any segment matches.
                let uri: String = path
                    .split('/')
                    .map(|s| if s.starts_with('{') { "x" } else { s })
                    .collect::<Vec<_>>()
                    .join("/");
                let request = test::TestRequest::default().method(method.clone()).uri(&uri);
                let response = test::call_service(&app, request.to_request()).await;
                let status = response.status();
                assert!(
                    status != StatusCode::NOT_FOUND && status != StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path}: documented with a credential but not routed ({status})"
                );
                assert!(
                    response.headers().contains_key(POLICY),
                    "{method} {path}: an authenticated route without a rate-limit policy \
                     (`.app_data(LimitedBy(Policy::…))` on its resource in routes/mod.rs)"
                );
                checked += 1;
            }
        }
        assert!(checked > 0, "the document names no authenticated operation");
    }
}
