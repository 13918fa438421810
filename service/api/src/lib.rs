//! # baton-api
//!
//! Maps HTTP/JSON to Baton's commands and outcomes back to HTTP: actix-web
//! handlers (kept thin), utoipa schemas for the OpenAPI document, and
//! `application/problem+json` errors from one table ([`error::ApiError`]).
//!
//! ## Modules
//!
//! - `routes`: the route table the router is built from ([`route_table`],
//!   [`configure`]), the admission middleware (auth, then rate limit) and 404/405.
//! - [`auth`]: the auth file, who a request is ([`auth::Authenticator`]) and what it may
//!   use ([`auth::Caller`]).
//! - [`rate_limit`]: the request-rate token bucket of each principal on this node.
//! - `state`: what every handler shares ([`ApiState`], [`ApiSettings`]).
//! - [`request`]: raw input into checked values: bodies, names, lease ids,
//!   `Idempotency-Key`, read consistency, paging.
//! - [`request_span`]: the trace span of each request, named after its operation and
//!   parented on the caller's `traceparent`.
//! - [`respond`]: proposing commands as the caller, each with its typed reply
//!   accessor, and success answers with their headers.
//! - [`claim`]: the one skeleton of every request that may wait in line (`:acquire`
//!   of a lock, several locks or a semaphore, `:campaign`): propose, wait in line,
//!   and reduce every end to granted, held or not granted.
//! - [`error`]: the one table from errors to HTTP status, stable code and problem body.
//! - [`paging`]: the one paging handler of the list endpoints ([`paging::list_page`]).
//! - [`locks`]: `/v1/locks`: acquire exclusive or shared (with FIFO wait), renew,
//!   release, validate, inspect, list.
//! - [`multi_acquire`]: `POST /v1/locks:acquire`, several locks together or none.
//! - [`semaphores`]: `/v1/semaphores`: counting semaphores.
//! - [`leases`]: `/v1/leases`: create, keep alive, inspect, revoke.
//! - [`elections`]: `/v1/elections`: campaign (with FIFO wait), proclaim, resign, inspect.
//! - [`names`]: `/v1/names`: the cluster-unique name registry.
//! - [`force_release`]: the admin `:revoke` of a lock, an election or a name.
//! - [`watch`]: `GET /v1/watch` and `:observe`, SSE streams from this replica's watch hub.
//! - [`cluster`]: cluster status, health, readiness and Prometheus metrics.
//! - [`members`]: adding and removing nodes (admin).
//! - `disconnect`: noticing that a waiting request's client went away ([`on_connect`],
//!   [`client_gone`]).
//! - [`openapi`]: the OpenAPI document, generated from the handlers ([`ApiDoc`]).
//! - [`operation`]: the OpenAPI operation id of a routed request, the name that
//!   request metrics and spans carry.
//! - [`request_metrics`]: requests by operation, status and code, latency by
//!   operation, refusals and watch streams (the API's half of `/metrics`).
//! - `spec_rules`: rules applied to the generated document for whole classes of
//!   operations (auth, error statuses, bounds, links).
//! - `spec_examples`: the document's success examples, serialized from the answer types.
//! - `docs`: `/openapi.json`, `/docs` and `/ui`, compiled into the binary.

pub mod auth;
pub mod claim;
pub mod cluster;
mod disconnect;
mod docs;
pub mod elections;
pub mod error;
pub mod force_release;
pub mod leases;
pub mod locks;
pub mod members;
pub mod multi_acquire;
pub mod names;
pub mod openapi;
pub mod operation;
pub mod paging;
pub mod rate_limit;
pub mod request;
pub mod request_metrics;
pub mod request_span;
pub mod respond;
mod routes;
pub mod semaphores;
mod spec_examples;
mod spec_rules;
mod state;
pub mod watch;

pub use disconnect::{client_gone, hand_over_to_stream, on_connect, ClientCertificate};
pub use openapi::{openapi_json, ApiDoc};
pub use routes::{configure, route_table, RouteEntry};
pub use state::{ApiSettings, ApiState};
