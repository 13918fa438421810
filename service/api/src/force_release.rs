//! `POST /v1/{locks,elections,names}/{name}:revoke`: an admin ends another
//! holder's holding (a stuck job, a leader that no longer works) without its
//! lease id. Needs an admin token, or the cluster secret when auth is off.

use actix_web::{web, HttpRequest, HttpResponse};
use baton_core::{Command, HoldingKind, Reply};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, Problem};
use crate::request::{checked_name, parse_body, read_body};
use crate::respond::{propose, Answer};
use crate::state::ApiState;

/// Body of a force-release (optional).
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForceReleaseBody {
    /// Only if this is the current holder's token (so that a successor's
    /// holding is never ended by mistake).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
}

/// A holding an admin ended.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ForceReleased {
    /// The name.
    pub name: String,
    /// The ended holding's fencing token.
    pub token: u64,
    /// Its holder.
    pub holder: String,
}

async fn force_release(
    state: web::Data<ApiState>,
    http: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    kind: HoldingKind,
) -> Result<HttpResponse, ApiError> {
    crate::auth::require_admin_or_secret(&state, &http)?;
    let body = read_body(payload).await?;
    let name = checked_name(&path)?;
    let input: ForceReleaseBody = parse_body(&body)?;
    let command = Command::ForceRelease {
        kind,
        name: name.clone(),
        expected_token: input.token,
    };
    let done = propose(&state, &http, &body, command, Reply::into_force_released).await?;
    let baton_core::ForceReleased { token, holder } = done.reply;
    let body = ForceReleased {
        name,
        token,
        holder,
    };
    Ok(Answer::ok(body, done.revision)
        .replay(done.replayed)
        .into_response())
}

/// Force-release a lock (admin): its holder's holding ends as if its lease had
/// expired for this lock alone (the lock delay it asked for applies), and the
/// next waiter is granted. Event `lock.force_released`.
#[utoipa::path(post, operation_id = "force_release_lock", path = "/v1/locks/{name}:revoke", tag = "locks",
    params(("name" = String, Path), ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body(content = Option<ForceReleaseBody>),
    responses(
        (status = 200, body = ForceReleased),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found: the lock is not held"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "token_mismatch (with current_token)"),
    ))]
pub async fn lock(
    state: web::Data<ApiState>,
    http: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    force_release(state, http, path, payload, HoldingKind::Lock).await
}

/// Force-release an election's leadership (admin): the next candidate in line
/// is elected. Event `election.force_released`.
#[utoipa::path(post, operation_id = "force_release_election", path = "/v1/elections/{name}:revoke", tag = "elections",
    params(("name" = String, Path), ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body(content = Option<ForceReleaseBody>),
    responses(
        (status = 200, body = ForceReleased),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found: no leader"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "token_mismatch (with current_token)"),
    ))]
pub async fn election(
    state: web::Data<ApiState>,
    http: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    force_release(state, http, path, payload, HoldingKind::Election).await
}

/// Force-release a registered name (admin): it is free again. Event
/// `name.force_released`.
#[utoipa::path(post, operation_id = "force_release_name", path = "/v1/names/{name}:revoke", tag = "names",
    params(("name" = String, Path), ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body(content = Option<ForceReleaseBody>),
    responses(
        (status = 200, body = ForceReleased),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found: not registered"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "token_mismatch (with current_token)"),
    ))]
pub async fn name(
    state: web::Data<ApiState>,
    http: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    force_release(state, http, path, payload, HoldingKind::Name).await
}
