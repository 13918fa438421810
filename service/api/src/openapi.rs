//! The OpenAPI document, generated from the handlers and schemas.

use utoipa::OpenApi;

use crate::{
    cluster, docs, elections, error, force_release, leases, locks, members, multi_acquire, names,
    semaphores, watch,
};

/// Baton's API description (`GET /openapi.json`, committed as `openapi/baton.json`).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Baton",
        description = "A replicated lock-and-lease service: named locks (exclusive or shared, one or several at once) with fencing tokens, counting semaphores, leases, leader elections and cluster-unique names over HTTP/JSON. Errors are application/problem+json with a stable `code`. Every response carries `Baton-Revision`; grants also carry `Baton-Fencing-Token`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        leases::create, leases::keepalive, leases::get, leases::revoke,
        locks::acquire, locks::renew, locks::release, locks::validate, locks::get, locks::list,
        multi_acquire::acquire_all,
        semaphores::acquire, semaphores::renew, semaphores::release, semaphores::get, semaphores::list,
        force_release::lock, force_release::election, force_release::name,
        elections::campaign, elections::proclaim, elections::resign, elections::get,
        watch::observe, watch::watch,
        names::register, names::get, names::unregister, names::list,
        cluster::cluster, members::add, members::remove, cluster::healthz, cluster::readyz, cluster::metrics,
        docs::openapi, docs::docs, docs::ui,
    ),
    components(schemas(error::Problem)),
    tags(
        (name = "leases", description = "Liveness: everything on a lease goes when it expires or is revoked"),
        (name = "locks", description = "Exclusive and shared locks with a FIFO queue and fencing tokens; several at once, all or none"),
        (name = "semaphores", description = "Counting semaphores: at most `limit` permits out, FIFO without overtaking, a fencing token per holding"),
        (name = "elections", description = "One leader per name, with a published value"),
        (name = "names", description = "Cluster-unique name registry"),
        (name = "watch", description = "Server-Sent Events streams of state changes, resumable by revision"),
        (name = "cluster", description = "Cluster membership and status"),
        (name = "health", description = "Health, readiness, metrics"),
        (name = "docs", description = "This document, its reference page and the console (open without a token)"),
    )
)]
pub struct ApiDoc;

/// The OpenAPI document as pretty-printed JSON (what is committed under `openapi/`).
pub fn openapi_json() -> String {
    let mut doc = serde_json::to_value(ApiDoc::openapi())
        .unwrap_or_else(|error| serde_json::json!({"error": error.to_string()}));
    crate::spec_rules::apply(&mut doc);
    let mut text = serde_json::to_string_pretty(&doc)
        .unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"));
    text.push('\n');
    text
}
