//! The metered server-sent-events stream: passes a provider's stream to the caller event by
//! event, reads the `usage` and the text of its events on the way (where the dialect puts
//! them: `crate::dialect::usage`), and records the call when
//! the stream ends, fails, or is dropped early (the caller disconnected: actix drops a
//! response body whose connection is gone).
//!
//! When aigw itself asked a chat completion for `usage` (the caller did not), it removes what
//! that option adds, so the caller receives what the provider sends without it:
//!
//! - the usage-only final chunk (`"choices": []` with a `usage` object) is dropped;
//! - the `"usage":null` member of the other chunks is cut out of the event's bytes (only
//!   when it occurs once in the event: a JSON string cannot contain an unescaped `"`, so the
//!   text `"usage":null` is a member, and the top-level one when the parse says so).
//!
//! An event that says the answer failed after its 200 (Anthropic's `error`) is passed on and
//! ends the stream; the call is recorded as `upstream_error` with the usage read so far (its
//! output at least the text streamed, 4 bytes a token).
//!
//! Every other byte is passed through unchanged. Events are forwarded as soon as their
//! terminating blank line arrives; a chunk holding several events goes out as one chunk.

use super::meter::CallMeter;
use super::pending::Observed;
use crate::dialect::stream_event::read_event;
use crate::error::ServiceError;
use aigw_domain::usage::{Endpoint, TokenUsage, UsageOutcome};
use bytes::{Bytes, BytesMut};
use futures_util::stream::{BoxStream, Stream};
use std::borrow::Cow;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Most bytes of delta text kept for an estimate; beyond, 4 bytes count as one token.
const MAX_KEPT_TEXT: usize = 4 * 1024 * 1024;

/// A provider's SSE stream, metered (see the module docs).
pub struct MeteredStream {
    inner: BoxStream<'static, Result<Bytes, ServiceError>>,
    /// The dialect of the events: where their usage and text are.
    endpoint: Endpoint,
    meter: CallMeter,
    strip_usage: bool,
    buffer: BytesMut,
    usage: Option<TokenUsage>,
    completion: String,
    /// Text bytes beyond [`MAX_KEPT_TEXT`].
    overflow: usize,
    /// The provider said the answer failed in an event (Anthropic's `error`).
    failed: bool,
    done: bool,
}

impl std::fmt::Debug for MeteredStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredStream")
            .field("strip_usage", &self.strip_usage)
            .field("usage", &self.usage)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl MeteredStream {
    pub(crate) fn new(
        inner: BoxStream<'static, Result<Bytes, ServiceError>>,
        endpoint: Endpoint,
        meter: CallMeter,
        strip_usage: bool,
    ) -> Self {
        Self {
            inner,
            endpoint,
            meter,
            strip_usage,
            buffer: BytesMut::new(),
            usage: None,
            completion: String::new(),
            overflow: 0,
            failed: false,
            done: false,
        }
    }

    fn observed(&mut self) -> Observed {
        if self.failed {
            // Cut by an `error` event before the final counts: what was streamed counts as
            // output at 4 bytes a token, when the provider reported less.
            let streamed = (self.completion.len() + self.overflow).div_ceil(4) as u64;
            if let Some(usage) = self.usage.as_mut() {
                if usage.completion_tokens < streamed {
                    let prompt = usage.prompt_tokens;
                    *usage = aigw_domain::usage::TokenUsage {
                        cached_tokens: usage.cached_tokens,
                        cache_write_tokens: usage.cache_write_tokens,
                        ..aigw_domain::usage::TokenUsage::new(prompt, streamed)
                    };
                }
            }
        }
        let mut completion = std::mem::take(&mut self.completion);
        // Keep the estimate's order of magnitude for text beyond the cap (4 bytes a token).
        for _ in 0..self.overflow.div_ceil(4) {
            completion.push_str(" x");
        }
        Observed::Stream { usage: self.usage, completion }
    }

    fn record(&mut self, outcome: UsageOutcome) {
        let observed = self.observed();
        self.meter.record(outcome, observed);
    }

    /// Takes every complete event out of the buffer, processed, as one chunk.
    fn complete_events(&mut self) -> Option<Bytes> {
        let mut out = BytesMut::new();
        while let Some(end) = event_end(&self.buffer) {
            let event = self.buffer.split_to(end).freeze();
            self.process(event, &mut out);
        }
        (!out.is_empty()).then(|| out.freeze())
    }

    /// Reads one event's usage and text and appends what the caller gets of it to `out`.
    fn process(&mut self, event: Bytes, out: &mut BytesMut) {
        let Some(data) = event_data(&event) else {
            out.extend_from_slice(&event);
            return;
        };
        let (completion, overflow) = (&mut self.completion, &mut self.overflow);
        let keep = |s: &str| {
            if completion.len() + s.len() <= MAX_KEPT_TEXT {
                completion.push_str(s);
            } else {
                *overflow += s.len();
            }
        };
        let Some(reading) = read_event(self.endpoint, &data, self.usage, keep) else {
            out.extend_from_slice(&event);
            return;
        };
        self.usage = reading.usage;
        self.failed |= reading.failed;
        if !self.strip_usage {
            out.extend_from_slice(&event);
            return;
        }
        if reading.usage_only {
            return;
        }
        if reading.null_usage {
            if let Some(cut) = without_null_usage(&event) {
                out.extend_from_slice(&cut);
                return;
            }
        }
        out.extend_from_slice(&event);
    }
}

