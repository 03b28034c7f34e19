//! Stored responses passed through: `GET /responses/{id}`, `DELETE /responses/{id}` and
//! `GET /responses/{id}/input_items` of the provider that created the response, with the
//! provider's key, for the API key that created it ([`crate::gateway::stored`]) and no one
//! else. The provider's answer comes back unchanged (an upstream 4xx as
//! [`ServiceError::UpstreamRejected`], as for every call). These calls are free upstream:
//! they are not metered and hold no budget or token reservation (the route's request rate
//! limit applies).

use crate::auth::Authorized;
use crate::dialect::reply::GatewayReply;
use crate::error::ServiceError;
use crate::gateway::pipeline::Gateway;
use crate::gateway::provider::Provider;
use crate::gateway::upstream::UpstreamCall;
use aigw_domain::access::op;
use aigw_domain::usage::Endpoint;
use aigw_domain::FieldError;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;

/// A call on a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredCall {
    /// `GET /responses/{id}`: the response.
    Retrieve,
    /// `DELETE /responses/{id}`: deletes it (its owner is forgotten after the provider's
    /// 2xx).
    Delete,
    /// `GET /responses/{id}/input_items`: its input items, a page at a time.
    InputItems,
}

/// What a call on a stored response names and carries.
#[derive(Debug, Clone, Copy)]
pub struct StoredRequest<'a> {
    /// The response's id, as in the request's path.
    pub response_id: &'a str,
    /// The request's query string (without `?`; empty for none), passed on unchanged:
    /// `include[]`, and for input items `after`, `limit`, `order`.
    pub query: &'a str,
    /// When the request arrived (the gateway's overhead is measured from there).
    pub arrived: Instant,
    /// The caller's headers to pass on ([`crate::gateway::FORWARDED_HEADERS`]).
    pub headers: &'a [(&'static str, String)],
}

impl Gateway {
    /// Passes `call` on `request.response_id` through to the provider that created the
    /// response, for the API key that created it, and returns the provider's answer
    /// unchanged. Not metered.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] naming `stream` for a retrieval asking for a stream (only a
    /// background response streams on retrieval, and the gateway refuses to create those),
    /// or `query` for a query string that cannot be sent on; [`ServiceError::NotFound`]
    /// (`resource: response`) for a response not created through the gateway, created by
    /// another key, or whose provider is no longer configured;
    /// [`ServiceError::UpstreamRejected`], [`ServiceError::Upstream`] and
    /// [`ServiceError::UpstreamTimeout`] as for every upstream call;
    /// [`ServiceError::Unavailable`] when the database is.
    pub async fn stored_response(
        &self,
        call: StoredCall,
        principal: &Authorized<op::ChatCompletion>,
        request: StoredRequest<'_>,
    ) -> Result<GatewayReply, ServiceError> {
        let StoredRequest { response_id, query, arrived, headers } = request;
        check_query(call, query)?;
        let stored = self.stored_responses().ok_or_else(|| not_found(response_id))?;
        let owner = stored.owned_by(principal, response_id).await?;
        let Some(provider) = self.provider_named(&owner.provider) else {
            tracing::warn!(provider = %owner.provider, response_id,
                "a stored response's provider is no longer configured");
            return Err(not_found(response_id));
        };
        let path = match call {
            StoredCall::Retrieve | StoredCall::Delete => format!("/{response_id}"),
            StoredCall::InputItems => format!("/{response_id}/input_items"),
        };
        let suffix = if query.is_empty() { path } else { format!("{path}?{query}") };
        let method =
            if call == StoredCall::Delete { http::Method::DELETE } else { http::Method::GET };
        let upstream = UpstreamCall {
            provider,
            endpoint: Endpoint::Responses,
            method,
            suffix: &suffix,
            model: String::new(),
            stream: false,
            arrived: Some(arrived),
            headers,
            count_tokens: false,
            head_timeout: None,
            breaker: None,
        };
        let reply = self.upstream().forward(upstream, Bytes::new()).await?;
        if call == StoredCall::Delete {
            stored.forget(response_id).await;
        }
        Ok(reply)
    }

    /// The provider configured as `name` that serves the Responses API.
    fn provider_named(&self, name: &str) -> Option<Arc<Provider>> {
        self.providers().find(|p| p.name == name && p.target(Endpoint::Responses).is_some())
    }
}

/// 404 `not_found` for response `id`.
fn not_found(id: &str) -> ServiceError {
    ServiceError::NotFound { resource: "response", id: id.chars().take(128).collect() }
}

/// Checks the query string of `call`: one that can go into the upstream URL, and no
/// `stream` (but `false`) on a retrieval.
///
/// # Errors
/// [`ServiceError::Invalid`] naming `query` or `stream`.
fn check_query(call: StoredCall, query: &str) -> Result<(), ServiceError> {
    if format!("/?{query}").parse::<http::uri::PathAndQuery>().is_err() {
        return Err(FieldError::new("query", "is not a valid query string").into());
    }
    if call != StoredCall::Retrieve {
        return Ok(());
    }
    let streamed = url::form_urlencoded::parse(query.as_bytes())
        .any(|(name, value)| name == "stream" && value != "false");
    if streamed {
        return Err(FieldError::new(
            "stream",
            "a stored response is retrieved whole: only a background response streams on \
             retrieval, and the gateway does not create those",
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retrieval_cannot_ask_for_a_stream() {
        assert!(check_query(StoredCall::Retrieve, "").is_ok());
        assert!(check_query(
            StoredCall::Retrieve,
            "include[]=reasoning.encrypted_content&stream=false"
        )
        .is_ok());
        for query in ["stream=true", "stream=1", "stream", "a=b&stream=True"] {
            let refused = check_query(StoredCall::Retrieve, query);
            assert!(
                matches!(&refused, Err(ServiceError::Invalid(e)) if e.field == "stream"),
                "{query}: {refused:?}"
            );
        }
        assert!(check_query(StoredCall::InputItems, "limit=2&order=asc&after=msg_1").is_ok());
        assert!(check_query(StoredCall::InputItems, "stream=true").is_ok(), "passed on");
    }
}
