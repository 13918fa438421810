//! `/v1/locks`: acquire (with FIFO wait), renew, release, validate, inspect, list.

use actix_web::web;
use actix_web::{HttpRequest, HttpResponse};
use baton_core::{
    Command, CoreError, Grant, HolderView, LockMode, LockRequest, LockView, Reply, StateMachine,
};
use baton_raft::QueueKind;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::{Caller, Kind};
use crate::claim::{claim, ClaimEnd, ClaimTerms, Several, Single};
use crate::error::{ApiError, Problem};
use crate::paging::list_page;
use crate::request::{
    checked_name, parse_body, parse_lease_id, parse_required_body, read_body, settle_read,
    ListQuery, ReadQuery,
};
use crate::respond::{propose, Answer};
use crate::state::ApiState;

/// Body of `:acquire`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    /// Hang the grant on this lease; without it, a lease is created for this lock
    /// alone (and revoked on release).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// TTL of the lease created when `lease_id` is absent (ignored otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Who holds it (defaults to the lease's holder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Wait in the FIFO queue up to this long (0 = try once; max configurable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// After this grant's lease *expires*, keep the lock ungrantable this long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
    /// `exclusive` (the default: one holder, a writer) or `shared` (any number
    /// of shared holders, readers). A queued exclusive request blocks later
    /// shared ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

/// How a lock is held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One holder at a time.
    #[default]
    Exclusive,
    /// Any number of shared holders at a time, and no exclusive one.
    Shared,
}

impl From<Mode> for LockMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Exclusive => LockMode::Exclusive,
            Mode::Shared => LockMode::Shared,
        }
    }
}

impl From<LockMode> for Mode {
    fn from(mode: LockMode) -> Self {
        match mode {
            LockMode::Exclusive => Mode::Exclusive,
            LockMode::Shared => Mode::Shared,
        }
    }
}

/// A lock grant.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LockGrant {
    /// Lock name.
    pub name: String,
    /// Fencing token: unique, greater than every token before it.
    pub token: u64,
    /// The lease the grant hangs on.
    pub lease_id: String,
    /// That lease's TTL.
    pub ttl_ms: u64,
    /// Holder identity.
    pub holder: String,
    /// Revision of the grant.
    pub revision: u64,
    /// How this lease holds it (an earlier grant to the same lease keeps its mode).
    pub mode: Mode,
}

/// Body of `:renew` and `:release`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HolderBody {
    /// The holder's lease.
    pub lease_id: String,
    /// The holder's fencing token.
    pub token: u64,
}

/// A renewed grant.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LockRenewed {
    /// Lock name.
    pub name: String,
    /// The (unchanged) fencing token.
    pub token: u64,
    /// The lease TTL that restarted now.
    pub ttl_ms: u64,
}

/// A released lock.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LockReleased {
    /// Always true.
    pub released: bool,
    /// Revision of the release.
    pub revision: u64,
}

/// Body of `:validate`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidateBody {
    /// The token to check.
    pub token: u64,
}

/// Whether a token is the current holder's.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Validation {
    /// True when `token` is the current holder's token.
    pub valid: bool,
    /// The current holder's token, or null when the lock is free.
    pub current_token: Option<u64>,
}

/// A lock as anyone may see it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LockInfo {
    /// Lock name.
    pub name: String,
    /// Whether someone holds it.
    pub held: bool,
    /// Holder identity (the first holder's, when shared).
    pub holder: Option<String>,
    /// Holder's fencing token (the first holder's, when shared).
    pub token: Option<u64>,
    /// Revision since which the holder holds it (the first holder, when shared).
    pub since_revision: Option<u64>,
    /// How it is held now; null when free.
    pub mode: Option<Mode>,
    /// Every holder, in grant order: one when exclusive, any number when shared.
    pub holders: Vec<HolderInfo>,
    /// Requests waiting in the queue.
    pub waiters: usize,
    /// Who waits, in line order: the first 32 waiters' holder identities.
    pub queue: Vec<String>,
    /// While the lock is in lock delay (its last holder's lease expired or was
    /// force-released): until when, in milliseconds since the Unix epoch on the
    /// leader's clock.
    pub delay_until_ms: Option<u64>,
}

/// One holder of a lock.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HolderInfo {
    /// Holder identity.
    pub holder: String,
    /// Its fencing token.
    pub token: u64,
    /// Exclusive or shared.
    pub mode: Mode,
    /// Revision since which it holds the lock.
    pub since_revision: u64,
}

impl From<HolderView> for HolderInfo {
    fn from(view: HolderView) -> Self {
        HolderInfo {
            holder: view.holder,
            token: view.token,
            mode: view.mode.into(),
            since_revision: view.since_revision,
        }
    }
}

impl From<LockView> for LockInfo {
    fn from(view: LockView) -> Self {
        LockInfo {
            name: view.name,
            held: view.held,
            holder: view.holder,
            token: view.token,
            since_revision: view.since_revision,
            mode: view.mode.map(Mode::from),
            holders: view.holders.into_iter().map(HolderInfo::from).collect(),
            waiters: view.waiters,
            queue: view.queue,
            delay_until_ms: view.delay_until_ms,
        }
    }
}

