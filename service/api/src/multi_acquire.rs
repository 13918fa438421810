//! `POST /v1/locks:acquire`: several locks, each exclusive or shared, granted all
//! together or not at all, with one lease and one wait. A request queues on every
//! lock it needs and holds once it heads all of them, so two clients asking for
//! `{a, b}` and `{b, a}` can never deadlock.

use actix_web::web;
use actix_web::{HttpRequest, HttpResponse};
use baton_core::{Command, CoreError, HeldLock, LockRequest, MAX_LOCKS_PER_ACQUIRE};
use baton_raft::QueueKind;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::{Caller, Kind};
use crate::claim::{claim, ClaimEnd, ClaimTerms, Several};
use crate::error::{ApiError, Problem};
use crate::locks::Mode;
use crate::request::{checked_name, parse_required_body, read_body};
use crate::respond::Answer;
use crate::state::ApiState;

/// Body of `POST /v1/locks:acquire`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireAllBody {
    /// The locks, 1 to 32 distinct names, each with its mode. The answer lists
    /// them in this order.
    pub locks: Vec<LockChoice>,
    /// Hang every grant on this lease; without it, a lease is created for these
    /// locks alone (and revoked when the last of them is released).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// TTL of the lease created when `lease_id` is absent (ignored otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Who holds them (defaults to the lease's holder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Wait in every lock's FIFO queue up to this long (0 = try once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// After the lease *expires*, keep each lock ungrantable this long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
}

/// One lock of a multi-acquire.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LockChoice {
    /// Lock name.
    pub name: String,
    /// `exclusive` (default) or `shared`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

/// Every lock of a multi-acquire, granted together.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LocksGranted {
    /// The locks in the order the request named them, each with its own token.
    pub locks: Vec<GrantedLock>,
    /// The lease every grant hangs on.
    pub lease_id: String,
    /// That lease's TTL.
    pub ttl_ms: u64,
    /// Holder identity.
    pub holder: String,
    /// Revision of the last grant.
    pub revision: u64,
}

/// One granted lock of a multi-acquire.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GrantedLock {
    /// Lock name.
    pub name: String,
    /// This lock's fencing token.
    pub token: u64,
    /// How it is held.
    pub mode: Mode,
}

fn granted_answer(
    held: Vec<HeldLock>,
    revision: u64,
    replayed: bool,
) -> Result<HttpResponse, ApiError> {
    let first = held
        .first()
        .ok_or_else(|| ApiError::Internal("a multi-acquire was granted no lock".into()))?;
    let body = LocksGranted {
        lease_id: first.grant.lease_id.to_string(),
        ttl_ms: first.grant.ttl_ms,
        holder: first.grant.holder.clone(),
        revision,
        locks: held
            .into_iter()
            .map(|h| GrantedLock {
                name: h.grant.name,
                token: h.grant.token,
                mode: h.mode.into(),
            })
            .collect(),
    };
    Ok(Answer::ok(body, revision).replay(replayed).into_response())
}

/// The first lock of the list that cannot be granted now, read from this replica.
fn first_blocking(state: &ApiState, locks: &[LockRequest]) -> ApiError {
    let blocking = state.node.read(|sm| {
        locks.iter().find_map(|lock| {
            let view = sm.lock(&lock.name);
            let blocks = match lock.mode {
                baton_core::LockMode::Exclusive => view.held || view.waiters > 0,
                baton_core::LockMode::Shared => {
                    view.mode == Some(baton_core::LockMode::Exclusive) || view.waiters > 0
                }
            };
            blocks.then_some((view.name, view.holder, view.token))
        })
    });
    let (name, holder, token) = blocking.unwrap_or_else(|| {
        let name = locks.first().map(|l| l.name.clone()).unwrap_or_default();
        (name, None, None)
    });
    ApiError::Core(CoreError::LocksHeld {
        name,
        holder,
        token,
    })
}

/// Acquire several locks together (each exclusive or shared), or wait in every
/// one of their queues up to `wait_ms`.
#[utoipa::path(post, operation_id = "acquire_locks", path = "/v1/locks:acquire", tag = "locks",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body(content = AcquireAllBody,
        example = json!({"locks": [{"name": "accounts/42"}, {"name": "accounts/7"},
            {"name": "config/rates", "mode": "shared"}], "holder": "transfer-9", "ttl_ms": 15000, "wait_ms": 30000})),
    responses(
        (status = 200, body = LocksGranted, description = "Every lock granted (at once, or after waiting in all their lines); each has its own token, so the answer carries no Baton-Fencing-Token header"),
        (status = 409, body = Problem, content_type = "application/problem+json",
            description = "`lock_held`: a lock of the list is held by someone else (or in lock delay, or waited for first, or held shared by this same lease while asked for exclusively) and `wait_ms` ran out; `name`, `holder` and `token` describe the first such lock",
            example = json!({"type": "https://baton.dev/errors/lock_held", "title": "Lock is held", "status": 409,
                "detail": "lock 'accounts/7' is held", "code": "lock_held", "name": "accounts/7", "holder": "transfer-3", "token": 40})),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_name, invalid_ttl, invalid_wait, invalid_lock_delay, invalid_body"),
        (status = 422, body = Problem, content_type = "application/problem+json", description = "invalid_lock_list: the list is empty, has more than 32 names, or names a lock twice (a list no acquire can satisfy); idempotency_key_reused",
            example = json!({"type": "https://baton.dev/errors/invalid_lock_list", "title": "Invalid list of locks", "status": 422,
                "detail": "invalid list of locks: 'accounts/7' is named twice", "code": "invalid_lock_list"})),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "quota_exceeded"),
    ))]
pub async fn acquire_all(
    state: web::Data<ApiState>,
    http: HttpRequest,
    caller: Caller,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let input: AcquireAllBody = parse_required_body(&body)?;
    if input.locks.len() > MAX_LOCKS_PER_ACQUIRE {
        return Err(ApiError::Core(CoreError::InvalidLockList {
            reason: format!(
                "at most {MAX_LOCKS_PER_ACQUIRE} locks per request, got {}",
                input.locks.len()
            ),
        }));
    }
    let mut locks = Vec::with_capacity(input.locks.len());
    for choice in &input.locks {
        let name = checked_name(&choice.name)?;
        caller.require(Kind::Lock, &name)?;
        locks.push(LockRequest {
            name,
            mode: choice.mode.unwrap_or_default().into(),
        });
    }
    baton_core::check_lock_list(&locks).map_err(ApiError::Core)?;
    let terms = ClaimTerms {
        lease_id: input.lease_id.as_deref(),
        ttl_ms: input.ttl_ms,
        wait_ms: input.wait_ms,
    };
    // Cancelling a multi-acquire in any one of its lines takes it out of all.
    let queue = QueueKind::Lock(locks[0].name.clone());
    let command_locks = locks.clone();
    let end = claim::<Several>(&state, &http, &body, queue, terms, |lease, waiter| {
        Command::AcquireLocks {
            locks: command_locks,
            lease,
            holder: input.holder.clone(),
            waiter,
            lock_delay_ms: input.lock_delay_ms.unwrap_or(0),
        }
    })
    .await?;
    match end {
        ClaimEnd::Won(won) => granted_answer(won.granted, won.revision, won.replayed),
        ClaimEnd::Held((name, holder, token)) => Err(ApiError::Core(CoreError::LocksHeld {
            name,
            holder,
            token,
        })),
        ClaimEnd::NotGranted => Err(first_blocking(&state, &locks)),
    }
}
