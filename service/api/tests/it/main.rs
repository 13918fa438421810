//! baton-api's integration tests, one binary (each test binary links RocksDB):
//! the HTTP API in process against a real node, bad input, watch streams and the
//! committed OpenAPI document.
#![allow(clippy::unwrap_used, missing_docs)]

mod api;
mod bad_input;
mod metrics;
mod modes;
mod openapi_drift;
mod support;
mod watch;
