//! What the gateway answers to a chat completion ([`GatewayReply`]), which the usage meter
//! wraps to record the call: defined apart from the gateway so that the meter does not
//! depend on it.

use crate::error::ServiceError;
use bytes::Bytes;
use futures_util::stream::BoxStream;

/// The answer to a chat completion.
pub enum GatewayReply {
    /// A complete JSON body, returned unchanged with `status`.
    Json {
        /// HTTP status (2xx).
        status: http::StatusCode,
        /// The upstream's body, byte for byte.
        body: Bytes,
    },
    /// A server-sent-events stream, passed through chunk by chunk.
    Stream {
        /// HTTP status (2xx).
        status: http::StatusCode,
        /// The upstream's `Content-Type` (normally `text/event-stream`).
        content_type: String,
        /// The chunks; an error ends the stream (the connection is then closed).
        body: BoxStream<'static, Result<Bytes, ServiceError>>,
    },
}

impl std::fmt::Debug for GatewayReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatewayReply::Json { status, body } => {
                write!(f, "GatewayReply::Json({status}, {} bytes)", body.len())
            }
            GatewayReply::Stream { status, .. } => write!(f, "GatewayReply::Stream({status})"),
        }
    }
}
