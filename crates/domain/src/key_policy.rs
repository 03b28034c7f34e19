//! What an API key may spend and call: allowed models, a budget per UTC calendar
//! period, request and token rates, and free-form metadata. Validation and the period
//! arithmetic only; enforcement lives in the service.
//!
//! | field | stored as | valid values |
//! |---|---|---|
//! | `allowed_models` | [`ModelPatterns`] | 1 to [`MAX_MODEL_PATTERNS`] names or `*` globs, each 1 to [`MAX_MODEL_PATTERN_LEN`] printable ASCII characters |
//! | `max_budget_usd` | micro-USD ([`usd_to_micros`]) | a finite number from 0 to [`MAX_BUDGET_USD`] |
//! | `budget_period` | [`BudgetPeriod`] | `daily`, `weekly` (weeks start Monday), `monthly`, `total` |
//! | `rpm_limit`, `tpm_limit` | `i64` | an integer from 1 to [`MAX_RATE_LIMIT`] |
//! | `metadata` | [`KeyMetadata`] | at most [`MAX_METADATA_ENTRIES`] string values, [`MAX_METADATA_BYTES`] bytes of keys and values in all |

use crate::validation::FieldError;
use chrono::{DateTime, Datelike, Days, Months, NaiveDate, TimeZone, Utc};
use std::collections::BTreeMap;
use std::fmt;

/// Most patterns in `allowed_models`.
pub const MAX_MODEL_PATTERNS: usize = 100;
/// Longest pattern in `allowed_models`, in characters.
pub const MAX_MODEL_PATTERN_LEN: usize = 200;
/// Largest `max_budget_usd`, in USD (a billion: far above any real budget, far below `i64`
/// micro-USD).
pub const MAX_BUDGET_USD: f64 = 1_000_000_000.0;
/// Largest `rpm_limit` or `tpm_limit`.
pub const MAX_RATE_LIMIT: i64 = 1_000_000_000;
/// Most entries in `metadata`.
pub const MAX_METADATA_ENTRIES: usize = 16;
/// Most bytes of `metadata` keys and values together (UTF-8).
pub const MAX_METADATA_BYTES: usize = 4096;

/// What a budget does with a call whose worst case does not fit in what is left of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BudgetMode {
    /// Refuse it (429 `budget_exceeded`, naming what it would reserve).
    #[default]
    Refuse,
    /// Lower its `max_tokens` (and `max_completion_tokens`) to what is left, and refuse it only
    /// when not even one completion token per choice fits; the answer then ends with
    /// `finish_reason: "length"` where it is cut.
    Clamp,
}

impl BudgetMode {
    /// The API and storage name: `refuse` or `clamp`.
    pub const fn as_str(self) -> &'static str {
        match self {
            BudgetMode::Refuse => "refuse",
            BudgetMode::Clamp => "clamp",
        }
    }

    /// Parses an API name.
    ///
    /// # Errors
    /// [`FieldError`] on `budget_mode` for any other string.
    pub fn parse(s: &str) -> Result<Self, FieldError> {
        match s {
            "refuse" => Ok(BudgetMode::Refuse),
            "clamp" => Ok(BudgetMode::Clamp),
            _ => Err(FieldError::new("budget_mode", "must be one of refuse, clamp")),
        }
    }
}

/// The UTC calendar period a budget applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetPeriod {
    /// A UTC day.
    Daily,
    /// A UTC week, Monday 00:00 to the next Monday 00:00.
    Weekly,
    /// A UTC calendar month.
    Monthly,
    /// The key's whole life: the budget never resets.
    Total,
}

impl BudgetPeriod {
    /// Every period, in declaration order.
    pub const ALL: [BudgetPeriod; 4] =
        [BudgetPeriod::Daily, BudgetPeriod::Weekly, BudgetPeriod::Monthly, BudgetPeriod::Total];

    /// The API and storage name.
    pub const fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Daily => "daily",
            BudgetPeriod::Weekly => "weekly",
            BudgetPeriod::Monthly => "monthly",
            BudgetPeriod::Total => "total",
        }
    }

    /// Parses an API name.
    ///
    /// # Errors
    /// [`FieldError`] on `budget_period` for any other string.
    pub fn parse(s: &str) -> Result<Self, FieldError> {
        Self::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| {
            FieldError::new("budget_period", "must be one of daily, weekly, monthly, total")
        })
    }

    /// The first UTC day of the period containing `now` (`None` for [`BudgetPeriod::Total`]:
    /// every day counts).
    pub fn start_day(self, now: DateTime<Utc>) -> Option<NaiveDate> {
        let today = now.date_naive();
        match self {
            BudgetPeriod::Daily => Some(today),
            BudgetPeriod::Weekly => {
                today.checked_sub_days(Days::new(u64::from(today.weekday().num_days_from_monday())))
            }
            BudgetPeriod::Monthly => today.with_day(1),
            BudgetPeriod::Total => None,
        }
    }

    /// When the period containing `now` ends and the budget resets (UTC midnight), or `None`
    /// for [`BudgetPeriod::Total`].
    pub fn reset_at(self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let start = self.start_day(now)?;
        let end = match self {
            BudgetPeriod::Daily => start.checked_add_days(Days::new(1)),
            BudgetPeriod::Weekly => start.checked_add_days(Days::new(7)),
            BudgetPeriod::Monthly => start.checked_add_months(Months::new(1)),
            BudgetPeriod::Total => None,
        }?;
        Some(Utc.from_utc_datetime(&end.and_hms_opt(0, 0, 0)?))
    }
}

