//! The black-box integration tests of `aigw`, as one test binary: each module drives the
//! real server (or the real `aigw` binary) over HTTP on a random port, against a fresh SQLite
//! file and a fresh PostgreSQL database per test.
//!
//! One binary instead of one per file: every integration-test binary links the whole service
//! (bundled SQLite, libpq and OpenSSL included), so thirteen of them cost thirteen links and
//! several gigabytes of `target/`. `cargo test -- auth::` still runs one file's tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::too_many_lines)]

#[macro_use]
mod common;

mod account_email;
mod admin;
mod alerts;
mod api_keys;
mod audit;
mod auth;
mod binary;
mod budget_walkarounds;
mod budgets;
mod chat;
mod connection_caps;
mod console;
mod console_account;
mod console_admin;
mod console_team_usage;
mod console_teams;
mod console_usage;
mod credential_cache;
mod credentials;
mod db_faults;
mod embeddings;
mod errors;
mod failover;
mod hostile_input;
mod http_semantics;
mod idempotency;
mod jwt;
mod key_counters_redis;
mod key_leases;
mod key_policy;
mod leaks;
mod limits;
mod lookalike_emails;
mod messages;
mod mfa;
mod observability;
mod openapi_contract;
mod operator_lists;
mod outage;
mod permissions;
mod pgbouncer;
mod rate_limit_contract;
mod registration;
mod responses;
mod responses_stored;
mod routing;
mod self_service;
mod sessions;
mod slow_clients;
mod sso;
mod teams;
mod unauthenticated;
mod upstream_connections;
mod upstream_errors;
mod usage;
mod user_budgets;
