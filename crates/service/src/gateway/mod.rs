//! The AI gateway: a chat completion read once by its dialect (`crate::dialect`), routed by
//! its `model` to a configured provider ([`route`]), admitted against its key's limits
//! (`crate::governance`), metered (`crate::usage`), sent upstream ([`upstream`], or answered by the
//! built-in [`echo`] model) and settled when its answer ends: the stages of [`pipeline`].
//! A response of the Responses API is recorded with the key that created it ([`stored`]) and
//! passed through again for that key only ([`retrieve`]).

pub mod echo;
pub mod pipeline;
pub mod retrieve;
pub mod route;
mod stored;
pub mod upstream;

pub use crate::dialect::{validate_chat_request, GatewayReply, RequestSummary, ROLES};
pub use pipeline::{Gateway, FORWARDED_HEADERS};
pub use retrieve::{StoredCall, StoredRequest};
pub use route::ECHO_MODEL;
