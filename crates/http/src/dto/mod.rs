//! Request and response bodies as they appear on the wire, with
//! their OpenAPI schemas. Timestamps are RFC 3339 strings in UTC with `Z`.

pub(crate) mod account;
pub(crate) mod account_email;
pub(crate) mod admin;
pub(crate) mod leaks;
pub(crate) mod mfa;
pub(crate) mod sso;
pub(crate) mod teams;
pub(crate) mod usage;
pub(crate) mod usage_csv;
pub(crate) mod webhooks;

use aigw_domain::time::format_timestamp;
use aigw_domain::usage::micros_to_usd;
use aigw_service::usage::UsageTotals;
use aigw_service::{ApiKeyPatch, ApiKeyView, CreatedApiKey, KeyPolicyRequest, TokenSet, UserView};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::{BTreeMap, HashMap};
use utoipa::ToSchema;

/// The success envelope: `{"success": true, "data": …}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Envelope<T: ToSchema> {
    /// Always `true`.
    pub(crate) success: bool,
    /// The payload.
    pub(crate) data: T,
}

impl<T: ToSchema> Envelope<T> {
    /// Wraps `data`.
    pub(crate) fn ok(data: T) -> Self {
        Self { success: true, data }
    }
}

/// The error envelope.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorEnvelope {
    /// Always `false`.
    pub(crate) success: bool,
    /// The error.
    pub(crate) error: ErrorBody,
}

/// Answers every endpoint that reads a JSON body can give about the body itself
/// (OpenAPI responses shared by those endpoints).
#[derive(Debug, utoipa::IntoResponses)]
#[allow(dead_code)]
pub(crate) enum BodyErrors {
    /// 413 `payload_too_large`.
    #[response(status = 413, description = "Body over the limit")]
    TooLarge(ErrorEnvelope),
    /// 415 `unsupported_media_type`.
    #[response(status = 415, description = "Body not application/json")]
    NotJson(ErrorEnvelope),
}

/// Answers every gateway call (`/ai/…` with a body) can give besides the provider's own answer
/// (OpenAPI responses shared by those endpoints).
#[derive(Debug, utoipa::IntoResponses)]
#[allow(dead_code)]
pub(crate) enum GatewayErrors {
    /// 400 `invalid_request`: a malformed field, a model whose provider does not serve the
    /// endpoint, input the gateway cannot price for a key with limits; or the upstream's 400.
    #[response(
        status = 400,
        description = "A field is malformed (details.field), the model's provider does not serve this endpoint (field: model), or the upstream refused the request (upstream_rejected)"
    )]
    Invalid(ErrorEnvelope),
    /// 401 `unauthorized`.
    #[response(status = 401, description = "Missing or bad API key")]
    Unauthorized(ErrorEnvelope),
    /// 403 `forbidden`.
    #[response(
        status = 403,
        description = "Access token, key without ai_gateway, or a model outside the key's allowed_models (required: model:<name>)"
    )]
    Forbidden(ErrorEnvelope),
    /// 404 `not_found`.
    #[response(status = 404, description = "Unknown model")]
    UnknownModel(ErrorEnvelope),
    /// 409 `upstream_rejected`.
    #[response(
        status = 409,
        description = "The upstream refused the request (upstream_rejected, the upstream's status)"
    )]
    Conflict(ErrorEnvelope),
    /// 422 `upstream_rejected`.
    #[response(
        status = 422,
        description = "The upstream refused the request (upstream_rejected, the upstream's status)"
    )]
    Unprocessable(ErrorEnvelope),
    /// 502 `upstream_error`.
    #[response(status = 502, description = "The upstream failed, answered 5xx, or is unreachable")]
    Upstream(ErrorEnvelope),
    /// 504 `upstream_timeout`.
    #[response(status = 504, description = "The upstream did not answer in time")]
    Timeout(ErrorEnvelope),
}

/// Answers a call on a stored response (`/ai/responses/{id}…`) can give besides the
/// provider's own answer (OpenAPI responses shared by those endpoints).
#[derive(Debug, utoipa::IntoResponses)]
#[allow(dead_code)]
pub(crate) enum StoredResponseErrors {
    /// 400 `invalid_request`, or the upstream's 400 (`upstream_rejected`).
    #[response(
        status = 400,
        description = "stream=true on a retrieval (details.field: stream), or the upstream refused the request (upstream_rejected)"
    )]
    Invalid(ErrorEnvelope),
    /// 401 `unauthorized`.
    #[response(status = 401, description = "Missing or bad API key")]
    Unauthorized(ErrorEnvelope),
    /// 403 `forbidden`.
    #[response(status = 403, description = "Access token, or key without ai_gateway")]
    Forbidden(ErrorEnvelope),
    /// 404 `not_found`.
    #[response(
        status = 404,
        description = "No response of this id created by this key through the gateway (resource: response); or the provider's 404 (upstream_rejected)"
    )]
    NotFound(ErrorEnvelope),
    /// 502 `upstream_error`.
    #[response(status = 502, description = "The upstream failed, answered 5xx, or is unreachable")]
    Upstream(ErrorEnvelope),
    /// 504 `upstream_timeout`.
    #[response(status = 504, description = "The upstream did not answer in time")]
    Timeout(ErrorEnvelope),
}