impl fmt::Display for BudgetPeriod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `max_budget_usd` in micro-USD, rounded to the nearest micro-dollar.
///
/// # Errors
/// [`FieldError`] on `max_budget_usd` when not finite, negative or above [`MAX_BUDGET_USD`].
pub fn usd_to_micros(usd: f64) -> Result<i64, FieldError> {
    if !usd.is_finite() || usd < 0.0 {
        return Err(FieldError::new("max_budget_usd", "must be a number of USD, 0 or more"));
    }
    if usd > MAX_BUDGET_USD {
        return Err(FieldError::new("max_budget_usd", "must be at most 1000000000"));
    }
    #[allow(clippy::cast_possible_truncation)]
    Ok((usd * 1_000_000.0).round() as i64)
}

/// Checks an `rpm_limit` or `tpm_limit` (named `field`).
///
/// # Errors
/// [`FieldError`] on `field` unless `1 <= limit <= MAX_RATE_LIMIT`.
pub fn rate_limit(limit: i64, field: &str) -> Result<i64, FieldError> {
    if (1..=MAX_RATE_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(FieldError::new(field, "must be an integer from 1 to 1000000000"))
    }
}

/// The model names or `*` globs a key may call (`gpt-4o*` matches `gpt-4o` and `gpt-4o-mini`).
/// A pattern that matches no configured model is allowed (models come and go).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPatterns(Vec<String>);

impl ModelPatterns {
    /// Validates `patterns` (the `allowed_models` field); duplicates are dropped, order kept.
    ///
    /// # Errors
    /// [`FieldError`] on `allowed_models` when empty or too long, or on `allowed_models[i]`
    /// for an empty, too long or non-printable-ASCII pattern.
    pub fn parse(patterns: &[String]) -> Result<Self, FieldError> {
        if patterns.is_empty() {
            return Err(FieldError::new(
                "allowed_models",
                "must name at least one model (null allows every model)",
            ));
        }
        if patterns.len() > MAX_MODEL_PATTERNS {
            return Err(FieldError::new("allowed_models", "must have at most 100 entries"));
        }
        let mut kept: Vec<String> = Vec::with_capacity(patterns.len());
        for (i, p) in patterns.iter().enumerate() {
            let field = format!("allowed_models[{i}]");
            if p.is_empty() || p.len() > MAX_MODEL_PATTERN_LEN {
                return Err(FieldError::new(field, "must be 1 to 200 characters"));
            }
            if !p.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(FieldError::new(
                    field,
                    "must be printable ASCII without spaces (a model name or a * glob)",
                ));
            }
            if !kept.contains(p) {
                kept.push(p.clone());
            }
        }
        Ok(Self(kept))
    }

    /// Patterns read back from storage (validated when written).
    pub fn from_storage(patterns: Vec<String>) -> Self {
        Self(patterns)
    }

    /// The patterns, in the order given.
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    /// Whether `model` matches one of the patterns (`*` matches any run of characters,
    /// every other character itself).
    pub fn allows(&self, model: &str) -> bool {
        self.0.iter().any(|p| glob_matches(p.as_bytes(), model.as_bytes()))
    }

    /// The patterns joined by commas (the `current` of a 403).
    pub fn joined(&self) -> String {
        self.0.join(",")
    }
}

/// `*`-only glob matching, linear in practice (the classic backtrack-to-last-star method).
fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// A key's `metadata`: string values by string keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyMetadata(BTreeMap<String, String>);

impl KeyMetadata {
    /// Validates `entries` (the `metadata` field).
    ///
    /// # Errors
    /// [`FieldError`] on `metadata` for more than [`MAX_METADATA_ENTRIES`] entries or more
    /// than [`MAX_METADATA_BYTES`] bytes in all, or on `metadata.<key>` for an empty key.
    pub fn parse(entries: BTreeMap<String, String>) -> Result<Self, FieldError> {
        if entries.len() > MAX_METADATA_ENTRIES {
            return Err(FieldError::new("metadata", "must have at most 16 entries"));
        }
        if entries.keys().any(String::is_empty) {
            return Err(FieldError::new("metadata", "keys must not be empty"));
        }
        let bytes: usize = entries.iter().map(|(k, v)| k.len() + v.len()).sum();
        if bytes > MAX_METADATA_BYTES {
            return Err(FieldError::new(
                "metadata",
                "must hold at most 4096 bytes of keys and values in all",
            ));
        }
        Ok(Self(entries))
    }

