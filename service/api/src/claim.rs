//! The one skeleton of the requests that may wait in line for a holding:
//! `POST /v1/locks/{name}:acquire`, `POST /v1/locks:acquire`,
//! `POST /v1/elections/{name}:campaign` and `POST /v1/semaphores/{name}:acquire`.
//! Parse the wait and the lease, propose with a waiter id when it may wait, wait
//! for the grant, and reduce every way that can end to three answers. What
//! differs between them (the shape of a grant and of a refusal) is a
//! [`ClaimShape`].

use actix_web::HttpRequest;
use baton_core::{
    Claimed, Command, CoreError, EndReason, Grant, HeldLock, LeaseRef, LocksClaimed, PermitGrant,
    PermitsClaimed, Reply, Request, WaiterId,
};
use baton_raft::{Node, QueueKind, WaitEnd, Waited};

use crate::error::ApiError;
use crate::request::idempotency_key;
use crate::respond::{applied, lease_ref};
use crate::state::ApiState;

/// What the client asked for about waiting and the lease (body fields shared by
/// every request that may wait).
pub struct ClaimTerms<'a> {
    /// Hang the holding on this lease (text as sent).
    pub lease_id: Option<&'a str>,
    /// TTL of the lease created when `lease_id` is absent.
    pub ttl_ms: Option<u64>,
    /// How long to wait in line (0 or absent: try once).
    pub wait_ms: Option<u64>,
}

/// The shape of one kind of claim: what its grant and its immediate refusal
/// carry, read from the command's reply or from the end of its wait.
pub trait ClaimShape {
    /// What a grant carries.
    type Granted;
    /// What an immediate refusal carries (who is in the way).
    type Held;
    /// The command's reply: granted now, or queued (refused, when it may not
    /// wait). A reply of another shape is handed back (a bug: 500).
    // The shape `respond::applied` takes, like Reply's own accessors: the
    // Err is the reply itself, handed back only on the bug path.
    #[allow(clippy::result_large_err)]
    fn split(reply: Reply) -> Result<Result<Self::Granted, Self::Held>, Reply>;
    /// The grant a wait ended with, if it ended with this kind's grant.
    fn granted_by(end: WaitEnd) -> Option<Self::Granted>;
    /// The revision of a grant that came from the queue (its last token).
    fn revision(granted: &Self::Granted) -> u64;
}

/// A lock (exclusive, one name) or an election: the grant, and the leader's value.
pub struct Single;

impl ClaimShape for Single {
    type Granted = (Grant, Option<String>);
    type Held = (Option<String>, Option<u64>);

    fn split(reply: Reply) -> Result<Result<Self::Granted, Self::Held>, Reply> {
        Ok(match reply.into_claim()? {
            Claimed::Granted { grant, value } => Ok((grant, value)),
            Claimed::Queued { holder, token } => Err((holder, token)),
        })
    }

    fn granted_by(end: WaitEnd) -> Option<Self::Granted> {
        match end {
            WaitEnd::Granted(held) => held.into_iter().next().map(|h| (h.grant, None)),
            WaitEnd::Elected(grant, value) => Some((grant, Some(value))),
            _ => None,
        }
    }

    fn revision((grant, _): &Self::Granted) -> u64 {
        grant.token
    }
}

/// An `AcquireLocks`: every lock with its own grant and mode.
pub struct Several;

/// The lock that blocks an `AcquireLocks`: its name, first holder and token.
pub type Blocking = (String, Option<String>, Option<u64>);

impl ClaimShape for Several {
    type Granted = Vec<HeldLock>;
    type Held = Blocking;

    fn split(reply: Reply) -> Result<Result<Self::Granted, Self::Held>, Reply> {
        Ok(match reply.into_locks_claim()? {
            LocksClaimed::Granted(held) => Ok(held),
            LocksClaimed::Queued {
                name,
                holder,
                token,
            } => Err((name, holder, token)),
        })
    }

    fn granted_by(end: WaitEnd) -> Option<Self::Granted> {
        match end {
            WaitEnd::Granted(held) => Some(held),
            _ => None,
        }
    }

    fn revision(granted: &Self::Granted) -> u64 {
        granted.iter().map(|h| h.grant.token).max().unwrap_or(0)
    }
}

/// Permits of a semaphore.
pub struct Permits;

impl ClaimShape for Permits {
    type Granted = PermitGrant;
    type Held = (u64, u32);

    fn split(reply: Reply) -> Result<Result<Self::Granted, Self::Held>, Reply> {
        Ok(match reply.into_permits_claim()? {
            PermitsClaimed::Granted(grant) => Ok(grant),
            PermitsClaimed::Queued { in_use, limit } => Err((in_use, limit)),
        })
    }

    fn granted_by(end: WaitEnd) -> Option<Self::Granted> {
        match end {
            WaitEnd::Permits(grant) => Some(grant),
            _ => None,
        }
    }

    fn revision(granted: &Self::Granted) -> u64 {
        granted.grant.token
    }
}

/// How a claim ended, reduced to what the handler answers.
pub enum ClaimEnd<S: ClaimShape> {
    /// Granted (or elected), at once or after waiting.
    Won(Won<S::Granted>),
    /// Refused at once because someone holds it: who, as of the refusal.
    Held(S::Held),
    /// It waited and was not granted (the wait ran out, or it was released or
    /// force-ended from the queue): who holds it now is for the handler to read.
    NotGranted,
}

/// A granted claim.
pub struct Won<G> {
    /// The grant; its token is the revision it happened at.
    pub granted: G,
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
pub async fn claim<S: ClaimShape>(
    state: &ApiState,
    http: &HttpRequest,
    body: &[u8],
    queue: QueueKind,
    terms: ClaimTerms<'_>,
    build: impl FnOnce(LeaseRef, Option<WaiterId>) -> Command,
) -> Result<ClaimEnd<S>, ApiError> {
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
            let done = applied(outcome, S::split)?;
            Ok(match done.reply {
                Ok(granted) => ClaimEnd::Won(Won {
                    granted,
                    revision: done.revision,
                    replayed: done.replayed,
                }),
                Err(held) => ClaimEnd::Held(held),
            })
        }
        Waited::Ended(WaitEnd::Ended(EndReason::Revoked | EndReason::Expired)) => {
            Err(ApiError::Core(CoreError::LeaseNotFound))
        }
        Waited::Ended(WaitEnd::Ended(EndReason::Released | EndReason::ForceReleased))
        | Waited::TimedOut => Ok(ClaimEnd::NotGranted),
        Waited::Ended(end) => match S::granted_by(end) {
            // From the queue: its revision is its token, never a replay.
            Some(granted) => Ok(ClaimEnd::Won(Won {
                revision: S::revision(&granted),
                granted,
                replayed: false,
            })),
            None => Err(ApiError::Internal(
                "a wait ended with a grant of another kind".into(),
            )),
        },
        Waited::Abandoned => Err(ApiError::ClientGone),
    }
}
