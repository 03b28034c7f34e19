//! `[alerts]`: when budget alerts are sent and how team webhooks are delivered.

use serde::Deserialize;

/// `[alerts]` (docs/alerts.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertConfig {
    /// Send budget alerts at all (default true).
    pub enabled: bool,
    /// The thresholds, percent of a budget (default 50, 80 and 100; each 1 to 100): each is
    /// sent once per budget and period, when the spend reaches it (the top one also when the
    /// budget refuses a call).
    pub thresholds: Vec<u32>,
    /// Seconds a webhook receiver has to answer (default 10).
    pub webhook_timeout_secs: u64,
    /// Attempts at one delivery before it is given up (default 8).
    pub webhook_max_attempts: u32,
    /// The wait after a first failed attempt, in seconds (default 10), doubled per attempt up
    /// to an hour.
    pub webhook_retry_base_secs: u64,
    /// Allow `http://` webhook URLs and addresses that are not public (loopback, private,
    /// link-local): for a receiver inside the operator's network (default false).
    pub webhook_allow_private: bool,
    /// Teams whose budget use is exported as a gauge, at most, per node (default 100; the
    /// first teams seen); 0: none.
    pub team_gauges: usize,
}

impl Default for AlertConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            thresholds: vec![50, 80, 100],
            webhook_timeout_secs: 10,
            webhook_max_attempts: 8,
            webhook_retry_base_secs: 10,
            webhook_allow_private: false,
            team_gauges: 100,
        }
    }
}

impl AlertConfig {
    /// The thresholds, ascending, without duplicates.
    ///
    /// # Errors
    /// A message naming `alerts.thresholds` when one is not 1 to 100.
    pub fn checked_thresholds(&self) -> Result<Vec<u32>, String> {
        let mut thresholds = self.thresholds.clone();
        if let Some(bad) = thresholds.iter().find(|t| !(1..=100).contains(*t)) {
            return Err(format!("alerts.thresholds: {bad} is not a percent from 1 to 100"));
        }
        thresholds.sort_unstable();
        thresholds.dedup();
        Ok(thresholds)
    }
}