/// Answers every rate-limited, database-backed endpoint can give (OpenAPI responses shared by
/// those endpoints).
#[derive(Debug, utoipa::IntoResponses)]
#[allow(dead_code)]
pub(crate) enum ServerErrors {
    /// 429 `rate_limit_exceeded`: a rate-limit policy, or (endpoints with a body) the
    /// client address's requests still sending their body (`crate::middleware::connections`).
    #[response(
        status = 429,
        description = "Rate limit exceeded (Retry-After, RateLimit, RateLimit-Policy); on an endpoint with a body also: too many requests of this client address still sending their body (Retry-After, Connection: close)"
    )]
    RateLimited(ErrorEnvelope),
    /// 500 `internal_error`.
    #[response(status = 500, description = "Unexpected error (details: request_id, timestamp)")]
    Internal(ErrorEnvelope),
    /// 503 `service_unavailable`.
    #[response(status = 503, description = "Database unavailable; retry later")]
    Unavailable(ErrorEnvelope),
}

/// `error` of the error envelope.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// Machine-readable code: `invalid_request`, `unauthorized`, `forbidden`, `not_found`,
    /// `method_not_allowed`, `request_timeout`, `conflict`, `payload_too_large`,
    /// `unsupported_media_type`, `idempotency_key_reused`, `rate_limit_exceeded`,
    /// `internal_error`, `upstream_error`, `service_unavailable`, `upstream_timeout`,
    /// `upstream_rejected` (docs/errors.md).
    pub(crate) code: String,
    /// Human-readable text.
    pub(crate) message: String,
    /// Code-specific fields: `field`+`issue` (400), `hint` (401), `required`+`current` (403),
    /// `resource`+`id` (404), `timeout_secs` (408), `idempotency_key` (409, 422),
    /// `limit`+`remaining`+`reset` (429), `request_id`+`timestamp` (500, 503), `provider`
    /// (502, 504), `provider`+`upstream_status`+`type`+`code`+`param` (`upstream_rejected`).
    #[schema(value_type = Object)]
    pub(crate) details: serde_json::Value,
}

/// `POST /auth/register` body.
#[derive(Deserialize, ToSchema)]
pub struct RegisterRequest {
    /// E-mail address, the login name: trimmed, NFKC-normalised and lower-cased (`ａnn@` is
    /// `ann@`). Refused (400) when its local part or domain mixes scripts (a Cyrillic `а`
    /// among Latin letters), and answered as already registered when it looks like a
    /// registered address (same UTS 39 skeleton).
    #[schema(example = "ann@example.com", format = Email, max_length = 254)]
    pub(crate) email: String,
    /// 8 to 256 Unicode code points (configurable minimum); not a common password.
    #[schema(example = "correct horse battery staple", min_length = 8, max_length = 256)]
    pub(crate) password: String,
    /// Display name, 1 to 100 characters; defaults to the part of the e-mail before `@`.
    #[schema(example = "Ann", min_length = 1, max_length = 100)]
    pub(crate) name: Option<String>,
    /// With `auth.registration = "invite"`: the invitation (`aigwi_…`) an admin created for
    /// this e-mail. Ignored otherwise.
    pub(crate) invitation: Option<String>,
}

/// `POST /auth/login` body.
#[derive(Deserialize, ToSchema)]
pub struct LoginRequest {
    /// E-mail address, matched exactly in its normalised form (NFKC, lower case).
    pub(crate) email: String,
    /// Password (at most 256 characters: longer ones are refused before hashing).
    #[schema(max_length = 256)]
    pub(crate) password: String,
}

/// `POST /auth/refresh` body.
#[derive(Deserialize, ToSchema)]
pub struct RefreshRequest {
    /// The current refresh token (`aigwr_…`).
    pub(crate) refresh_token: String,
}

/// Which sessions `POST /auth/logout` ends.
#[derive(Debug, Clone, Copy, Default, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LogoutScopeDto {
    /// The current session (default).
    #[default]
    Local,
    /// Every session of the user.
    Global,
    /// Every session but the current one.
    Others,
}

/// `POST /auth/logout` body (optional).
#[derive(Default, Deserialize, ToSchema)]
pub struct LogoutRequest {
    /// `local` (default), `global` or `others`.
    #[serde(default)]
    pub(crate) scope: LogoutScopeDto,
    /// Optional: a refresh token of the caller's; its session is ended too.
    #[serde(default)]
    pub(crate) refresh_token: Option<String>,
}

