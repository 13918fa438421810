//! `/v1/semaphores`: counting semaphores. At most `limit` permits out at a time,
//! each holder with its own fencing token, FIFO without overtaking; acquire
//! (with wait), renew, release, inspect, list.

use actix_web::web;
use actix_web::{HttpRequest, HttpResponse};
use baton_core::{
    Command, CoreError, HolderView, PermitGrant, QueuedView, Reply, SemaphoreView, StateMachine,
};
use baton_raft::QueueKind;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::{Caller, Kind};
use crate::claim::{claim, ClaimEnd, ClaimTerms, Permits};
use crate::error::{ApiError, Problem};
use crate::locks::{HolderBody, LockReleased};
use crate::paging::list_page;
use crate::request::{
    checked_name, parse_lease_id, parse_required_body, read_body, settle_read, ListQuery, ReadQuery,
};
use crate::respond::{propose, Answer};
use crate::state::ApiState;

/// Body of `:acquire`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SemaphoreAcquireBody {
    /// The semaphore's number of permits. The first acquirer's limit stands
    /// while anyone holds or waits; another value is `limit_mismatch`.
    pub limit: u32,
    /// Permits to take (1 to `limit`, default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// Hang the permits on this lease; without it, a lease is created for them
    /// alone (and revoked on release).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// TTL of the lease created when `lease_id` is absent (ignored otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Who holds them (defaults to the lease's holder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Wait in the FIFO queue up to this long (0 = try once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// Permits granted.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PermitsGranted {
    /// Semaphore name.
    pub name: String,
    /// Fencing token of this holding: unique, greater than every token before it.
    pub token: u64,
    /// Permits held.
    pub permits: u32,
    /// The semaphore's limit.
    pub limit: u32,
    /// The lease the permits hang on.
    pub lease_id: String,
    /// That lease's TTL.
    pub ttl_ms: u64,
    /// Holder identity.
    pub holder: String,
    /// Revision of the grant.
    pub revision: u64,
}

/// A renewed holding.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PermitsRenewed {
    /// Semaphore name.
    pub name: String,
    /// The (unchanged) fencing token.
    pub token: u64,
    /// The lease TTL that restarted now.
    pub ttl_ms: u64,
}

/// A semaphore as anyone may see it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SemaphoreInfo {
    /// Semaphore name.
    pub name: String,
    /// Its limit; null when nobody holds or waits (the next acquirer sets it).
    pub limit: Option<u32>,
    /// Permits out.
    pub in_use: u64,
    /// Every holder, in grant order.
    pub holders: Vec<PermitHolder>,
    /// Requests waiting in the queue.
    pub waiters: usize,
    /// Who waits and for how many permits, in line order (the first 32).
    pub queue: Vec<QueuedPermits>,
}

/// One holder of a semaphore.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PermitHolder {
    /// Holder identity.
    pub holder: String,
    /// Its fencing token.
    pub token: u64,
    /// Permits it holds.
    pub permits: u32,
    /// Revision since which it holds them.
    pub since_revision: u64,
}

/// A request waiting for permits.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueuedPermits {
    /// Who waits.
    pub holder: String,
    /// Permits it asks for.
    pub permits: u32,
}

/// A page of semaphores.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SemaphorePage {
    /// Semaphores that are held or have waiters, in name order.
    pub items: Vec<SemaphoreInfo>,
    /// Pass as `page_token` for the next page; null on the last page.
    pub next_page_token: Option<String>,
}

impl From<HolderView> for PermitHolder {
    fn from(view: HolderView) -> Self {
        PermitHolder {
            holder: view.holder,
            token: view.token,
            permits: view.permits,
            since_revision: view.since_revision,
        }
    }
}

impl From<QueuedView> for QueuedPermits {
    fn from(view: QueuedView) -> Self {
        QueuedPermits {
            holder: view.holder,
            permits: view.permits,
        }
    }
}

