//! The first stage of a gateway call: what a request of one API dialect says, read once. For
//! OpenAI's chat completions: the body validated and summarised ([`chat`]: the model, the
//! prompt's bound in tokens, the completion cap, images, streaming), the token counts that
//! bound it ([`tokens`]) and the upstream's answer with its usage ([`reply`]).
//!
//! The later stages take the summary instead of parsing the body again: admission
//! (`crate::governance`), metering and settlement (`crate::usage`), and the gateway that routes and
//! forwards (`crate::gateway`). This module imports none of them.

pub mod chat;
pub mod reply;
pub mod tokens;

pub use chat::{validate_chat_request, ChatRequestSummary, ROLES};
pub use reply::ChatReply;