/// A permission name, for the OpenAPI description of `permissions`.
#[derive(Debug, ToSchema)]
#[schema(as = Permission)]
#[allow(non_camel_case_types, dead_code)]
pub(crate) enum PermissionName {
    /// Access AI gateway endpoints.
    ai_gateway,
    /// Use proxy features.
    proxy,
    /// Read access to resources.
    read,
    /// Write access to resources.
    write,
    /// Full administrative access.
    admin,
}

/// `POST /auth/api-keys` body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateApiKeyRequest {
    /// Label, 1 to 100 characters.
    #[schema(example = "ci-pipeline", min_length = 1, max_length = 100)]
    pub(crate) name: String,
    /// One or more of `ai_gateway`, `proxy`, `read`, `write`, `admin`.
    #[schema(example = json!(["ai_gateway"]), value_type = Vec<PermissionName>, min_items = 1)]
    pub(crate) permissions: Vec<String>,
    /// Optional expiry, RFC 3339 with a time zone, in the future and no later than
    /// 9999-12-31T23:59:59Z. Absent or null: no expiry.
    #[schema(example = "2027-01-01T00:00:00Z", format = DateTime)]
    pub(crate) expires_at: Option<String>,
    /// Model names or `*` globs the key may call (1 to 100, each 1 to 200 printable ASCII
    /// characters). Absent or null: every configured model.
    #[schema(example = json!(["gpt-4o*"]), min_items = 1, max_items = 100)]
    pub(crate) allowed_models: Option<Vec<String>>,
    /// Spend allowed per `budget_period`, in USD (0 to 1e9). Absent or null: no budget.
    #[schema(example = 25.0, minimum = 0, maximum = 1_000_000_000)]
    pub(crate) max_budget_usd: Option<f64>,
    /// UTC calendar period of the budget (weeks start Monday). Absent or null: `total`.
    #[schema(value_type = Option<BudgetPeriodName>)]
    pub(crate) budget_period: Option<String>,
    /// Requests per minute, across all nodes (1 to 1e9). Absent or null: none.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub(crate) rpm_limit: Option<i64>,
    /// Tokens (prompt + completion) per minute, across all nodes (1 to 1e9). Absent or
    /// null: none.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub(crate) tpm_limit: Option<i64>,
    /// String metadata: at most 16 entries, 4096 bytes of keys and values in all.
    pub(crate) metadata: Option<BTreeMap<String, String>>,
    /// What the budget does with a call whose worst case does not fit in what is left:
    /// `refuse` (429 `budget_exceeded`) or `clamp` (lower its `max_tokens` to what is left;
    /// the answer then ends with `finish_reason: "length"`). Absent or null: `refuse`.
    #[schema(value_type = Option<BudgetModeName>)]
    pub(crate) budget_mode: Option<String>,
    /// A team of the caller to scope the key to: its calls then also count against the
    /// caller's budget in the team and the team's limits, and it stops working while the
    /// caller is not a member. Absent or null: a personal key.
    #[schema(example = "0192f3a4-7c1e-7d2a-9b3c-4d5e6f708192")]
    pub(crate) team_id: Option<String>,
}

impl CreateApiKeyRequest {
    /// The policy fields (models, budget, rates, metadata, budget mode), for the service.
    fn policy(&mut self) -> KeyPolicyRequest {
        KeyPolicyRequest {
            allowed_models: self.allowed_models.take(),
            max_budget_usd: self.max_budget_usd.take(),
            budget_period: self.budget_period.take(),
            rpm_limit: self.rpm_limit.take(),
            tpm_limit: self.tpm_limit.take(),
            metadata: self.metadata.take(),
            budget_mode: self.budget_mode.take(),
        }
    }

    /// The service's request (`team_id` as given, or `None` where the path names the team).
    pub(crate) fn into_new(mut self, with_team: bool) -> aigw_service::NewApiKey {
        let policy = self.policy();
        aigw_service::NewApiKey {
            team_id: self.team_id.filter(|_| with_team),
            name: self.name,
            permissions: self.permissions,
            expires_at: self.expires_at,
            policy,
        }
    }
}

/// What a budget does with a call whose worst case does not fit.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[allow(non_camel_case_types, missing_docs)]
pub(crate) enum BudgetModeName {
    refuse,
    clamp,
}

/// A budget period.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[allow(non_camel_case_types, missing_docs)]
pub(crate) enum BudgetPeriodName {
    daily,
    weekly,
    monthly,
    total,
}