/// A page of locks.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LockPage {
    /// Locks that are held or have waiters, in name order.
    pub items: Vec<LockInfo>,
    /// Pass as `page_token` for the next page; null on the last page.
    pub next_page_token: Option<String>,
}

fn grant_answer(grant: Grant, mode: LockMode, revision: u64, replayed: bool) -> HttpResponse {
    let token = grant.token;
    let body = LockGrant {
        name: grant.name,
        token,
        lease_id: grant.lease_id.to_string(),
        ttl_ms: grant.ttl_ms,
        holder: grant.holder,
        revision,
        mode: mode.into(),
    };
    let answer = Answer::ok(body, revision)
        .with_token(token)
        .replay(replayed);
    answer.into_response()
}

fn current_holder(state: &ApiState, name: &str) -> ApiError {
    let view = state.node.read(|sm| sm.lock(name));
    ApiError::Core(CoreError::LockHeld {
        holder: view.holder,
        token: view.token,
    })
}

/// Acquire a lock, or wait for it in FIFO order up to `wait_ms`.
#[utoipa::path(post, operation_id = "acquire_lock", path = "/v1/locks/{name}:acquire", tag = "locks",
    params(("name" = String, Path, description = "Lock name; `/` allowed (literal or %2F)"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body(content = Option<AcquireBody>,
        example = json!({"holder": "migrator-1", "ttl_ms": 15000, "wait_ms": 30000})),
    responses(
        (status = 200, body = LockGrant, description = "Granted (at once, or after waiting in line)",
            headers(("Baton-Fencing-Token" = u64, description = "The grant's token")),
            example = json!({"name": "team-a/db/migrate", "token": 42, "lease_id": "k2rytugxoghehvtiemuas7efha",
                "ttl_ms": 15000, "holder": "migrator-1", "revision": 42})),
        (status = 409, body = Problem, content_type = "application/problem+json",
            description = "`lock_held`: someone else holds it (or it is in lock delay) and `wait_ms` ran out; `holder` and `token` are the current holder's",
            example = json!({"type": "https://baton.dev/errors/lock_held", "title": "Lock is held", "status": 409,
                "detail": "lock is held", "code": "lock_held", "holder": "migrator-1", "token": 42})),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_name, invalid_ttl, invalid_wait, invalid_body",
            example = json!({"type": "https://baton.dev/errors/invalid_wait", "title": "Invalid wait", "status": 400,
                "detail": "wait_ms must be between 0 and 300000, got 900000", "code": "invalid_wait"})),
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
    caller.require(Kind::Lock, &name)?;
    let input: AcquireBody = parse_body(&body)?;
    let terms = ClaimTerms {
        lease_id: input.lease_id.as_deref(),
        ttl_ms: input.ttl_ms,
        wait_ms: input.wait_ms,
    };
    let queue = QueueKind::Lock(name.clone());
    let lock_delay_ms = input.lock_delay_ms.unwrap_or(0);
    if input.mode.unwrap_or_default() == Mode::Shared {
        // A shared acquire is a multi-acquire of one lock (`Command::Acquire`,
        // exclusive, is what builds before shared locks understand).
        let locks = vec![LockRequest {
            name: name.clone(),
            mode: LockMode::Shared,
        }];
        let end = claim::<Several>(&state, &http, &body, queue, terms, |lease, waiter| {
            Command::AcquireLocks {
                locks,
                lease,
                holder: input.holder.clone(),
                waiter,
                lock_delay_ms,
            }
        })
        .await?;
        return match end {
            ClaimEnd::Won(won) => {
                let held = won.granted.into_iter().next().ok_or_else(|| {
                    ApiError::Internal("a shared acquire was granted no lock".into())
                })?;
                Ok(grant_answer(
                    held.grant,
                    held.mode,
                    won.revision,
                    won.replayed,
                ))
            }
            ClaimEnd::Held((_, holder, token)) => {
                Err(ApiError::Core(CoreError::LockHeld { holder, token }))
            }
            ClaimEnd::NotGranted => Err(current_holder(&state, &name)),
        };
    }
    let end = claim::<Single>(&state, &http, &body, queue, terms, |lease, waiter| {
        Command::Acquire {
            name: name.clone(),
            lease,
            holder: input.holder.clone(),
            waiter,
            lock_delay_ms,
        }
    })
    .await?;
    match end {
        ClaimEnd::Won(won) => {
            let (grant, _) = won.granted;
            Ok(grant_answer(
                grant,
                LockMode::Exclusive,
                won.revision,
                won.replayed,
            ))
        }
        ClaimEnd::Held((holder, token)) => {
            Err(ApiError::Core(CoreError::LockHeld { holder, token }))
        }
        ClaimEnd::NotGranted => Err(current_holder(&state, &name)),
    }
}

/// Renew: keep the lease alive and check that this token still holds the lock.
#[utoipa::path(post, operation_id = "renew_lock", path = "/v1/locks/{name}:renew", tag = "locks",
    params(("name" = String, Path)),
    request_body = HolderBody,
    responses(
        (status = 200, body = LockRenewed),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "lock_lost (with current_token)"),
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
    caller.require(Kind::Lock, &name)?;
    let input: HolderBody = parse_required_body(&body)?;
    let lease_id = parse_lease_id(&input.lease_id)?;
    state.node.linearizable().await?;
    caller.require_lease(&state, lease_id)?;
    state
        .node
        .read(|sm| sm.check_lock_holder(&name, lease_id, input.token))?;
    let ttl_ms = state
        .node
        .keep_alive(lease_id)
        .await?
        .ok_or(ApiError::Core(CoreError::LeaseNotFound))?;
    let revision = state.node.revision();
    Ok(Answer::ok(
        LockRenewed {
            name,
            token: input.token,
            ttl_ms,
        },
        revision,
    )
    .with_token(input.token)
    .into_response())
}

