#![warn(missing_docs)]
#![warn(unreachable_pub)]
//! # aigw-http
//!
//! The HTTP face of aigw (actix-web): routes, extractors, the success and error envelopes,
//! request ids, configuration and start-up. The binary `aigw` is `src/main.rs`.
//!
//! Embedding: build [`settings::Settings`], then `startup::Application::build(settings)`,
//! read its `port()`, and `run_until_stopped()`.
//!
//! Public are only what other code uses: the binary and the integration tests (`settings`,
//! `startup`, `telemetry`, `operator`, `observe::CATALOGUE`) and the fuzz targets
//! (`extract::parse_json` and a few request bodies of `dto`); everything else is
//! `pub(crate)`.

pub mod console;
pub mod dto;
mod error;
pub mod extract;
mod idempotency;
mod json_body;
mod middleware;
pub mod observe;
mod openapi;
pub mod operator;
mod rate_limit;
mod request_id;
mod routes;
mod secrets;
pub mod settings;
pub mod startup;
mod state;
pub mod telemetry;