/// Deserializes a present field (`null` included) as `Some`, so that an absent field (the
/// `#[serde(default)]` `None`) and `null` (`Some(None)`) differ.
pub(super) fn present<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `PATCH /auth/api-keys/{id}` body: the fields to change; absent fields are kept, `null`
/// clears one (not `name` or `permissions`). Other fields are refused (400).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateApiKeyRequest {
    /// Label, 1 to 100 characters.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 100)]
    pub(crate) name: Option<Option<String>>,
    /// One or more of `ai_gateway`, `proxy`, `read`, `write`, `admin`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<PermissionName>>, min_items = 1)]
    pub(crate) permissions: Option<Option<Vec<String>>>,
    /// Expiry, RFC 3339 with a time zone, in the future and no later than
    /// 9999-12-31T23:59:59Z; null: none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, format = DateTime, nullable)]
    pub(crate) expires_at: Option<Option<String>>,
    /// As in create; null: every configured model.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>, nullable, min_items = 1, max_items = 100)]
    pub(crate) allowed_models: Option<Option<Vec<String>>>,
    /// As in create; null: no budget.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>, nullable, minimum = 0, maximum = 1_000_000_000)]
    pub(crate) max_budget_usd: Option<Option<f64>>,
    /// As in create; null: `total`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<BudgetPeriodName>, nullable)]
    pub(crate) budget_period: Option<Option<String>>,
    /// As in create; null: none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, nullable, minimum = 1, maximum = 1_000_000_000)]
    pub(crate) rpm_limit: Option<Option<i64>>,
    /// As in create; null: none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, nullable, minimum = 1, maximum = 1_000_000_000)]
    pub(crate) tpm_limit: Option<Option<i64>>,
    /// As in create; null: none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<BTreeMap<String, String>>, nullable)]
    pub(crate) metadata: Option<Option<BTreeMap<String, String>>>,
    /// As in create; null: `refuse`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<BudgetModeName>, nullable)]
    pub(crate) budget_mode: Option<Option<String>>,
}

impl From<UpdateApiKeyRequest> for ApiKeyPatch {
    fn from(r: UpdateApiKeyRequest) -> Self {
        Self {
            name: r.name,
            permissions: r.permissions,
            expires_at: r.expires_at,
            allowed_models: r.allowed_models,
            max_budget_usd: r.max_budget_usd,
            budget_period: r.budget_period,
            rpm_limit: r.rpm_limit,
            tpm_limit: r.tpm_limit,
            metadata: r.metadata,
            budget_mode: r.budget_mode,
        }
    }
}

/// `POST /auth/api-keys/{id}/rotate` body (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RotateApiKeyRequest {
    /// How long the old secret keeps working, in seconds (0 to 604800; default 86400).
    #[schema(minimum = 0, maximum = 604_800, example = 3600)]
    pub(crate) grace_period_secs: Option<i64>,
}

/// A user.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UserDto {
    /// UUIDv7.
    pub(crate) id: String,
    /// E-mail address (normalised: NFKC, lower case).
    pub(crate) email: String,
    /// Display name.
    pub(crate) name: String,
    /// Role: `user`.
    pub(crate) role: String,
    /// RFC 3339 UTC.
    pub(crate) created_at: String,
    /// When the account proved it receives mail at `email` (RFC 3339 UTC); `null`: not yet.
    pub(crate) email_verified_at: Option<String>,
}

impl From<UserView> for UserDto {
    fn from(u: UserView) -> Self {
        Self {
            id: u.id.into(),
            email: u.email,
            name: u.name,
            role: u.role.as_str().to_owned(),
            created_at: format_timestamp(u.created_at),
            email_verified_at: u.email_verified_at.map(format_timestamp),
        }
    }
}

/// A token set: login, refresh, and (with the user's fields on top) register.
#[derive(Serialize, ToSchema)]
pub(crate) struct TokenSetDto {
    /// The user.
    pub(crate) user: UserDto,
    /// JWT access token (send as `Authorization: Bearer …`).
    pub(crate) token: String,
    /// Opaque refresh token (`aigwr_…`), rotated on every use.
    pub(crate) refresh_token: String,
    /// Access-token expiry, RFC 3339 UTC.
    pub(crate) expires_at: String,
    /// Access-token lifetime in seconds (3600 by default).
    pub(crate) expires_in: u64,
    /// Always `Bearer`.
    pub(crate) token_type: String,
}

impl From<TokenSet> for TokenSetDto {
    fn from(t: TokenSet) -> Self {
        Self {
            user: t.user.into(),
            token: t.access_token,
            refresh_token: t.refresh_token,
            expires_at: format_timestamp(t.expires_at),
            expires_in: t.expires_in,
            token_type: "Bearer".to_owned(),
        }
    }
}

/// `POST /auth/register` answer: both documented variants at once (the user's fields on top,
/// as variant 1 has them, plus the token set of variant 2).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RegisterData {
    /// The new user's id.
    pub(crate) id: String,
    /// E-mail address.
    pub(crate) email: String,
    /// Display name.
    pub(crate) name: String,
    /// Role: `user`.
    pub(crate) role: String,
    /// The user, the tokens and their expiry.
    #[serde(flatten)]
    pub(crate) tokens: TokenSetDto,
}

/// `GET /auth/me` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MeData {
    /// The caller's account.
    pub(crate) user: UserDto,
}

/// `POST /auth/logout` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LogoutData {
    /// How many sessions were ended by this call.
    pub(crate) revoked_sessions: usize,
}

