//! Timestamp rendering: RFC 3339 in UTC with a `Z` suffix.

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

/// Renders `t` as RFC 3339 in UTC with `Z`, with fractional seconds only when they are not
/// zero: `2026-11-20T23:48:45Z`, `2026-11-20T23:48:45.250Z`.
pub fn format_timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// The current time, truncated to whole microseconds: the finest precision both storage
/// backends keep, so a value reads back exactly as it was written.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// `t` truncated to whole microseconds (see [`now`]).
pub fn truncate_to_micros(t: DateTime<Utc>) -> DateTime<Utc> {
    t.trunc_subsecs(6)
}

/// The latest instant a client may give (an `expires_at`, a cursor's time): the end of year
/// 9999 UTC, in microseconds since the Unix epoch. Four-digit years render the same way
/// everywhere (RFC 3339, SQLite's text timestamps) and sit inside PostgreSQL's `timestamp`
/// range (4713 BC to 294276 AD), so such a value is always stored and read back.
pub const LATEST_MICROS: i64 = 253_402_300_799_999_999;

/// Whether `t` is no later than [`LATEST_MICROS`].
pub fn within_latest(t: DateTime<Utc>) -> bool {
    t.timestamp_micros() <= LATEST_MICROS
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn renders_utc_with_z() {
        let t = Utc.with_ymd_and_hms(2026, 11, 20, 23, 48, 45).single();
        assert_eq!(t.map(format_timestamp).as_deref(), Some("2026-11-20T23:48:45Z"));
    }

    #[test]
    fn latest_is_the_end_of_year_9999() {
        let latest = DateTime::from_timestamp_micros(LATEST_MICROS);
        assert_eq!(latest.map(format_timestamp).as_deref(), Some("9999-12-31T23:59:59.999999Z"));
        assert!(latest.is_some_and(within_latest));
        let later = DateTime::from_timestamp_micros(LATEST_MICROS + 1);
        assert!(!later.is_some_and(within_latest));
    }
}
