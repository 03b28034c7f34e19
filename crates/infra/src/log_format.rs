//! The JSON log line (`log.format = "json"`): one object per event, written straight into the
//! line's buffer.
//!
//! Shape: `{"timestamp":"2026-11-22T04:10:00.123456Z","level":"INFO","message":"access",
//! <the event's fields>, "span":{"name":"request","request_id":"…"}}` — RFC 3339 UTC
//! timestamps with microseconds, the event's fields at the top level (strings, numbers,
//! booleans; anything else as its `Debug` text), and the innermost span with its fields when
//! the event happened inside one. A line written outside any span can be given the span it
//! would have had from elsewhere ([`JsonLines::with_fallback_span`]): aigw gives a request a
//! tracing span only when something needs one (OTLP export, or the text format), and
//! otherwise writes `"span":{"name":"request","request_id":"…"}` from the request's
//! task-local id, which costs nothing per request.
//!
//! tracing-subscriber's own JSON format gives the same fields but first collects them into a
//! map of `serde_json::Value`s: about 23 000 instructions per access-log line, against a few
//! thousand here (callgrind, docs/performance.md), on every request of a busy node.

use std::fmt;
use std::io::Write as _;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter of `log.format = "json"`; use with span fields formatted by
/// [`JsonSpanFields`] ([`span_fields`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines {
    fallback: Option<FallbackSpan>,
}

/// The span a line written outside any span is given: its name, its one field's name, and
/// where the field's value comes from ([`JsonLines::with_fallback_span`]).
#[derive(Debug, Clone, Copy)]
struct FallbackSpan {
    name: &'static str,
    field: &'static str,
    value: SpanValue,
}

/// Calls its argument with the value of a fallback span's field when there is one (a
/// task-local or thread-local lookup), and not at all when there is none.
pub type SpanValue = fn(with: &mut dyn FnMut(&str));

impl JsonLines {
    /// Lines written outside any span get `"span":{"name":<name>,<field>:<value>}` whenever
    /// `value` yields one.
    pub fn with_fallback_span(
        self,
        name: &'static str,
        field: &'static str,
        value: SpanValue,
    ) -> Self {
        Self { fallback: Some(FallbackSpan { name, field, value }) }
    }
}

/// Appends `text` as a JSON string (quoted and escaped). Text with nothing to escape (no
/// `"`, `\` or control character: field names, ids, routes, nearly every value) is copied
/// between quotes; the rest goes through serde_json. Going through serde_json for every key
/// and value was about 4 000 instructions of each access-log line (callgrind).
fn push_json_str(out: &mut Vec<u8>, text: &str) {
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        // Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(out, text);
    }
}

/// Appends `at` as RFC 3339 UTC with microseconds (`2026-11-22T04:10:00.123456Z`), as chrono
/// writes it.
fn push_timestamp(out: &mut Vec<u8>, at: chrono::DateTime<chrono::Utc>) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{}", at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
}

/// Writes each field as `,"name":value`.
struct Fields<'a> {
    out: &'a mut Vec<u8>,
}

impl Fields<'_> {
    fn key(&mut self, field: &Field) {
        self.out.push(b',');
        push_json_str(self.out, field.name());
        self.out.push(b':');
    }
}

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field);
        if value.is_finite() {
            let _ = write!(self.out, "{value}");
        } else {
            self.out.extend_from_slice(b"null");
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        self.out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        self.out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        self.out.extend_from_slice(if value { b"true" } else { b"false" });
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        push_json_str(self.out, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.key(field);
        push_json_str(self.out, &format!("{value:?}"));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = Vec::with_capacity(384);
        line.extend_from_slice(b"{\"timestamp\":\"");
        push_timestamp(&mut line, chrono::Utc::now());
        line.extend_from_slice(b"\",\"level\":\"");
        line.extend_from_slice(event.metadata().level().as_str().as_bytes());
        line.push(b'"');
        event.record(&mut Fields { out: &mut line });
        if let Some(span) = ctx.lookup_current() {
            line.extend_from_slice(b",\"span\":{\"name\":");
            push_json_str(&mut line, span.name());
            let extensions = span.extensions();
            // The span's fields as `JsonSpanFields` formatted them: a JSON object, or nothing.
            let fields = extensions.get::<FormattedFields<N>>().map(|f| f.fields.as_str());
            if let Some(inner) = fields
                .and_then(|f| f.strip_prefix('{'))
                .and_then(|f| f.strip_suffix('}'))
                .filter(|f| !f.is_empty())
            {
                line.push(b',');
                line.extend_from_slice(inner.as_bytes());
            }
            line.push(b'}');
        } else if let Some(fallback) = self.fallback {
            (fallback.value)(&mut |value| {
                line.extend_from_slice(b",\"span\":{\"name\":");
                push_json_str(&mut line, fallback.name);
                line.push(b',');
                push_json_str(&mut line, fallback.field);
                line.push(b':');
                push_json_str(&mut line, value);
                line.push(b'}');
            });
        }
        line.extend_from_slice(b"}\n");
        writer.write_str(std::str::from_utf8(&line).map_err(|_| fmt::Error)?)
    }
}

/// The span-field formatter to pair with [`JsonLines`].
pub fn span_fields() -> JsonSpanFields {
    JsonSpanFields
}

/// Formats a span's fields as one JSON object (`{"request_id":"…"}`) with the event fields'
/// writer ([`Fields`]); fields recorded later (`Span::record`) are added to it. It keeps the
/// object tracing-subscriber's `JsonFields` would make, without its map of
/// `serde_json::Value`s: about 6 000 instructions less per request span (callgrind).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonSpanFields;