/// An API key as read back (never the secret).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ApiKeyDto {
    /// UUIDv7.
    pub(crate) id: String,
    /// Label.
    pub(crate) name: String,
    /// First 12 characters of the key, for recognising it.
    pub(crate) key_prefix: String,
    /// Permissions.
    pub(crate) permissions: Vec<String>,
    /// Expiry, RFC 3339 UTC, or null for none.
    pub(crate) expires_at: Option<String>,
    /// RFC 3339 UTC.
    pub(crate) created_at: String,
    /// Revocation time, or null.
    pub(crate) revoked_at: Option<String>,
    /// Last use (recorded at most once a minute), or null.
    pub(crate) last_used_at: Option<String>,
    /// The key's usage over the last 30 UTC days (today included), from the daily rollups.
    pub(crate) usage_30d: KeyUsageDto,
    /// Model names or `*` globs the key may call; null: every configured model.
    pub(crate) allowed_models: Option<Vec<String>>,
    /// Spend allowed per `budget_period`, USD; null: no budget.
    pub(crate) max_budget_usd: Option<f64>,
    /// The budget's UTC calendar period; null: `total` (never resets).
    #[schema(value_type = Option<BudgetPeriodName>)]
    pub(crate) budget_period: Option<String>,
    /// Requests per minute, across all nodes; null: none.
    pub(crate) rpm_limit: Option<i64>,
    /// Tokens per minute, across all nodes; null: none.
    pub(crate) tpm_limit: Option<i64>,
    /// String metadata; null: none.
    pub(crate) metadata: Option<BTreeMap<String, String>>,
    /// `refuse` or `clamp` (see create).
    #[schema(value_type = BudgetModeName)]
    pub(crate) budget_mode: String,
    /// What the key has spent in the current budget period (since creation for `total` or
    /// no period), USD, from the usage ledger.
    pub(crate) spend_usd: f64,
    /// When the current period ends and the budget resets, RFC 3339 UTC; null for `total`
    /// or no period.
    pub(crate) budget_reset_at: Option<String>,
    /// Last rotation of the key's secret, RFC 3339 UTC, or null.
    pub(crate) rotated_at: Option<String>,
    /// The team the key is scoped to, or null.
    pub(crate) team_id: Option<String>,
    /// Whether it is a team key: it belongs to the team, not to a person.
    pub(crate) team_owned: bool,
    /// The user who created the key: its owner, or for a team key or a key a team's owner or
    /// admin made for a member, that person.
    pub(crate) created_by: String,
}

/// `usage_30d` of a key object.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub(crate) struct KeyUsageDto {
    /// Chat completions recorded.
    pub(crate) requests: u64,
    /// Their total tokens.
    pub(crate) total_tokens: u64,
    /// Their cost in USD (0 for unpriced models).
    pub(crate) cost_usd: f64,
}

impl From<&UsageTotals> for KeyUsageDto {
    fn from(t: &UsageTotals) -> Self {
        Self {
            requests: t.requests,
            total_tokens: t.total_tokens,
            cost_usd: micros_to_usd(t.cost_micros),
        }
    }
}

impl ApiKeyDto {
    /// The key object with its `usage_30d` from `usage` (keys absent from it have none).
    pub(crate) fn with_usage(mut self, usage: &HashMap<String, UsageTotals>) -> Self {
        self.usage_30d = usage.get(&self.id).map(KeyUsageDto::from).unwrap_or_default();
        self
    }

    /// The key object with its `spend_usd` from `spend` (micro-USD by key id; absent: 0).
    pub(crate) fn with_spend(mut self, spend: &HashMap<String, i64>) -> Self {
        let micros = spend.get(&self.id).copied().unwrap_or(0);
        self.spend_usd = micros_to_usd(u64::try_from(micros).unwrap_or(0));
        self
    }
}

impl From<ApiKeyView> for ApiKeyDto {
    /// The key object with no usage yet (a new key); see [`ApiKeyDto::with_usage`].
    fn from(k: ApiKeyView) -> Self {
        Self {
            id: k.id.into(),
            name: k.name,
            key_prefix: k.key_prefix,
            permissions: k.permissions.names(),
            expires_at: k.expires_at.map(format_timestamp),
            created_at: format_timestamp(k.created_at),
            revoked_at: k.revoked_at.map(format_timestamp),
            last_used_at: k.last_used_at.map(format_timestamp),
            usage_30d: KeyUsageDto::default(),
            allowed_models: k.policy.allowed_models.map(|m| m.as_slice().to_vec()),
            max_budget_usd: k
                .policy
                .max_budget_micros
                .map(|m| micros_to_usd(u64::try_from(m).unwrap_or(0))),
            budget_period: k.policy.budget_period.map(|p| p.as_str().to_owned()),
            rpm_limit: k.policy.rpm_limit,
            tpm_limit: k.policy.tpm_limit,
            metadata: k.policy.metadata.map(|m| m.entries().clone()),
            budget_mode: k.policy.budget_mode.unwrap_or_default().as_str().to_owned(),
            spend_usd: 0.0,
            budget_reset_at: k
                .policy
                .budget_period
                .and_then(|p| p.reset_at(aigw_domain::time::now()))
                .map(format_timestamp),
            rotated_at: k.rotated_at.map(format_timestamp),
            team_id: k.team_id.map(String::from),
            team_owned: k.team_owned,
            created_by: k.created_by.into(),
        }
    }
}

