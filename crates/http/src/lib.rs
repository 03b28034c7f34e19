#![warn(missing_docs)]
//! # aigw-http
//!
//! The HTTP face of aigw (actix-web): routes, extractors, the success and error envelopes,
//! request ids, configuration and start-up. The binary `aigw` is `src/main.rs`.
//!
//! Embedding: build [`settings::Settings`], then `startup::Application::build(settings)`,
//! read its `port()`, and `run_until_stopped()`.

pub mod connections;
pub mod dto;
pub mod dto_account;
pub mod dto_account_email;
pub mod dto_admin;
pub mod dto_leaks;
pub mod dto_mfa;
pub mod dto_teams;
pub mod dto_usage;
pub mod error;
pub mod extract;
pub mod idempotency;
pub mod json_body;
pub mod observe;
pub mod openapi;
pub mod operator;
pub mod rate_limit;
pub mod routes;
pub mod secrets;
pub mod settings;
pub mod startup;
pub mod telemetry;
