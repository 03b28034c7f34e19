//! The provider's answer, recorded: a JSON answer or a failure at once, a stream wrapped in a
//! [`MeteredStream`] that records it when it ends or is dropped.

use super::meter::CallMeter;
use super::pending::Observed;
use super::sse::MeteredStream;
use crate::dialect::reply::GatewayReply;
use crate::error::ServiceError;
use aigw_domain::usage::UsageOutcome;

impl CallMeter {
    /// Records the outcome of the provider call and returns its answer; a stream comes back
    /// wrapped so that it is recorded when it ends or is dropped.
    ///
    /// # Errors
    /// The provider's error, unchanged.
    pub fn finish(
        mut self,
        reply: Result<GatewayReply, ServiceError>,
    ) -> Result<GatewayReply, ServiceError> {
        match reply {
            Ok(GatewayReply::Json { status, body }) => {
                let failed = status.is_client_error() || status.is_server_error();
                let outcome = if failed { UsageOutcome::UpstreamError } else { UsageOutcome::Ok };
                self.record(outcome, Observed::Json(body.clone()));
                Ok(GatewayReply::Json { status, body })
            }
            Ok(GatewayReply::Stream { status, content_type, body }) => {
                let strip = !self.caller_wants_usage;
                let endpoint = self.endpoint();
                Ok(GatewayReply::Stream {
                    status,
                    content_type,
                    body: Box::pin(MeteredStream::new(body, endpoint, self, strip)),
                })
            }
            Err(e) => {
                let outcome = match e {
                    ServiceError::UpstreamTimeout { .. } => UsageOutcome::Timeout,
                    _ => UsageOutcome::UpstreamError,
                };
                self.record(outcome, Observed::Nothing);
                Err(e)
            }
        }
    }
}