/// `POST /auth/api-keys` answer: the key object with the full `key`, shown only here.
#[derive(Serialize, ToSchema)]
pub(crate) struct CreatedApiKeyDto {
    /// The full key (`aigw_…`, 43 characters). Store it now: it is never shown again.
    pub(crate) key: String,
    /// The key object.
    #[serde(flatten)]
    pub(crate) api_key: ApiKeyDto,
}

impl From<CreatedApiKey> for CreatedApiKeyDto {
    fn from(c: CreatedApiKey) -> Self {
        Self { key: c.key, api_key: c.view.into() }
    }
}

/// `GET /auth/api-keys` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ApiKeyListData {
    /// The caller's keys, newest first: all of them, or one page when `limit` or `cursor` was
    /// given.
    pub(crate) api_keys: Vec<ApiKeyDto>,
    /// On a paged answer: the `cursor` of the next page; `null` on the last page. Absent when
    /// the list was not paged.
    #[serde(skip_serializing_if = "Paged::is_whole")]
    #[schema(value_type = Option<String>, required = false)]
    pub(crate) next_cursor: Paged,
}

/// The `next_cursor` of a list that may be paged: not paged (field absent), or the next
/// page's cursor (`null` on the last page).
#[derive(Debug)]
pub(crate) enum Paged {
    /// The whole list was answered.
    Whole,
    /// One page; the cursor of the next one, if any.
    Page(Option<String>),
}

impl Paged {
    fn is_whole(&self) -> bool {
        matches!(self, Paged::Whole)
    }
}

impl Serialize for Paged {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Paged::Page(Some(cursor)) => serializer.serialize_str(cursor),
            _ => serializer.serialize_none(),
        }
    }
}

/// `DELETE /auth/api-keys/{id}` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeletedData {
    /// The deleted key's id.
    pub(crate) id: String,
    /// Always `true`.
    pub(crate) deleted: bool,
}

/// Who wrote a chat message (OpenAI's roles).
#[derive(Debug, ToSchema)]
#[schema(as = ChatRole)]
#[allow(non_camel_case_types, dead_code)]
pub(crate) enum ChatRole {
    /// Instructions from the application (older models).
    system,
    /// Instructions from the application (newer models).
    developer,
    /// The end user.
    user,
    /// The model.
    assistant,
    /// A tool's result.
    tool,
}

/// One part of a message's content: `{"type": "text", "text": "…"}`, `{"type": "image_url",
/// "image_url": {…}}`, … (other fields are passed through).
#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)]
pub(crate) struct ChatContentPart {
    /// The part's kind: `text`, `image_url`, `input_audio`, `file`, `refusal`, …
    #[schema(example = "text")]
    pub(crate) r#type: String,
    /// The text of a `text` part.
    pub(crate) text: Option<String>,
}

/// A message's content: a string, or an array of content parts.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(crate) enum ChatContent {
    /// Plain text.
    Text(String),
    /// Content parts, in order.
    Parts(Vec<ChatContentPart>),
}

/// One chat message (OpenAI shape; other fields such as `name`, `tool_calls` and
/// `tool_call_id` are passed through).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub(crate) role: ChatRole,
    /// Text, or an array of content parts; may be null or absent (an assistant message with
    /// `tool_calls`).
    #[schema(nullable)]
    pub(crate) content: Option<ChatContent>,
}

/// `POST /ai/chat/completions` body (OpenAI-compatible; every other field is forwarded
/// unchanged).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct ChatCompletionRequest {
    /// A model name from configuration, or `echo`.
    #[schema(example = "echo", min_length = 1)]
    pub(crate) model: String,
    /// The conversation, at least one message.
    #[schema(min_items = 1)]
    pub(crate) messages: Vec<ChatMessage>,
    /// Answer as server-sent events (`text/event-stream`).
    pub(crate) stream: Option<bool>,
    /// Most completion tokens per choice (1 to 1 048 576). A key with a budget or a
    /// `tpm_limit` reserves it (times `n`) before the call; without it and `max_tokens`,
    /// 4096 are reserved.
    #[schema(minimum = 1, maximum = 1048576)]
    pub(crate) max_completion_tokens: Option<u64>,
    /// The older name of `max_completion_tokens`, used when that is absent (1 to 1 048 576).
    #[schema(minimum = 1, maximum = 1048576)]
    pub(crate) max_tokens: Option<u64>,
    /// Completions to generate (1 to 128): a budget reserves the completion cap this many
    /// times.
    #[schema(minimum = 1, maximum = 128)]
    pub(crate) n: Option<u64>,
}

