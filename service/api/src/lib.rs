//! # baton-api
//!
//! Maps HTTP/JSON to Baton's commands and outcomes back to HTTP: actix-web
//! handlers (kept thin), utoipa schemas for the OpenAPI document, and
//! `application/problem+json` errors from one table ([`error::ApiError`]).

pub mod auth;
pub mod cluster;
mod disconnect;
mod docs;
pub mod elections;
pub mod error;
pub mod force_release;
pub mod leases;
pub mod locks;
pub mod members;
pub mod names;
pub mod openapi;
pub mod rate_limit;
pub mod request;
pub mod respond;
mod routes;
mod spec_examples;
mod spec_rules;
mod state;
pub mod watch;

pub use disconnect::{client_gone, on_connect, ClientCertificate};
pub use openapi::{openapi_json, ApiDoc};
pub use routes::{configure, route_table, RouteEntry};
pub use state::{ApiSettings, ApiState};
