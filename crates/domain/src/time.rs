//! Timestamp rendering: RFC 3339 in UTC with a `Z` suffix (DESIGN.md "Storage").

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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn renders_utc_with_z() {
        let t = Utc.with_ymd_and_hms(2026, 11, 20, 23, 48, 45).single();
        assert_eq!(t.map(format_timestamp).as_deref(), Some("2026-11-20T23:48:45Z"));
    }
}
