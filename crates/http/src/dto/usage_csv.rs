//! Usage as CSV (RFC 4180, with a header row): the rows of a usage summary, and per-request
//! records a chunk at a time. Written with the `csv` crate. A text cell a person chose (a
//! key's or a member's name, an e-mail address, a model name) that a spreadsheet would take
//! for a formula (it starts with `=`, `+`, `-`, `@`, a tab or a carriage return) is prefixed
//! with `'`, as OWASP's advice on CSV injection says.

use crate::dto::usage::{UsageRecordDto, UsageRowDto, UsageSummaryData};
use std::borrow::Cow;

/// The columns of the sums, after the group's columns.
const SUMS: [&str; 10] = [
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost_usd",
    "estimated_requests",
    "priced",
];

/// The columns of a per-request record, in order.
pub(crate) const RECORD_COLUMNS: [&str; 20] = [
    "started_at",
    "request_id",
    "api_key_id",
    "model",
    "served_model",
    "provider",
    "endpoint",
    "streamed",
    "outcome",
    "attempts",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "estimated",
    "cost_usd",
    "priced",
    "latency_ms",
];

/// `text` safe from being read as a formula.
fn cell(text: &str) -> Cow<'_, str> {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        Cow::Owned(format!("'{text}"))
    } else {
        Cow::Borrowed(text)
    }
}

fn finish(writer: csv::Writer<Vec<u8>>) -> Vec<u8> {
    writer.into_inner().unwrap_or_default()
}

/// The group's columns of a summary grouped by `group_by`.
fn group_columns(group_by: &str) -> &'static [&'static str] {
    match group_by {
        "model" => &["model"],
        "api_key" => &["api_key_id", "api_key_name", "key_prefix"],
        "member" => &["member_id", "member_email", "member_name"],
        "team" => &["team_id", "team_name"],
        "endpoint" => &["endpoint"],
        _ => &["day"],
    }
}

/// The group's cells of `row`, in [`group_columns`]'s order.
fn group_cells(row: &UsageRowDto) -> Vec<&str> {
    fn text(v: &Option<String>) -> &str {
        v.as_deref().unwrap_or_default()
    }
    let mut cells = Vec::new();
    for (value, labels) in [
        (&row.day, vec![]),
        (&row.model, vec![]),
        (&row.api_key_id, vec![&row.api_key_name, &row.key_prefix]),
        (&row.member_id, vec![&row.member_email, &row.member_name]),
        (&row.team_id, vec![&row.team_name]),
        (&row.endpoint, vec![]),
    ] {
        if value.is_some() {
            cells.push(text(value));
            cells.extend(labels.into_iter().map(text));
        }
    }
    cells
}

/// `summary` as CSV: one row per group value (its columns, then the sums), no totals row.
pub(crate) fn summary_csv(summary: &UsageSummaryData) -> Vec<u8> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<&str> = group_columns(&summary.group_by).to_vec();
    header.extend(SUMS);
    let _ = writer.write_record(&header);
    for row in &summary.rows {
        let t = &row.totals;
        let mut cells: Vec<String> =
            group_cells(row).into_iter().map(|c| cell(c).into_owned()).collect();
        cells.extend([
            t.requests.to_string(),
            t.prompt_tokens.to_string(),
            t.completion_tokens.to_string(),
            t.total_tokens.to_string(),
            t.cached_tokens.to_string(),
            t.cache_write_tokens.to_string(),
            t.reasoning_tokens.to_string(),
            format!("{:.6}", t.cost_usd),
            t.estimated_requests.to_string(),
            t.priced.to_string(),
        ]);
        let _ = writer.write_record(&cells);
    }
    finish(writer)
}

/// `records` as CSV rows, after the header row when `header`.
pub(crate) fn records_csv(records: &[UsageRecordDto], header: bool) -> Vec<u8> {
    let mut writer = csv::Writer::from_writer(Vec::with_capacity(records.len() * 256 + 512));
    if header {
        let _ = writer.write_record(RECORD_COLUMNS);
    }
    for r in records {
        let _ = writer.write_record([
            r.started_at.as_str(),
            &r.request_id,
            &r.api_key_id,
            &cell(&r.model),
            &cell(&r.served_model),
            &cell(&r.provider),
            &r.endpoint,
            if r.streamed { "true" } else { "false" },
            &r.outcome,
            &r.attempts.to_string(),
            &r.prompt_tokens.to_string(),
            &r.completion_tokens.to_string(),
            &r.total_tokens.to_string(),
            &r.cached_tokens.to_string(),
            &r.cache_write_tokens.to_string(),
            &r.reasoning_tokens.to_string(),
            if r.estimated { "true" } else { "false" },
            &format!("{:.6}", r.cost_usd),
            if r.priced { "true" } else { "false" },
            &r.latency_ms.to_string(),
        ]);
    }
    finish(writer)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn formulas_are_defused_and_quotes_escaped() {
        assert_eq!(cell("=HYPERLINK(\"x\")"), "'=HYPERLINK(\"x\")");
        assert_eq!(cell("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(cell("gpt-4o"), "gpt-4o");
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer.write_record(["a,b", "say \"hi\"", "plain"]).unwrap();
        let text = String::from_utf8(finish(writer)).unwrap();
        assert_eq!(text, "\"a,b\",\"say \"\"hi\"\"\",plain\n");
    }
}
