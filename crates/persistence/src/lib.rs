#![warn(missing_docs)]
//! # aigw-persistence
//!
//! Storage of aigw: one diesel schema over SQLite (the embedded default) and PostgreSQL
//! (production, many nodes), chosen by the database URL's scheme.
//!
//! - [`pool`]: the [`DbConnection`] (`#[derive(MultiConnection)]`), the r2d2 [`Pool`] and its
//!   connection set-up (SQLite: WAL, `busy_timeout`, `foreign_keys`);
//! - [`migrations`]: the embedded migrations of `migrations/{sqlite,postgres}`;
//! - [`schema`] and [`models`]: tables and rows;
//! - [`users`], [`sessions`], [`api_keys`], [`teams`]: repositories, plain functions over a
//!   connection;
//! - [`usage`]: the usage ledger (records and daily rollups), idempotent by request id.
//! - [`changes`]: the credential change feed every node tails, and each node's progress.
//! - [`mfa`]: the TOTP second factor, its recovery codes and MFA challenges.
//! - [`response_owners`]: the API key that created each stored response (Responses API).
//!
//! Everything here is synchronous and blocking. Callers on an async runtime must run it on a
//! blocking thread (the service crate does, with `tokio::task::spawn_blocking`). This crate
//! knows nothing of HTTP.

pub mod account_tokens;
pub mod api_keys;
pub mod audit;
pub mod budget_alerts;
pub mod budgets;
pub mod changes;
pub mod error;
pub mod health;
pub mod idempotency;
pub mod in_flight;
pub mod invitations;
pub mod key_rates;
pub mod leak_reports;
pub mod mfa;
pub mod migrations;
pub mod models;
pub mod pool;
pub mod response_owners;
pub mod schema;
pub mod sessions;
pub mod sso;
pub mod teams;
pub mod usage;
pub mod usage_records;
pub mod users;
pub mod webhooks;

pub use error::PersistenceError;
pub use pool::{
    ping, statement_timeout, transaction, DatabaseUrl, DbConnection, Pool, PoolOptions, Pooler,
};