    /// Metadata read back from storage (validated when written).
    pub fn from_storage(entries: BTreeMap<String, String>) -> Self {
        Self(entries)
    }

    /// The entries, sorted by key.
    pub fn entries(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).unwrap_or_default()
    }

    #[test]
    fn periods_are_utc_calendar_periods_and_weeks_start_monday() {
        // 2026-11-22 is a Sunday.
        let now = at("2026-11-22T23:59:59Z");
        let day = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok();
        assert_eq!(BudgetPeriod::Daily.start_day(now), day("2026-11-22"));
        assert_eq!(BudgetPeriod::Weekly.start_day(now), day("2026-11-16"));
        assert_eq!(BudgetPeriod::Monthly.start_day(now), day("2026-11-01"));
        assert_eq!(BudgetPeriod::Total.start_day(now), None);
        assert_eq!(BudgetPeriod::Daily.reset_at(now), Some(at("2026-11-23T00:00:00Z")));
        assert_eq!(BudgetPeriod::Weekly.reset_at(now), Some(at("2026-11-23T00:00:00Z")));
        assert_eq!(BudgetPeriod::Monthly.reset_at(now), Some(at("2026-12-01T00:00:00Z")));
        assert_eq!(BudgetPeriod::Total.reset_at(now), None);
        let monday = at("2026-11-23T00:00:00Z");
        assert_eq!(BudgetPeriod::Weekly.start_day(monday), day("2026-11-23"));
        assert_eq!(BudgetPeriod::Weekly.reset_at(monday), Some(at("2026-11-30T00:00:00Z")));
        let december = at("2026-12-31T12:00:00Z");
        assert_eq!(BudgetPeriod::Monthly.reset_at(december), Some(at("2027-01-01T00:00:00Z")));
    }

    #[test]
    fn periods_parse_by_name_only() {
        for p in BudgetPeriod::ALL {
            assert_eq!(BudgetPeriod::parse(p.as_str()), Ok(p));
        }
        assert_eq!(BudgetPeriod::parse("hourly").map_err(|e| e.field), Err("budget_period".into()));
        assert!(BudgetPeriod::parse("Daily").is_err());
    }

    #[test]
    fn budgets_are_micro_usd_and_never_negative() {
        assert_eq!(usd_to_micros(10.0), Ok(10_000_000));
        assert_eq!(usd_to_micros(0.0000014), Ok(1));
        assert_eq!(usd_to_micros(0.0), Ok(0));
        for bad in [-0.01, f64::NAN, f64::INFINITY, 1e10] {
            assert_eq!(usd_to_micros(bad).map_err(|e| e.field), Err("max_budget_usd".into()));
        }
    }

    #[test]
    fn rate_limits_are_positive() {
        assert_eq!(rate_limit(1, "rpm_limit"), Ok(1));
        assert!(rate_limit(0, "rpm_limit").is_err());
        assert_eq!(rate_limit(-5, "tpm_limit").map_err(|e| e.field), Err("tpm_limit".into()));
    }

    #[test]
    fn globs_match_runs_of_characters() {
        let p = |list: &[&str]| {
            ModelPatterns::parse(&list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .unwrap_or_else(|_| ModelPatterns::from_storage(Vec::new()))
        };
        let gpt = p(&["gpt-4o*"]);
        assert!(gpt.allows("gpt-4o"));
        assert!(gpt.allows("gpt-4o-mini"));
        assert!(!gpt.allows("gpt-4"));
        assert!(!gpt.allows("xgpt-4o"));
        assert!(p(&["*"]).allows("anything"));
        assert!(p(&["echo", "*-mini"]).allows("o3-mini"));
        assert!(p(&["a*b*c"]).allows("aXXbYYc"));
        assert!(!p(&["a*b*c"]).allows("aXXbYY"));
        assert!(!p(&["echo"]).allows("echo2"));
        assert_eq!(p(&["a", "b", "a"]).joined(), "a,b");
    }

    #[test]
    fn model_patterns_are_validated() {
        let field = |list: &[&str]| {
            ModelPatterns::parse(&list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .err()
                .map(|e| e.field)
        };
        assert_eq!(field(&[]), Some("allowed_models".into()));
        assert_eq!(field(&["ok", ""]), Some("allowed_models[1]".into()));
        assert_eq!(field(&["has space"]), Some("allowed_models[0]".into()));
        assert_eq!(field(&["ok"]), None);
    }

    #[test]
    fn metadata_is_bounded() {
        let many: BTreeMap<String, String> =
            (0..17).map(|i| (format!("k{i}"), "v".to_owned())).collect();
        assert!(KeyMetadata::parse(many).is_err());
        let big = BTreeMap::from([("k".to_owned(), "x".repeat(4096))]);
        assert!(KeyMetadata::parse(big).is_err());
        let fits = BTreeMap::from([("k".to_owned(), "x".repeat(4095))]);
        assert!(KeyMetadata::parse(fits).is_ok());
        assert!(KeyMetadata::parse(BTreeMap::from([(String::new(), "v".to_owned())])).is_err());
    }
}