impl From<SemaphoreView> for SemaphoreInfo {
    fn from(view: SemaphoreView) -> Self {
        SemaphoreInfo {
            name: view.name,
            limit: view.limit,
            in_use: view.in_use,
            holders: view.holders.into_iter().map(PermitHolder::from).collect(),
            waiters: view.waiters,
            queue: view.queue.into_iter().map(QueuedPermits::from).collect(),
        }
    }
}

fn granted_answer(granted: PermitGrant, revision: u64, replayed: bool) -> HttpResponse {
    let token = granted.grant.token;
    let body = PermitsGranted {
        name: granted.grant.name,
        token,
        permits: granted.permits,
        limit: granted.limit,
        lease_id: granted.grant.lease_id.to_string(),
        ttl_ms: granted.grant.ttl_ms,
        holder: granted.grant.holder,
        revision,
    };
    Answer::ok(body, revision)
        .with_token(token)
        .replay(replayed)
        .into_response()
}

/// Who holds the semaphore now, as the refusal of a request that did not get in.
fn full_now(state: &ApiState, name: &str) -> ApiError {
    let view = state.node.read(|sm| sm.semaphore(name));
    ApiError::Core(CoreError::SemaphoreFull {
        in_use: view.in_use,
        limit: view.limit.unwrap_or(0),
        waiters: view.waiters as u64,
    })
}

/// Take permits of a semaphore, or wait for them in FIFO order up to `wait_ms`.
#[utoipa::path(post, operation_id = "acquire_permits", path = "/v1/semaphores/{name}:acquire", tag = "semaphores",
    params(("name" = String, Path, description = "Semaphore name; `/` allowed (literal or %2F)"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body(content = SemaphoreAcquireBody,
        example = json!({"limit": 8, "permits": 1, "holder": "worker-3", "ttl_ms": 15000, "wait_ms": 30000})),
    responses(
        (status = 200, body = PermitsGranted, description = "Granted (at once, or after waiting in line)",
            headers(("Baton-Fencing-Token" = u64, description = "The holding's token"))),
        (status = 409, body = Problem, content_type = "application/problem+json",
            description = "`semaphore_full`: not enough permits are free, or others wait first, and `wait_ms` ran out (`in_use`, `limit`); `limit_mismatch`: the semaphore's limit is another (`limit`)",
            example = json!({"type": "https://baton.dev/errors/semaphore_full", "title": "Semaphore is full", "status": 409,
                "detail": "the semaphore has 8 of 8 permits out and 2 requests waiting", "code": "semaphore_full", "in_use": 8, "limit": 8})),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_limit (0 or above 1000000), invalid_name, invalid_ttl, invalid_wait, invalid_body"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "invalid_permits: 0, or more than the limit (a request no release can ever satisfy); idempotency_key_reused",
            example = json!({"type": "https://baton.dev/errors/invalid_permits", "title": "Invalid permits", "status": 422,
                "detail": "permits must be between 1 and the limit 8, got 9", "code": "invalid_permits"})),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "quota_exceeded"),
    ))]
pub async fn acquire(
    state: web::Data<ApiState>,
    http: HttpRequest,
    path: web::Path<String>,
    caller: Caller,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let name = checked_name(&path)?;
    caller.require(Kind::Semaphore, &name)?;
    let input: SemaphoreAcquireBody = parse_required_body(&body)?;
    let terms = ClaimTerms {
        lease_id: input.lease_id.as_deref(),
        ttl_ms: input.ttl_ms,
        wait_ms: input.wait_ms,
    };
    let queue = QueueKind::Semaphore(name.clone());
    let end = claim::<Permits>(&state, &http, &body, queue, terms, |lease, waiter| {
        Command::AcquirePermits {
            name: name.clone(),
            lease,
            holder: input.holder.clone(),
            limit: input.limit,
            permits: input.permits.unwrap_or(1),
            waiter,
        }
    })
    .await?;
    match end {
        ClaimEnd::Won(won) => Ok(granted_answer(won.granted, won.revision, won.replayed)),
        ClaimEnd::Held((in_use, limit)) => {
            let waiters = state.node.read(|sm| sm.semaphore(&name).waiters as u64);
            Err(ApiError::Core(CoreError::SemaphoreFull {
                in_use,
                limit,
                waiters,
            }))
        }
        ClaimEnd::NotGranted => Err(full_now(&state, &name)),
    }
}

