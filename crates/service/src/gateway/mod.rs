//! The AI gateway: a call read once by its dialect (`crate::dialect`), routed by its `model`
//! to the model's deployments ([`route`], `deployment`), admitted against its key's limits
//! (`crate::governance`), metered (`crate::usage`), sent upstream with retries, circuit
//! breakers ([`breaker`]) and fallbacks (`dispatch`, [`upstream`], or answered by the
//! built-in [`echo`] model) and settled when its answer ends: the stages of [`pipeline`].
//! A response of the Responses API is recorded with the key that created it ([`stored`]) and
//! passed through again for that key only ([`retrieve`]).

pub mod breaker;
mod call;
mod deployment;
mod dispatch;
pub mod echo;
pub mod pipeline;
mod provider;
pub mod retrieve;
pub mod route;
mod stored;
pub mod upstream;

pub use crate::dialect::{validate_chat_request, GatewayReply, RequestSummary, ROLES};
pub use call::Served;
pub use pipeline::{Gateway, GatewayAnswer, FORWARDED_HEADERS};
pub use retrieve::{StoredCall, StoredRequest};
pub use route::ECHO_MODEL;