impl Stream for MeteredStream {
    type Item = Result<Bytes, ServiceError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => {
                    this.buffer.extend_from_slice(&chunk);
                    let out = this.complete_events();
                    if this.failed {
                        // The provider's `error` event ends the answer: metered for what was
                        // streamed, as an upstream error.
                        this.done = true;
                        this.record(UsageOutcome::UpstreamError);
                        return Poll::Ready(out.map(Ok));
                    }
                    if let Some(out) = out {
                        return Poll::Ready(Some(Ok(out)));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    let outcome = match e {
                        ServiceError::UpstreamTimeout { .. } => UsageOutcome::Timeout,
                        _ => UsageOutcome::UpstreamError,
                    };
                    this.record(outcome);
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    // An unterminated last event goes out as it is.
                    let mut out = BytesMut::new();
                    if !this.buffer.is_empty() {
                        let rest = this.buffer.split().freeze();
                        this.process(rest, &mut out);
                    }
                    this.record(UsageOutcome::Ok);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(out.freeze())));
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

impl Drop for MeteredStream {
    /// Dropped before its end: the caller went away (a no-op once recorded).
    fn drop(&mut self) {
        if !self.done {
            self.record(UsageOutcome::ClientCancelled);
        }
    }
}

/// The end (exclusive) of the first complete event in `buf`: after the blank line that ends
/// it (a line feed followed by `\n` or `\r\n`, so `\n\n`, `\r\n\r\n` and their mix). Looks
/// at each byte once, however many events `buf` holds.
pub(crate) fn event_end(buf: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', buf).find_map(|i| match buf.get(i + 1..) {
        Some([b'\n', ..]) => Some(i + 2),
        Some([b'\r', b'\n', ..]) => Some(i + 3),
        _ => None,
    })
}

/// The `data` of an event: its `data:` lines joined by newlines (borrowed from `event` when
/// it has one); `None` without any, or when it is not a JSON object (`[DONE]`).
pub(crate) fn event_data(event: &[u8]) -> Option<Cow<'_, [u8]>> {
    let mut data: Option<Cow<'_, [u8]>> = None;
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', event).chain(std::iter::once(event.len())) {
        let line = &event[start..end];
        start = end + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(rest) = line.strip_prefix(b"data:") {
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            match &mut data {
                Some(d) => {
                    let d = d.to_mut();
                    d.push(b'\n');
                    d.extend_from_slice(rest);
                }
                None => data = Some(Cow::Borrowed(rest)),
            }
        }
    }
    data.filter(|d| d.first() == Some(&b'{'))
}

/// `event` without its one `"usage":null` member (and the comma that joined it), or `None`
/// when that text is not there exactly once.
fn without_null_usage(event: &[u8]) -> Option<Vec<u8>> {
    const PATTERNS: [&[u8]; 2] = [b"\"usage\":null", b"\"usage\": null"];
    let mut found = None;
    for pattern in PATTERNS {
        let mut at = event.windows(pattern.len()).enumerate().filter(|(_, w)| *w == pattern);
        if let Some((i, _)) = at.next() {
            if at.next().is_some() || found.is_some() {
                return None;
            }
            found = Some((i, pattern.len()));
        }
    }
    let (start, len) = found?;
    let (mut from, mut to) = (start, start + len);
    let is_space = |b: u8| matches!(b, b' ' | b'\t');
    // Prefer the comma before (`…,"usage":null}`), else the one after (`{"usage":null,…`).
    let mut before = from;
    while before > 0 && is_space(event[before - 1]) {
        before -= 1;
    }
    if before > 0 && event[before - 1] == b',' {
        from = before - 1;
    } else {
        let mut after = to;
        while after < event.len() && is_space(event[after]) {
            after += 1;
        }
        if after < event.len() && event[after] == b',' {
            to = after + 1;
        }
    }
    let mut out = Vec::with_capacity(event.len() - (to - from));
    out.extend_from_slice(&event[..from]);
    out.extend_from_slice(&event[to..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_end_at_a_blank_line() {
        assert_eq!(event_end(b"data: {}\n\ndata: x"), Some(10));
        assert_eq!(event_end(b"data: {}\r\n\r\n"), Some(12));
        assert_eq!(event_end(b"data: {}\n"), None);
        assert_eq!(event_end(b"data: {}\n\r\n"), Some(11));
        assert_eq!(event_end(b"data: {}\r\n"), None);
        assert_eq!(event_end(b"data: a\r\ndata: b\r\n\r\ndata: c\n\n"), Some(20));
    }

    #[test]
    fn null_usage_is_cut_with_its_comma() {
        let cut = |s: &str| {
            without_null_usage(s.as_bytes()).map(|v| String::from_utf8_lossy(&v).into_owned())
        };
        assert_eq!(
            cut("data: {\"a\":1,\"usage\":null}\n\n").as_deref(),
            Some("data: {\"a\":1}\n\n")
        );
        assert_eq!(
            cut("data: {\"usage\":null,\"a\":1}\n\n").as_deref(),
            Some("data: {\"a\":1}\n\n")
        );
        assert_eq!(
            cut("data: {\"a\":1, \"usage\": null}\n\n").as_deref(),
            Some("data: {\"a\":1}\n\n")
        );
        assert_eq!(cut("data: {\"x\":{\"usage\":null},\"usage\":null}\n\n"), None);
        assert_eq!(event_data(b"data: [DONE]\n\n"), None);
        assert_eq!(event_data(b"data: {\"a\":1}\n\n").as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(
            event_data(b"data: {\"a\":\ndata: 1}\n\n").as_deref(),
            Some(&b"{\"a\":\n1}"[..])
        );
    }
}
