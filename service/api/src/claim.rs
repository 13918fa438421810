//! The one skeleton of the two requests that may wait in line for a holding:
//! `POST /v1/locks/{name}:acquire` and `POST /v1/elections/{name}:campaign`.
//! Parse the wait and the lease, propose with a waiter id when it may wait, wait
//! for the grant, and reduce every way that can end to three answers.

use actix_web::HttpRequest;
use baton_core::{
    Claimed, Command, CoreError, EndReason, Grant, LeaseRef, Reply, Request, WaiterId,
};
use baton_raft::{Node, QueueKind, WaitEnd, Waited};

use crate::error::ApiError;
use crate::request::idempotency_key;
use crate::respond::{applied, lease_ref};
use crate::state::ApiState;

/// What the client asked for about waiting and the lease (body fields shared by
/// `:acquire` and `:campaign`).
pub struct ClaimTerms<'a> {
    /// Hang the holding on this lease (text as sent).
    pub lease_id: Option<&'a str>,
    /// TTL of the lease created when `lease_id` is absent.
    pub ttl_ms: Option<u64>,
    /// How long to wait in line (0 or absent: try once).
    pub wait_ms: Option<u64>,
}

/// How a claim ended, reduced to what the handler answers.
pub enum ClaimEnd {
    /// Granted (or elected), at once or after waiting.
    Won(Won),
    /// Refused at once because someone holds it: the holder (leader) and, for a
    /// lock, its token, as of the refusal.
    Held {
        /// Current holder, or leader.
        holder: Option<String>,
        /// Current holder's token (locks).
        token: Option<u64>,
    },
    /// It waited and was not granted (the wait ran out, or it was released or
    /// force-ended from the queue): who holds it now is for the handler to read.
    NotGranted,
}

/// A granted claim.
pub struct Won {
    /// The grant; its token is the revision it happened at.
    pub grant: Grant,
    /// The leader's value, for an election.
    pub value: Option<String>,
    /// Revision the answer reflects.
    pub revision: u64,
    /// Replayed for a retried idempotency key.
    pub replayed: bool,
}

/// Checks `wait_ms` against the configured bound.
pub(crate) fn checked_wait(state: &ApiState, wait_ms: Option<u64>) -> Result<u64, ApiError> {
    let wait_ms = wait_ms.unwrap_or(0);
    let max_ms = state.settings.max_wait_ms;
    if wait_ms > max_ms {
        return Err(ApiError::InvalidWait { wait_ms, max_ms });
    }
    Ok(wait_ms)
}

/// Proposes the command `build` makes from the lease and the waiter id (`Some`
/// only when the client may wait) and waits for its grant. A lease that ends
/// while waiting is `lease_not_found`; a client that goes away while queued ends
/// the wait (`ApiError::ClientGone`), and its place leaves the queue through the
/// log.
pub async fn claim(
    state: &ApiState,
    http: &HttpRequest,
    body: &[u8],
    queue: QueueKind,
    terms: ClaimTerms<'_>,
    build: impl FnOnce(LeaseRef, Option<WaiterId>) -> Command,
) -> Result<ClaimEnd, ApiError> {
    let wait_ms = checked_wait(state, terms.wait_ms)?;
    let lease = lease_ref(state, terms.lease_id, terms.ttl_ms)?;
    let waiter = (wait_ms > 0).then(Node::new_waiter_id);
    let idempotency = idempotency_key(http, body)?;
    let caller = crate::auth::Caller::of(http);
    let request = Request {
        idempotency,
        command: caller.command(build(lease, waiter), &state.settings.quota)?,
    };
    let waited = match waiter {
        None => Waited::Immediate(state.node.propose(request).await?),
        Some(waiter) => {
            state
                .node
                .propose_and_wait(
                    request,
                    queue,
                    waiter,
                    std::time::Duration::from_millis(wait_ms),
                    crate::disconnect::client_gone(http),
                )
                .await?
        }
    };
    match waited {
        Waited::Immediate(outcome) => {
            let done = applied(outcome, Reply::into_claim)?;
            Ok(match done.reply {
                Claimed::Granted { grant, value } => ClaimEnd::Won(Won {
                    grant,
                    value,
                    revision: done.revision,
                    replayed: done.replayed,
                }),
                Claimed::Queued { holder, token } => ClaimEnd::Held { holder, token },
            })
        }
        Waited::Ended(WaitEnd::Granted(grant)) => Ok(ClaimEnd::Won(Won::after_wait(grant, None))),
        Waited::Ended(WaitEnd::Elected(grant, value)) => {
            Ok(ClaimEnd::Won(Won::after_wait(grant, Some(value))))
        }
        Waited::Ended(WaitEnd::Ended(EndReason::Revoked | EndReason::Expired)) => {
            Err(ApiError::Core(CoreError::LeaseNotFound))
        }
        Waited::Ended(WaitEnd::Ended(EndReason::Released | EndReason::ForceReleased))
        | Waited::TimedOut => Ok(ClaimEnd::NotGranted),
        Waited::Abandoned => Err(ApiError::ClientGone),
    }
}

impl Won {
    /// A grant that came from the queue: its revision is its token, and it is
    /// never a replay.
    fn after_wait(grant: Grant, value: Option<String>) -> Self {
        Won {
            revision: grant.token,
            grant,
            value,
            replayed: false,
        }
    }
}
