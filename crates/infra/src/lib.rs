#![warn(missing_docs)]
//! # aigw-infra
//!
//! Infrastructure that aigw keeps of its own because, measured against the well-kept crate
//! that does the same job, it showed a gain beyond the benchmark's noise (README.md has the
//! figures and how to measure them again). Everything else of this kind uses the crate.
//!
//! - [`log_writer`]: log lines batched in memory, in a buffer per logging thread (no lock
//!   shared between them), and written by one thread on a clock, instead of
//!   `tracing-appender`'s non-blocking writer, which wakes its thread per line.
//! - [`log_format`]: JSON log lines written straight into the line's buffer, instead of
//!   tracing-subscriber's JSON format, which builds a map of `serde_json::Value`s per line.
//! - [`upstream_pool`]: keep-alive HTTP/1.1 connections to upstreams on hyper's connections,
//!   idle ones kept per thread (a checkout is a `Vec::pop`, no lock or hash), instead of
//!   hyper-util's pooled `Client` (shared by every thread: a lock, two hashes and a spawned
//!   task per call) or reqwest (that client plus a URL parse and redirect and retry layers).

pub mod log_format;
pub mod log_writer;
pub mod upstream_pool;
