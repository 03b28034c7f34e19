//! The AI gateway: a chat completion validated ([`chat_request`]), routed by its `model` to a
//! configured provider and sent upstream ([`providers`]) over pooled connections
//! (`aigw_infra::upstream_pool`); its answer is a [`ChatReply`] ([`reply`]). The call is
//! admitted against its key's limits (`crate::limits`) and metered into the usage ledger
//! (`crate::usage`) on the way.

pub mod chat_request;
pub mod providers;
pub mod reply;

pub use chat_request::{validate_chat_request, ChatRequestSummary, ROLES};
pub use providers::{Gateway, ECHO_MODEL, FORWARDED_HEADERS};
pub use reply::ChatReply;
