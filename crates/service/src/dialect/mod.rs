//! The first stage of a gateway call: what a request of one API dialect says, read once into
//! a [`RequestSummary`] (the model, the prompt's bound in tokens, the output cap, images,
//! streaming), and what its answer reports as usage ([`usage`]; a stream's events one by one:
//! [`stream_event`]). One module per dialect:
//! OpenAI's chat completions ([`chat`]), embeddings ([`embeddings`]) and Responses API
//! ([`responses`]), Anthropic's Messages API ([`messages`]); the token counts
//! that bound a prompt ([`tokens`]); the gateway's answer ([`reply`]); a body sent to another
//! model ([`model`]).
//!
//! The later stages take the summary instead of parsing the body again: admission
//! (`crate::governance`), metering and settlement (`crate::usage`), and the gateway that
//! routes and forwards (`crate::gateway`). This module imports none of them.

pub mod chat;
pub mod embeddings;
pub mod messages;
pub mod model;
pub mod object;
pub mod reply;
pub mod responses;
pub mod stream_event;
pub mod summary;
pub mod tokens;
pub mod usage;

pub use aigw_domain::usage::Endpoint;
pub use chat::{validate_chat_request, ROLES};
pub use reply::GatewayReply;
pub use summary::RequestSummary;

use aigw_domain::FieldError;

/// Validates a request `body` sent to `endpoint` and summarises it.
///
/// # Errors
/// [`FieldError`] naming the first malformed field, as the dialect's validator says
/// ([`validate_chat_request`], [`embeddings::validate_embeddings_request`],
/// [`responses::validate_responses_request`], [`messages::validate_messages_request`]).
pub fn validate(endpoint: Endpoint, body: &[u8]) -> Result<RequestSummary, FieldError> {
    match endpoint {
        Endpoint::Chat => validate_chat_request(body),
        Endpoint::Embeddings => embeddings::validate_embeddings_request(body),
        Endpoint::Responses => responses::validate_responses_request(body),
        Endpoint::Messages => messages::validate_messages_request(body),
    }
}