/// Renew: keep the lease alive and check that this token still holds permits.
#[utoipa::path(post, operation_id = "renew_permits", path = "/v1/semaphores/{name}:renew", tag = "semaphores",
    params(("name" = String, Path)),
    request_body = HolderBody,
    responses(
        (status = 200, body = PermitsRenewed),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "permits_lost"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
    ))]
pub async fn renew(
    state: web::Data<ApiState>,
    caller: Caller,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let name = checked_name(&path)?;
    caller.require(Kind::Semaphore, &name)?;
    let input: HolderBody = parse_required_body(&body)?;
    let lease_id = parse_lease_id(&input.lease_id)?;
    state.node.linearizable().await?;
    caller.require_lease(&state, lease_id)?;
    state
        .node
        .read(|sm| sm.check_permits_holder(&name, lease_id, input.token))?;
    let ttl_ms = state
        .node
        .keep_alive(lease_id)
        .await?
        .ok_or(ApiError::Core(CoreError::LeaseNotFound))?;
    let revision = state.node.revision();
    Ok(Answer::ok(
        PermitsRenewed {
            name,
            token: input.token,
            ttl_ms,
        },
        revision,
    )
    .with_token(input.token)
    .into_response())
}

/// Release permits; the requests at the head of the line that now fit are granted.
#[utoipa::path(post, operation_id = "release_permits", path = "/v1/semaphores/{name}:release", tag = "semaphores",
    params(("name" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body = HolderBody,
    responses(
        (status = 200, body = LockReleased),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "permits_lost"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
    ))]
pub async fn release(
    state: web::Data<ApiState>,
    http: HttpRequest,
    caller: Caller,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let name = checked_name(&path)?;
    caller.require(Kind::Semaphore, &name)?;
    let input: HolderBody = parse_required_body(&body)?;
    let lease_id = parse_lease_id(&input.lease_id)?;
    let command = Command::ReleasePermits {
        name,
        lease_id,
        token: input.token,
    };
    let done = propose(&state, &http, &body, command, Reply::into_permits_released).await?;
    let answer = Answer::ok(
        LockReleased {
            released: true,
            revision: done.revision,
        },
        done.revision,
    )
    .replay(done.replayed);
    Ok(answer.into_response())
}

/// Inspect a semaphore. A free one has no limit and nothing out.
#[utoipa::path(get, operation_id = "get_semaphore", path = "/v1/semaphores/{name}", tag = "semaphores",
    params(("name" = String, Path), ReadQuery),
    responses(
        (status = 200, body = SemaphoreInfo),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_name"),
        (status = 504, body = Problem, content_type = "application/problem+json", description = "revision_not_reached"),
    ))]
pub async fn get(
    state: web::Data<ApiState>,
    path: web::Path<String>,
    query: web::Query<ReadQuery>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let name = checked_name(&path)?;
    caller.require(Kind::Semaphore, &name)?;
    settle_read(&state, &query).await?;
    let (view, revision) = state.node.read(|sm| (sm.semaphore(&name), sm.revision()));
    Ok(Answer::ok(SemaphoreInfo::from(view), revision).into_response())
}

/// List semaphores that are held or have waiters, in name order.
#[utoipa::path(get, operation_id = "list_semaphores", path = "/v1/semaphores", tag = "semaphores",
    params(ListQuery),
    responses(
        (status = 200, body = SemaphorePage),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_query"),
    ))]
pub async fn list(
    state: web::Data<ApiState>,
    query: web::Query<ListQuery>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require_any(Kind::Semaphore)?;
    let fetch =
        |sm: &StateMachine, prefix: &str, after: Option<&str>, n| sm.semaphores(prefix, after, n);
    let listed = list_page(&state, &caller, Kind::Semaphore, &query, fetch, |v| &v.name).await?;
    let page = SemaphorePage {
        items: listed.items.into_iter().map(SemaphoreInfo::from).collect(),
        next_page_token: listed.next_page_token,
    };
    Ok(Answer::ok(page, listed.revision).into_response())
}
