//! Spend governance: what a gateway call may spend at every level it counts against (its key,
//! and for a team-scoped key the member and the team, [`crate::levels`]): budgets
//! ([`budget`], [`clamp`]), `rpm_limit` and `tpm_limit` ([`key_rates`]), a node's leases of
//! them ([`key_leases`]) and the call's admission at every level ([`key_limits`]: the
//! [`SpendGovernance`](key_limits::SpendGovernance)), all read on the injectable clock. The
//! other limiting part is the request rate limits of `crate::rate_limit` (per client address,
//! per account, per route), which count requests, not spend. The counters live in
//! the database, the node's memory ([`key_counters`]) or Redis ([`redis_counters`],
//! [`redis_held`]); what a call holds in any of them is a [`reservation::Reservation`].
//!
//! The files depend on one another in one direction, bottom to top:
//!
//! 1. [`key_counters`]: the node's memory counters (the levels of a call are [`crate::levels`]);
//! 2. [`redis_held`]: what a call holds in Redis and its settlement;
//! 3. [`reservation`]: a reservation in any counter (a lease seen through a trait);
//! 4. [`key_rates`], [`budget`], then [`clamp`]: rate windows and budgets;
//! 5. [`redis_counters`]: both admitted in Redis in one script;
//! 6. [`admission`], then [`key_leases`]: one level's admission, a node's leases;
//! 7. [`key_limits`]: a call's admission at every level, built from the configuration
//!    ([`key_limits::SpendGovernance::from_config`]).

pub mod admission;
pub mod budget;
mod clamp;
pub mod key_counters;
pub mod key_leases;
pub mod key_limits;
pub mod key_rates;
pub mod redis_counters;
mod redis_fence;
pub mod redis_held;
pub mod reservation;