/// Release a lock; the next waiter in line (exactly one) is granted.
#[utoipa::path(post, operation_id = "release_lock", path = "/v1/locks/{name}:release", tag = "locks",
    params(("name" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body = HolderBody,
    responses(
        (status = 200, body = LockReleased),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "lock_lost"),
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
    caller.require(Kind::Lock, &name)?;
    let input: HolderBody = parse_required_body(&body)?;
    let lease_id = parse_lease_id(&input.lease_id)?;
    let command = Command::Release {
        name,
        lease_id,
        token: input.token,
    };
    let done = propose(&state, &http, &body, command, Reply::into_lock_released).await?;
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

/// Check whether a token is the lock's current holder's (a linearizable read).
#[utoipa::path(post, operation_id = "validate_lock", path = "/v1/locks/{name}:validate", tag = "locks",
    params(("name" = String, Path)),
    request_body = ValidateBody,
    responses((status = 200, body = Validation)))]
pub async fn validate(
    state: web::Data<ApiState>,
    caller: Caller,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let name = checked_name(&path)?;
    caller.require(Kind::Lock, &name)?;
    let input: ValidateBody = parse_required_body(&body)?;
    state.node.linearizable().await?;
    let ((valid, current_token), revision) = state
        .node
        .read(|sm| (sm.validate(&name, input.token), sm.revision()));
    Ok(Answer::ok(
        Validation {
            valid,
            current_token,
        },
        revision,
    )
    .into_response())
}

/// Inspect a lock. A free lock is simply `held: false`.
#[utoipa::path(get, operation_id = "get_lock", path = "/v1/locks/{name}", tag = "locks",
    params(("name" = String, Path), ReadQuery),
    responses(
        (status = 200, body = LockInfo),
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
    caller.require(Kind::Lock, &name)?;
    settle_read(&state, &query).await?;
    let (view, revision) = state.node.read(|sm| (sm.lock(&name), sm.revision()));
    Ok(Answer::ok(LockInfo::from(view), revision).into_response())
}

/// List locks that are held or have waiters, in name order.
#[utoipa::path(get, operation_id = "list_locks", path = "/v1/locks", tag = "locks",
    params(ListQuery),
    responses(
        (status = 200, body = LockPage),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_query"),
    ))]
pub async fn list(
    state: web::Data<ApiState>,
    query: web::Query<ListQuery>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require_any(Kind::Lock)?;
    let fetch =
        |sm: &StateMachine, prefix: &str, after: Option<&str>, n| sm.locks(prefix, after, n);
    let listed = list_page(&state, &caller, Kind::Lock, &query, fetch, |v| &v.name).await?;
    let page = LockPage {
        items: listed.items.into_iter().map(LockInfo::from).collect(),
        next_page_token: listed.next_page_token,
    };
    Ok(Answer::ok(page, listed.revision).into_response())
}

#[cfg(test)]
mod tests {
    /// The size of the future `handler` returns, read from its type (never called).
    fn future_size<H, A, B, C, D, E, F>(_: &H) -> usize
    where
        H: Fn(A, B, C, D, E) -> F,
    {
        std::mem::size_of::<F>()
    }

    #[test]
    fn the_lock_cycle_handlers_futures_stay_small() {
        // actix boxes every handler's future and each await moves it. At 14 and
        // 11 KiB (the answer's future held three times over inside
        // `IdlePoll::await_briefly`) those copies were a large part of the 5-6 % of a
        // node's CPU that `memmove` took under load, 1.5 points of which went
        // with them (BENCHMARKS.md, "Smaller request futures"). About 7 and 4
        // KiB since; the bounds leave room for the compiler's layouts to drift.
        let acquire = future_size(&super::acquire);
        assert!(acquire <= 10 * 1024, "acquire's future is {acquire} bytes");
        let release = future_size(&super::release);
        assert!(release <= 8 * 1024, "release's future is {release} bytes");
    }
}