/// An embeddings `input`: a non-empty string, or an array (1 to 2048 entries) of non-empty
/// strings, of token ids, or of non-empty arrays of token ids. Its schema is written out
/// (below) because the derive cannot state the lengths of the variants.
#[derive(Debug)]
#[allow(dead_code)]
pub(crate) struct EmbeddingInput;

impl utoipa::PartialSchema for EmbeddingInput {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};
        let text = || ObjectBuilder::new().schema_type(Type::String).min_length(Some(1));
        let id = || {
            ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0)).maximum(Some(u32::MAX))
        };
        let array = |items: utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>| {
            ArrayBuilder::new().items(items).min_items(Some(1)).max_items(Some(2048))
        };
        OneOfBuilder::new()
            .description(Some("A text, texts, token ids, or arrays of token ids"))
            .item(text())
            .item(array(text().into()))
            .item(array(id().into()))
            .item(array(array(id().into()).into()))
            .into()
    }
}

impl utoipa::ToSchema for EmbeddingInput {}

/// `POST /ai/embeddings` body (OpenAI's shape; every other field is forwarded unchanged).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct EmbeddingRequest {
    /// A model name from configuration whose provider serves embeddings.
    #[schema(example = "text-embedding-3-small", min_length = 1)]
    pub(crate) model: String,
    /// What to embed. A key with a budget or a `tpm_limit` reserves one token per byte of
    /// its texts (or one per token id) before the call.
    pub(crate) input: EmbeddingInput,
    /// Dimensions of the embeddings (1 to 65 536; models that support it).
    #[schema(minimum = 1, maximum = 65536)]
    pub(crate) dimensions: Option<u64>,
    /// `float` (default) or `base64`.
    #[schema(example = "float")]
    pub(crate) encoding_format: Option<EmbeddingEncoding>,
    /// The end user, passed through to the provider.
    pub(crate) user: Option<String>,
}

/// How embeddings are encoded in the answer.
#[derive(Debug, ToSchema)]
#[allow(non_camel_case_types, dead_code)]
pub(crate) enum EmbeddingEncoding {
    /// Arrays of numbers.
    float,
    /// Base64 of little-endian 32-bit floats.
    base64,
}

/// `POST /ai/responses` body (OpenAI's Responses API; every other field, `tools`,
/// `reasoning`, `text` and the rest, is forwarded unchanged).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct ResponseRequest {
    /// A model name from configuration whose provider serves the Responses API.
    #[schema(example = "gpt-4.1-mini", min_length = 1)]
    pub(crate) model: String,
    /// A string, or an array of input items (messages with `role` user, assistant, system or
    /// developer and a string or content-part `content`; function calls and their outputs).
    #[schema(value_type = Object)]
    pub(crate) input: Option<serde_json::Value>,
    /// System instructions.
    pub(crate) instructions: Option<String>,
    /// Most output tokens, reasoning included (1 to 1 048 576). A key with a budget or a
    /// `tpm_limit` reserves it before the call; without it, 4096 are reserved.
    #[schema(minimum = 1, maximum = 1048576)]
    pub(crate) max_output_tokens: Option<u64>,
    /// Answer as server-sent events (`text/event-stream`).
    pub(crate) stream: Option<bool>,
    /// Continue from a stored response: input the gateway cannot see, reserved at the
    /// model's context window for keys with a budget or a `tpm_limit`.
    pub(crate) previous_response_id: Option<String>,
}

/// `POST /ai/anthropic/v1/messages` body (Anthropic's Messages API; every other field,
/// `tools`, `thinking`, `temperature`, `metadata` and the rest, is forwarded unchanged). A
/// token count (`/v1/messages/count_tokens`) takes the same body without `max_tokens`.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct MessagesRequest {
    /// A model name from configuration whose provider serves the Messages API.
    #[schema(example = "claude-sonnet-4-5", min_length = 1)]
    pub(crate) model: String,
    /// Most output tokens, thinking included (1 to 1 048 576; required for a message). A key
    /// with a budget or a `tpm_limit` reserves it before the call.
    #[schema(minimum = 1, maximum = 1048576)]
    pub(crate) max_tokens: Option<u64>,
    /// The conversation: objects with `role` `user` or `assistant` and a `content` that is a
    /// string or an array of content blocks (objects with a string `type`: `text`, `image`,
    /// `document`, `tool_use`, `tool_result`, …).
    #[schema(value_type = Vec<Object>, min_items = 1)]
    pub(crate) messages: Vec<serde_json::Value>,
    /// The system prompt: a string or an array of `text` blocks.
    #[schema(value_type = Object)]
    pub(crate) system: Option<serde_json::Value>,
    /// Answer as server-sent events (`text/event-stream`).
    pub(crate) stream: Option<bool>,
}

