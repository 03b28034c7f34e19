//! Stored responses (OpenAI's Responses API): who may read one back. A provider keeps the
//! responses it creates (`store` defaults to true) and serves them again by id; through the
//! gateway only the API key that created a response may read or delete it. So when a
//! `Responses` call is answered, the response's id is recorded with the key and the
//! provider (`response_owners`), and the pass-through calls
//! ([`crate::gateway::retrieve`]) look the owner up first.
//!
//! The owner is recorded before the caller can see the id, so that a client that reads the
//! response right after creating it (on any node) finds it:
//!
//! - a JSON answer: its `id` is recorded before the answer is returned;
//! - a stream: the first event that names the response (`response.created`, whose
//!   `response.id` it is) is held back until its owner is recorded; every byte is passed on
//!   unchanged and in order.
//!
//! A failed write never costs the caller the answer: it is logged, and that response simply
//! cannot be retrieved through the gateway. Rows are pruned with the usage ledger's records
//! (`usage.retention_days`).

use crate::auth::Principal;
use crate::db::Db;
use crate::dialect::reply::GatewayReply;
use crate::error::ServiceError;
use crate::usage::sse::{event_data, event_end};
use crate::Clock;
use aigw_domain::usage::Endpoint;
use aigw_domain::ApiKeyId;
use aigw_persistence::response_owners::{self, ResponseOwner};
use bytes::{Bytes, BytesMut};
use futures_util::stream::{self, BoxStream, Fuse, StreamExt};
use serde::Deserialize;

/// Most bytes of a stream held back while waiting for the event that names the response;
/// past them the stream goes on without its owner recorded (a `response.created` event
/// repeats the request's instructions and tools, so it can be large).
const MAX_HELD_BYTES: usize = 8 * 1024 * 1024;

/// Longest response id recorded or looked up, in bytes.
const MAX_ID_LEN: usize = 256;

/// Whether `id` can be a provider's response id: 1 to [`MAX_ID_LEN`] ASCII letters, digits,
/// `_`, `-` and `.` (OpenAI's are `resp_` and hex). Only such ids are recorded, so only
/// such ids go into an upstream URL.
pub(crate) fn is_response_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The owners of stored responses, in the database.
#[derive(Debug, Clone)]
pub(crate) struct StoredResponses {
    db: Db,
    /// Dates the owner rows (pruned with the ledger's retention, which reads the same clock).
    clock: Clock,
}

/// A response about to be created: the key and the provider its owner row will name.
#[derive(Debug)]
pub(crate) struct NewResponse {
    db: Db,
    clock: Clock,
    api_key_id: ApiKeyId,
    provider: String,
}

impl StoredResponses {
    /// The owners in `db`, dated by `clock`.
    pub(crate) fn new(db: Db, clock: Clock) -> Self {
        Self { db, clock }
    }

    /// What to record for a call to `endpoint` by `principal` through `provider` (its
    /// name): only a `Responses` call by an API key creates a response the gateway serves
    /// again.
    pub(crate) fn owner_of(
        &self,
        endpoint: Endpoint,
        principal: &Principal,
        provider: &str,
    ) -> Option<NewResponse> {
        let Principal::ApiKey { key_id, .. } = principal else {
            return None;
        };
        (endpoint == Endpoint::Responses).then(|| NewResponse {
            db: self.db.clone(),
            clock: self.clock.clone(),
            api_key_id: key_id.clone(),
            provider: provider.to_owned(),
        })
    }

    /// The owner of `response_id`, when `principal` is the API key that created it.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`resource: response`) for an id the gateway did not
    /// record, or one another key (or an access token) asks for; [`ServiceError::Unavailable`]
    /// when the database is.
    pub(crate) async fn owned_by(
        &self,
        principal: &Principal,
        response_id: &str,
    ) -> Result<ResponseOwner, ServiceError> {
        let not_found = || ServiceError::NotFound {
            resource: "response",
            id: response_id.chars().take(128).collect(),
        };
        let Principal::ApiKey { key_id, .. } = principal else {
            return Err(not_found());
        };
        if !is_response_id(response_id) {
            return Err(not_found());
        }
        let id = response_id.to_owned();
        let owner = self.db.run(move |conn| Ok(response_owners::find(conn, &id)?)).await?;
        owner.filter(|o| &o.api_key_id == key_id).ok_or_else(not_found)
    }

    /// Forgets the owner of `response_id` (the provider deleted the response). A failure is
    /// logged: the row then stays until pruned, and a read passes through to the provider,
    /// which answers 404.
    pub(crate) async fn forget(&self, response_id: &str) {
        let id = response_id.to_owned();
        if let Err(e) = self.db.run(move |conn| Ok(response_owners::delete(conn, &id)?)).await {
            tracing::warn!(error = %e, response_id, "forgetting a deleted response's owner failed");
        }
    }
}