impl<'writer> FormatFields<'writer> for JsonSpanFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut out = Vec::with_capacity(64);
        fields.record(&mut Fields { out: &mut out });
        write_object(&mut writer, &out)
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut out = Vec::with_capacity(64);
        // The fields so far, without their closing brace: the new ones follow them.
        if let Some(inner) = current.fields.strip_prefix('{').and_then(|f| f.strip_suffix('}')) {
            if !inner.is_empty() {
                out.push(b',');
                out.extend_from_slice(inner.as_bytes());
            }
        }
        fields.record(&mut Fields { out: &mut out });
        current.fields.clear();
        write_object(&mut current.as_writer(), &out)
    }
}

/// Writes `fields` (`,"name":value` each) as a JSON object.
fn write_object(writer: &mut Writer<'_>, fields: &[u8]) -> fmt::Result {
    let inner =
        std::str::from_utf8(fields.strip_prefix(b",").unwrap_or(fields)).map_err(|_| fmt::Error)?;
    writer.write_char('{')?;
    writer.write_str(inner)?;
    writer.write_char('}')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    thread_local! {
        static REQUEST_ID: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
    }

    fn request_id(with: &mut dyn FnMut(&str)) {
        REQUEST_ID.with_borrow(|id| {
            if let Some(id) = id {
                with(id);
            }
        });
    }

    fn json_lines() -> JsonLines {
        JsonLines::default().with_fallback_span("request", "request_id", request_id)
    }

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_json_objects_with_fields_and_span() {
        let captured = Captured::default();
        let sink = captured.clone();
        let sink_text = captured.clone();
        let layer = tracing_subscriber::fmt::layer()
            .event_format(json_lines())
            .fmt_fields(span_fields())
            .with_writer(move || sink.clone());
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(status = 200u16, duration_ms = 1.5, path = "/a\"b", ok = true, "access");
            tracing::info!(plain = "/v1/é", control = "a\tb\u{1}", slash = "a\\b", "escapes");
            let span =
                tracing::info_span!("request", request_id = "r-1", status = tracing::field::Empty);
            let _entered = span.enter();
            tracing::warn!(error = ?Some(3), count = -2i64, ratio = f64::NAN, "inside");
            span.record("status", 201u16);
            tracing::info!("recorded");
            let bare = tracing::info_span!("bare");
            let _inner = bare.enter();
            tracing::info!("in a span without fields");
        });
        // No span, but inside a request: the request's span as it would have been.
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .event_format(json_lines())
                .fmt_fields(span_fields())
                .with_writer(move || captured.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("outside a request");
            REQUEST_ID.set(Some("r-\"2".to_owned()));
            tracing::info!(detail = ?("a", 1), "in a request {}", 7);
            REQUEST_ID.set(None);
        });
        let text = String::from_utf8(sink_text.0.lock().unwrap().clone()).unwrap();
        let mut lines: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
        assert_eq!(lines.len(), 7, "{text}");
        let scoped = lines.pop().unwrap();
        let outside = lines.pop().unwrap();
        assert_eq!(outside["message"], "outside a request");
        assert!(outside.get("span").is_none(), "{outside}");
        assert_eq!(scoped["message"], "in a request 7");
        assert_eq!(scoped["detail"], "(\"a\", 1)");
        assert_eq!(scoped["span"], serde_json::json!({"name": "request", "request_id": "r-\"2"}));
        let first = &lines[0];
        assert_eq!(first["level"], "INFO");
        assert_eq!(first["message"], "access");
        assert_eq!(first["status"], 200);
        assert_eq!(first["duration_ms"], 1.5);
        assert_eq!(first["path"], "/a\"b");
        assert_eq!(first["ok"], true);
        assert!(first.get("span").is_none());
        let stamp = first["timestamp"].as_str().unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(stamp).is_ok() && stamp.ends_with('Z'));
        let escapes = lines.remove(1);
        assert_eq!(escapes["plain"], "/v1/é");
        assert_eq!(escapes["control"], "a\tb\u{1}");
        assert_eq!(escapes["slash"], "a\\b");
        let second = &lines[1];
        assert_eq!(second["level"], "WARN");
        assert_eq!(second["error"], "Some(3)");
        assert_eq!(second["count"], -2);
        assert!(second["ratio"].is_null());
        assert_eq!(second["span"], serde_json::json!({"name": "request", "request_id": "r-1"}));
        assert_eq!(
            lines[2]["span"],
            serde_json::json!({"name": "request", "request_id": "r-1", "status": 201})
        );
        assert_eq!(lines[3]["span"], serde_json::json!({"name": "bare"}));
    }

    #[test]
    fn timestamps_are_written_as_chrono_writes_them() {
        use chrono::{NaiveDate, TimeZone, Utc};
        let at = |y, mo, d, h, mi, s, nanos| {
            let naive = NaiveDate::from_ymd_opt(y, mo, d)
                .and_then(|date| date.and_hms_nano_opt(h, mi, s, nanos))
                .unwrap();
            Utc.from_utc_datetime(&naive)
        };
        let cases = [
            Utc::now(),
            at(2026, 11, 22, 4, 10, 0, 123_456_789),
            at(1970, 1, 1, 0, 0, 0, 0),
            at(2016, 12, 31, 23, 59, 59, 1_999_999_999), // a leap second
            at(9999, 12, 31, 23, 59, 59, 999_999_000),
            at(12345, 6, 7, 8, 9, 10, 11_000),
            at(-44, 3, 15, 12, 0, 0, 0),
        ];
        for case in cases {
            let mut out = Vec::new();
            push_timestamp(&mut out, case);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                case.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            );
        }
    }
}