/// One server-sent event of a streamed chat completion (`text/event-stream`).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct ChatCompletionEvent {
    /// A `chat.completion.chunk` object as JSON text, or `[DONE]` at the end.
    pub(crate) data: String,
    /// The event type, if the upstream names one (normally absent: `message`).
    pub(crate) event: Option<String>,
    /// The event id, if the upstream sends one.
    pub(crate) id: Option<String>,
}

/// `GET /ai/models` answer (OpenAI-compatible list).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ModelList {
    /// Always `list`.
    pub(crate) object: String,
    /// The models.
    pub(crate) data: Vec<ModelDto>,
}

/// One model.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ModelDto {
    /// Model name.
    pub(crate) id: String,
    /// Always `model`.
    pub(crate) object: String,
    /// Always 0 (OpenAI's creation time, Unix seconds: the gateway does not know it).
    pub(crate) created: i64,
    /// Always `aigw`.
    pub(crate) owned_by: String,
    /// The endpoints (API dialects) the model is served on: `chat`, `embeddings`,
    /// `responses`, `messages`.
    #[schema(value_type = Vec<String>, example = json!(["chat", "embeddings"]))]
    pub(crate) endpoints: Vec<String>,
}

/// `Debug` for request and answer bodies that carry a password, token or key: the secret
/// fields print as `***`.
macro_rules! redacted_debug {
    ($type:ty { $($field:ident),* } secret { $($secret:ident),* }) => {
        impl std::fmt::Debug for $type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($type))
                    $(.field(stringify!($field), &self.$field))*
                    $(.field(stringify!($secret), &"***"))*
                    .finish()
            }
        }
    };
}

redacted_debug!(RegisterRequest { email, name } secret { password, invitation });
redacted_debug!(LoginRequest { email } secret { password });
redacted_debug!(RefreshRequest {} secret { refresh_token });
redacted_debug!(LogoutRequest { scope } secret { refresh_token });
redacted_debug!(TokenSetDto { user, expires_at, expires_in, token_type } secret { token, refresh_token });
redacted_debug!(CreatedApiKeyDto { api_key } secret { key });

/// No `Debug` of a body holding a password, token or key prints it.
#[cfg(test)]
#[allow(clippy::panic)]
mod debug_redaction {
    use super::*;

    const SECRET: &str = "TOPSECRET-0123456789";

    fn hidden(shown: String) {
        assert!(!shown.contains(SECRET), "{shown}");
    }

    #[test]
    fn register_request() {
        hidden(format!(
            "{:?}",
            RegisterRequest {
                email: "a@example.com".into(),
                password: SECRET.into(),
                name: None,
                invitation: Some(SECRET.into()),
            }
        ));
    }

    #[test]
    fn login_request() {
        hidden(format!(
            "{:?}",
            LoginRequest { email: "a@example.com".into(), password: SECRET.into() }
        ));
    }

    #[test]
    fn refresh_request() {
        hidden(format!("{:?}", RefreshRequest { refresh_token: SECRET.into() }));
    }

    #[test]
    fn logout_request() {
        hidden(format!(
            "{:?}",
            LogoutRequest { scope: LogoutScopeDto::Local, refresh_token: Some(SECRET.into()) }
        ));
    }

    fn token_set() -> TokenSetDto {
        TokenSetDto {
            user: UserDto {
                id: "u".into(),
                email: "a@example.com".into(),
                name: "a".into(),
                role: "user".into(),
                created_at: "2026-01-01T00:00:00Z".into(),
                email_verified_at: None,
            },
            token: SECRET.into(),
            refresh_token: SECRET.into(),
            expires_at: "2026-01-01T01:00:00Z".into(),
            expires_in: 3600,
            token_type: "Bearer".into(),
        }
    }

    #[test]
    fn token_set_dto_and_register_data() {
        hidden(format!("{:?}", token_set()));
        hidden(format!(
            "{:?}",
            RegisterData {
                id: "u".into(),
                email: "a@example.com".into(),
                name: "a".into(),
                role: "user".into(),
                tokens: token_set(),
            }
        ));
    }

    #[test]
    fn created_api_key_dto() {
        let api_key = ApiKeyDto {
            id: "k".into(),
            name: "n".into(),
            key_prefix: "aigw_1234567".into(),
            permissions: vec!["read".into()],
            expires_at: None,
            created_at: "2026-01-01T00:00:00Z".into(),
            revoked_at: None,
            last_used_at: None,
            usage_30d: KeyUsageDto::default(),
            allowed_models: None,
            max_budget_usd: None,
            budget_period: None,
            rpm_limit: None,
            tpm_limit: None,
            metadata: None,
            budget_mode: "refuse".into(),
            spend_usd: 0.0,
            budget_reset_at: None,
            rotated_at: None,
            team_id: None,
            team_owned: false,
            created_by: "u".into(),
        };
        hidden(format!("{:?}", CreatedApiKeyDto { key: SECRET.into(), api_key }));
    }
}