impl NewResponse {
    /// `reply` (a `Responses` call's answer) with the response's owner recorded before its
    /// id reaches the caller: a JSON answer once recorded, a stream with the event that
    /// names the response held back until then. An error, or a 2xx naming no response, is
    /// returned as it is.
    pub(crate) async fn keep(
        self,
        reply: Result<GatewayReply, ServiceError>,
    ) -> Result<GatewayReply, ServiceError> {
        match reply? {
            GatewayReply::Json { status, body } => {
                /// The one member read of a response object.
                #[derive(Deserialize)]
                struct Created {
                    id: Option<String>,
                }
                match serde_json::from_slice::<Created>(&body).ok().and_then(|c| c.id) {
                    Some(id) => self.record(id).await,
                    None => tracing::warn!("a response without an id: it cannot be retrieved"),
                }
                Ok(GatewayReply::Json { status, body })
            }
            GatewayReply::Stream { status, content_type, body } => {
                Ok(GatewayReply::Stream { status, content_type, body: self.hold(body) })
            }
        }
    }

    /// Records `response_id` as this call's (logged when it fails or is no provider id).
    async fn record(&self, response_id: String) {
        if !is_response_id(&response_id) {
            tracing::warn!(len = response_id.len(), "a response id not recorded: unusual text");
            return;
        }
        let owner = ResponseOwner {
            response_id,
            api_key_id: self.api_key_id.clone(),
            provider: self.provider.clone(),
            created_at: self.clock.now(),
        };
        let id = owner.response_id.clone();
        let written = self.db.run(move |conn| Ok(response_owners::insert(conn, &owner)?)).await;
        if let Err(e) = written {
            tracing::warn!(
                error = %e, response_id = %id,
                "recording a response's owner failed: it cannot be retrieved through the gateway"
            );
        }
    }

    /// `body` passed on unchanged, but for its first event that names the response
    /// (`response.id`), held back (with anything before it) until the owner is recorded.
    fn hold(
        self,
        body: BoxStream<'static, Result<Bytes, ServiceError>>,
    ) -> BoxStream<'static, Result<Bytes, ServiceError>> {
        let holding =
            Holding { inner: body.fuse(), owner: Some(self), held: BytesMut::new(), scanned: 0 };
        stream::unfold(holding, Holding::next).boxed()
    }
}

/// A stream whose first event naming the response is held back until its owner is recorded.
struct Holding {
    inner: Fuse<BoxStream<'static, Result<Bytes, ServiceError>>>,
    /// `Some` until the owner is recorded (or given up on).
    owner: Option<NewResponse>,
    /// The bytes held back.
    held: BytesMut,
    /// How much of `held` is complete events already read.
    scanned: usize,
}

impl Holding {
    /// The next chunk for the caller, and the state after it.
    async fn next(mut self) -> Option<(Result<Bytes, ServiceError>, Self)> {
        let Some(owner) = self.owner.take() else {
            let item = self.inner.next().await?;
            return Some((item, self));
        };
        loop {
            match self.inner.next().await {
                Some(Ok(chunk)) => {
                    self.held.extend_from_slice(&chunk);
                    if let Some(id) = self.response_id() {
                        owner.record(id).await;
                        return Some((Ok(self.held.split().freeze()), self));
                    }
                    if self.held.len() > MAX_HELD_BYTES {
                        tracing::warn!("a response stream named no response: not recorded");
                        return Some((Ok(self.held.split().freeze()), self));
                    }
                }
                // The error follows what was held (the inner stream ends after it).
                Some(Err(e)) if self.held.is_empty() => return Some((Err(e), self)),
                Some(Err(e)) => {
                    let held = self.held.split().freeze();
                    self.inner = stream::once(async move { Err(e) }).boxed().fuse();
                    return Some((Ok(held), self));
                }
                None if self.held.is_empty() => return None,
                None => return Some((Ok(self.held.split().freeze()), self)),
            }
        }
    }

    /// The response id named by the complete events held and not yet read, if any.
    fn response_id(&mut self) -> Option<String> {
        while let Some(end) = event_end(&self.held[self.scanned..]) {
            let event = &self.held[self.scanned..self.scanned + end];
            self.scanned += end;
            if let Some(id) = response_id_in(event) {
                return Some(id);
            }
        }
        None
    }
}

/// The `response.id` of a Responses API event (`response.created`, `response.in_progress`,
/// …), if it names one.
fn response_id_in(event: &[u8]) -> Option<String> {
    /// The members read of an event.
    #[derive(Deserialize)]
    struct Event {
        response: Option<Named>,
    }
    /// The member read of its response.
    #[derive(Deserialize)]
    struct Named {
        id: Option<String>,
    }
    let data = event_data(event)?;
    serde_json::from_slice::<Event>(&data).ok()?.response?.id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_comes_from_the_event_that_names_the_response() {
        let created = b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"}}\n\n";
        assert_eq!(response_id_in(created).as_deref(), Some("resp_1"));
        let delta = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n";
        assert_eq!(response_id_in(delta), None);
        assert_eq!(response_id_in(b": keep-alive\n\n"), None);
        assert_eq!(response_id_in(b"data: {\"response\": {\"id\": 7}}\n\n"), None);
    }

    #[test]
    fn only_plain_ids_are_response_ids() {
        assert!(is_response_id("resp_67ccd2bed1ec8190b14f964abc054267"));
        assert!(is_response_id("a-b.c_d"));
        for bad in ["", "../x", "resp_1?x=1", "resp 1", "resp/1", "résp", &"a".repeat(257)] {
            assert!(!is_response_id(bad), "{bad}");
        }
    }
}
