//! `/v1/leases`: create, keep alive, inspect, revoke.

use actix_web::http::StatusCode;
use actix_web::web;
use actix_web::{HttpRequest, HttpResponse};
use baton_core::{Command, Reply};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{ApiError, Problem};
use crate::request::{parse_body, parse_lease_id, read_body};
use crate::respond::{propose, Answer};
use crate::state::ApiState;

/// Body of `POST /v1/leases`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateLeaseBody {
    /// TTL in milliseconds (default 15000, bounds configurable: 1000..=3600000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Free-text identity shown to others as who holds what (≤ 256 bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// A created lease.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseCreated {
    /// The lease id: a capability, shown only to its creator.
    pub lease_id: String,
    /// TTL in milliseconds.
    pub ttl_ms: u64,
    /// Holder identity.
    pub holder: String,
    /// Revision at which the lease was created.
    pub revision: u64,
}

/// A kept-alive lease.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseKeptAlive {
    /// The lease id.
    pub lease_id: String,
    /// The TTL that restarted now.
    pub ttl_ms: u64,
}

/// A lease and everything attached to it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseInfo {
    /// The lease id.
    pub lease_id: String,
    /// TTL in milliseconds.
    pub ttl_ms: u64,
    /// Time left before expiry, on the leader's clock.
    pub remaining_ms: u64,
    /// Holder identity.
    pub holder: String,
    /// Locks held.
    pub locks: Vec<String>,
    /// Names registered.
    pub names: Vec<String>,
    /// Elections led.
    pub elections: Vec<String>,
    /// Semaphores it holds permits of.
    pub semaphores: Vec<String>,
}

/// What a revoked lease released.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct ReleasedSet {
    /// Locks released.
    pub locks: Vec<String>,
    /// Names unregistered.
    pub names: Vec<String>,
    /// Elections stepped down from.
    pub elections: Vec<String>,
    /// Semaphores whose permits were given back.
    pub semaphores: Vec<String>,
}

/// A revoked lease.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseRevoked {
    /// Always true.
    pub revoked: bool,
    /// What it released.
    pub released: ReleasedSet,
}

/// Create a lease.
#[utoipa::path(post, operation_id = "create_lease", path = "/v1/leases", tag = "leases",
    request_body(content = Option<CreateLeaseBody>, description = "Optional; both fields optional"),
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    responses(
        (status = 201, body = LeaseCreated),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_ttl, invalid_body"),
    ))]
pub async fn create(
    state: web::Data<ApiState>,
    http: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let input: CreateLeaseBody = parse_body(&body)?;
    let command = Command::CreateLease {
        lease_id: baton_raft::Node::new_lease_id(),
        ttl_ms: input.ttl_ms.unwrap_or(state.settings.default_ttl_ms),
        holder: input.holder.unwrap_or_default(),
    };
    let done = propose(&state, &http, &body, command, Reply::into_lease_created).await?;
    let baton_core::LeaseCreated {
        lease_id,
        ttl_ms,
        holder,
    } = done.reply;
    let mut answer = Answer::ok(
        LeaseCreated {
            lease_id: lease_id.to_string(),
            ttl_ms,
            holder,
            revision: done.revision,
        },
        done.revision,
    )
    .replay(done.replayed);
    answer.status = StatusCode::CREATED;
    Ok(answer.into_response())
}

/// Keep a lease alive: its TTL restarts in full. Costs no disk write.
#[utoipa::path(post, operation_id = "keepalive_lease", path = "/v1/leases/{lease_id}:keepalive", tag = "leases",
    params(("lease_id" = String, Path)),
    responses(
        (status = 200, body = LeaseKeptAlive),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
        (status = 503, body = Problem, content_type = "application/problem+json", description = "unavailable"),
    ))]
pub async fn keepalive(
    state: web::Data<ApiState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let lease_id = parse_lease_id(&path)?;
    caller.require_lease_caught_up(&state, lease_id).await?;
    let ttl_ms = state
        .node
        .keep_alive(lease_id)
        .await?
        .ok_or(ApiError::Core(baton_core::CoreError::LeaseNotFound))?;
    let revision = state.node.revision();
    Ok(Answer::ok(
        LeaseKeptAlive {
            lease_id: lease_id.to_string(),
            ttl_ms,
        },
        revision,
    )
    .into_response())
}

/// Inspect a lease (only its creator knows its id).
#[utoipa::path(get, operation_id = "get_lease", path = "/v1/leases/{lease_id}", tag = "leases",
    params(("lease_id" = String, Path)),
    responses(
        (status = 200, body = LeaseInfo),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
    ))]
pub async fn get(
    state: web::Data<ApiState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let lease_id = parse_lease_id(&path)?;
    state.node.linearizable().await?;
    caller.require_lease(&state, lease_id)?;
    let (view, revision) = state.node.read(|sm| (sm.lease(lease_id), sm.revision()));
    let view = view.ok_or(ApiError::Core(baton_core::CoreError::LeaseNotFound))?;
    let remaining_ms = state
        .node
        .remaining(lease_id)
        .await?
        .map_or(view.ttl_ms, |left| left.as_millis() as u64);
    let info = LeaseInfo {
        lease_id: lease_id.to_string(),
        ttl_ms: view.ttl_ms,
        remaining_ms,
        holder: view.holder,
        locks: view.locks,
        names: view.names,
        elections: view.elections,
        semaphores: view.semaphores,
    };
    Ok(Answer::ok(info, revision).into_response())
}

/// Revoke a lease, releasing everything attached to it in one step.
#[utoipa::path(delete, operation_id = "revoke_lease", path = "/v1/leases/{lease_id}", tag = "leases",
    params(("lease_id" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    responses(
        (status = 200, body = LeaseRevoked),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
    ))]
pub async fn revoke(
    state: web::Data<ApiState>,
    http: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let lease_id = parse_lease_id(&path)?;
    let command = Command::RevokeLease { lease_id };
    let done = propose(&state, &http, &[], command, Reply::into_lease_ended).await?;
    let released = done.reply;
    let body = LeaseRevoked {
        revoked: true,
        released: ReleasedSet {
            locks: released.locks,
            names: released.names,
            elections: released.elections,
            semaphores: released.semaphores,
        },
    };
    let answer = Answer::ok(body, done.revision).replay(done.replayed);
    Ok(answer.into_response())
}
