//! The AI gateway: a chat completion validated (`crate::dialect`), routed by its `model` to a
//! configured provider and sent upstream ([`providers`]) over pooled connections
//! (`aigw_infra::upstream_pool`); its answer is a [`ChatReply`]. The call is
//! admitted against its key's limits (`crate::limits`) and metered into the usage ledger
//! (`crate::usage`) on the way.

pub mod providers;

pub use crate::dialect::{validate_chat_request, ChatReply, ChatRequestSummary, ROLES};
pub use providers::{Gateway, ECHO_MODEL, FORWARDED_HEADERS};
