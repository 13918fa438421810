//! Leader-only work from any node: run it here when this node leads, otherwise
//! send it to the leader over the peer listener, and retry across a change of
//! leader whenever the retry cannot apply a request twice.

use std::pin::pin;
use std::time::Duration;

use baton_core::{LeaseId, Outcome, Request};
use baton_store::BatonNode;
use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::ServerState;
use tokio::time::Instant;

use crate::error::RaftLayerError;
use crate::leader_call::{LeaderAnswer, LeaderCall, LeaderResult};
use crate::leader_link::LinkError;
use crate::node::Node;
use crate::proposer::Lane;

/// Where leader-only work goes.
enum Route {
    /// This node leads.
    Local,
    /// Another node leads; its peer listener URL.
    Remote(String),
}

/// How one attempt ended.
enum Attempt {
    /// A final answer (success or an error to report).
    Done(LeaderResult),
    /// Nothing happened; try again once a leader is known.
    Retry(String),
}

/// The body of [`Node::propose`].
pub(crate) async fn propose(node: &Node, request: Request) -> Result<Outcome, RaftLayerError> {
    let retry_lost = request.idempotency.is_some();
    let timeout = node.config.propose_timeout + Duration::from_secs(2);
    let call = LeaderCall::Propose(request);
    let answer = pin!(leader_call(
        node,
        call,
        timeout,
        retry_lost,
        LeaderAnswer::into_outcome
    ));
    node.config.idle_poll.await_briefly(answer).await
}

/// The body of [`Node::linearizable`].
pub(crate) async fn linearizable(node: &Node) -> Result<(), RaftLayerError> {
    let span = crate::child_span!("linearizable_read");
    crate::trace_context::in_span(span, read_index_then_catch_up(node)).await
}

async fn read_index_then_catch_up(node: &Node) -> Result<(), RaftLayerError> {
    let wait = node.config.leader_wait();
    let call = LeaderCall::ReadIndex;
    let index = leader_call(node, call, wait, true, LeaderAnswer::into_read_index).await?;
    caught_up_to(node, index).await
}

/// The body of [`Node::keep_alive`].
pub(crate) async fn keep_alive(
    node: &Node,
    lease_id: LeaseId,
) -> Result<Option<u64>, RaftLayerError> {
    let call = LeaderCall::KeepAlive(lease_id);
    let wait = node.config.leader_wait();
    leader_call(node, call, wait, true, LeaderAnswer::into_keep_alive).await
}

/// The body of [`Node::remaining`].
pub(crate) async fn remaining(
    node: &Node,
    lease_id: LeaseId,
) -> Result<Option<Duration>, RaftLayerError> {
    let call = LeaderCall::Remaining(lease_id);
    let wait = node.config.leader_wait();
    let ms = leader_call(node, call, wait, true, LeaderAnswer::into_remaining).await?;
    Ok(ms.map(Duration::from_millis))
}

/// The body of [`Node::add_member`].
pub(crate) async fn add_member(
    node: &Node,
    id: u64,
    member: BatonNode,
    voter: bool,
) -> Result<(), RaftLayerError> {
    // Catching up may mean a snapshot transfer: allow it time.
    let timeout = Duration::from_secs(120);
    let call = LeaderCall::AddMember {
        id,
        node: member,
        voter,
    };
    leader_call(
        node,
        call,
        timeout,
        true,
        LeaderAnswer::into_membership_changed,
    )
    .await
}

/// The body of [`Node::remove_member`].
pub(crate) async fn remove_member(node: &Node, id: u64) -> Result<(), RaftLayerError> {
    let call = LeaderCall::RemoveMember { id };
    let timeout = Duration::from_secs(30);
    leader_call(
        node,
        call,
        timeout,
        false,
        LeaderAnswer::into_membership_changed,
    )
    .await
}

/// Runs `call` on the leader, retrying (until a few election timeouts have
/// passed) while there is no leader or the leader changed under it, and
/// returns its answer through `expect`, the accessor of the answer `call`
/// has (an answer of another shape is a bug: `Internal`).
async fn leader_call<T>(
    node: &Node,
    call: LeaderCall,
    timeout: Duration,
    retry_lost: bool,
    expect: fn(LeaderAnswer) -> Result<T, LeaderAnswer>,
) -> Result<T, RaftLayerError> {
    let deadline = Instant::now() + node.config.leader_wait();
    loop {
        let attempt = match route(node, deadline).await? {
            Route::Local => match answer(node, call.clone()).await {
                Err(RaftLayerError::NotLeader { .. }) => Attempt::Retry("leadership moved".into()),
                result => Attempt::Done(result),
            },
            Route::Remote(addr) => {
                let started = std::time::Instant::now();
                // Boxed: kept inline, a remote call's (large) future would size
                // every local call's; next to its round trip, the box is nothing.
                let answered = Box::pin(node.link.call(&addr, &call, timeout)).await;
                node.metrics.leader_call(&call, started.elapsed());
                match answered {
                    Ok(Err(RaftLayerError::NotLeader { .. })) => {
                        Attempt::Retry(format!("{addr} no longer leads"))
                    }
                    Ok(result) => Attempt::Done(result),
                    Err(error @ LinkError::NotSent { .. }) => Attempt::Retry(error.to_string()),
                    Err(error @ LinkError::Lost { .. }) if retry_lost => {
                        Attempt::Retry(error.to_string())
                    }
                    Err(error) => return Err(RaftLayerError::outcome_unknown(error)),
                }
            }
        };
        match attempt {
            Attempt::Done(result) => return expect(result?).map_err(|other| unexpected(&other)),
            Attempt::Retry(why) => {
                if Instant::now() >= deadline {
                    return Err(RaftLayerError::unavailable(format!(
                        "no reachable leader ({why})"
                    )));
                }
                tracing::debug!(%why, "retrying on the leader");
                let pause = node.config.heartbeat.min(Duration::from_millis(100));
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Where leader-only work goes now, waiting until `deadline` for a leader.
async fn route(node: &Node, deadline: Instant) -> Result<Route, RaftLayerError> {
    let mut metrics = node.raft.metrics();
    loop {
        {
            let now = metrics.borrow_and_update();
            if let Some(leader) = now.current_leader {
                if leader == node.config.node_id {
                    if now.state == ServerState::Leader {
                        return Ok(Route::Local);
                    }
                } else if let Some(peer) = now.membership_config.membership().get_node(&leader) {
                    return Ok(Route::Remote(
                        node.config.dial_addr(leader, &peer.raft_addr),
                    ));
                }
            }
        }
        tokio::select! {
            changed = metrics.changed() => {
                if changed.is_err() {
                    return Err(RaftLayerError::unavailable("the node is shutting down"));
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                return Err(RaftLayerError::unavailable("no leader elected (no quorum?)"));
            }
        }
    }
}

/// The body of [`Node::answer`].
pub(crate) async fn answer(node: &Node, call: LeaderCall) -> LeaderResult {
    if node.handing_over.load(std::sync::atomic::Ordering::Acquire)
        && !matches!(call, LeaderCall::Campaign)
    {
        return Err(node.not_leader());
    }
    match call {
        // The rare calls' futures are boxed so that they do not size the state of
        // every proposal's (BENCHMARKS.md, "Smaller request futures").
        LeaderCall::Campaign => Box::pin(node.raft.trigger().elect())
            .await
            .map(|()| LeaderAnswer::Campaigning)
            .map_err(RaftLayerError::unavailable),
        LeaderCall::Propose(request) => propose_as_leader(node, Lane::Client, request)
            .await
            .map(LeaderAnswer::Outcome),
        LeaderCall::ReadIndex => read_index_local(node).await.map(LeaderAnswer::ReadIndex),
        LeaderCall::KeepAlive(lease_id) => keep_alive_local(node, lease_id)
            .await
            .map(LeaderAnswer::KeepAlive),
        LeaderCall::Remaining(lease_id) => {
            // No quorum check: the time left is advisory (`GET /v1/leases/{id}`
            // has already made its linearizable read, and shows the TTL when
            // this is unknown); a deposed leader's figure decides nothing.
            require_clock(node)?;
            Ok(LeaderAnswer::Remaining(
                node.clock
                    .remaining(lease_id)
                    .map(|left| left.as_millis() as u64),
            ))
        }
        LeaderCall::AddMember {
            id,
            node: member,
            voter,
        } => Box::pin(crate::membership::add_member_local(node, id, member, voter))
            .await
            .map(|()| LeaderAnswer::MembershipChanged),
        LeaderCall::RemoveMember { id } => {
            Box::pin(crate::membership::remove_member_local(node, id))
                .await
                .map(|()| LeaderAnswer::MembershipChanged)
        }
    }
}

/// Proposes `request` on this node only, as the leader; `NotLeader`
/// otherwise (or while it hands leadership over). Two roles use it: the
/// leader's end of every routed proposal ([`Node::propose`], local or from a
/// follower), and decisions only this leader's own clock may make (a lease's
/// expiry), which are never forwarded: a deposed leader, back from a pause,
/// would expire leases that the new leader has kept alive.
pub(crate) async fn propose_as_leader(
    node: &Node,
    lane: Lane,
    request: Request,
) -> Result<Outcome, RaftLayerError> {
    if node.raft.metrics().borrow().state != ServerState::Leader
        || node.handing_over.load(std::sync::atomic::Ordering::Acquire)
    {
        return Err(node.not_leader());
    }
    node.proposer
        .propose_in(lane, request, node.config.propose_timeout)
        .await
}

async fn read_index_local(node: &Node) -> Result<u64, RaftLayerError> {
    let checked = tokio::time::timeout(node.config.leader_wait(), node.raft.get_read_log_id());
    match checked.await {
        Ok(Ok((read_log_id, _applied))) => Ok(read_log_id.map_or(0, |id| id.index)),
        Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(_)))) => {
            Err(node.not_leader())
        }
        Ok(Err(error)) => Err(RaftLayerError::unavailable(error)),
        Err(_) => Err(RaftLayerError::unavailable(
            "leadership not confirmed by a quorum in time",
        )),
    }
}

async fn keep_alive_local(node: &Node, lease_id: LeaseId) -> Result<Option<u64>, RaftLayerError> {
    require_clock(node)?;
    // Confirm leadership and catch up first: a deposed leader must not answer
    // at all (not even "not found"), and an expiry committed by a previous
    // leader must be applied before this node vouches for the lease.
    let index = read_index_local(node).await?;
    caught_up_to(node, index).await?;
    let known = node.read(|sm| sm.lease_ttl_ms(lease_id));
    let Some(ttl_ms) = known else {
        node.metrics.keepalive(false);
        return Ok(None);
    };
    // `None` here: unknown to the clock, or its expiry is already proposed.
    let kept = node.clock.keep_alive(lease_id).map(|_| ttl_ms);
    node.metrics.keepalive(kept.is_some());
    Ok(kept)
}

/// Waits until this replica's applied state covers log index `index` (not
/// openraft's count, which includes a snapshot still being restored).
async fn caught_up_to(node: &Node, index: u64) -> Result<(), RaftLayerError> {
    tokio::time::timeout(
        node.config.leader_wait(),
        node.shared.applied_at_least(index),
    )
    .await
    .map_err(|_| RaftLayerError::unavailable("this replica did not catch up in time"))
}

/// The lease clock is authoritative only on a leader that has restarted
/// every lease's TTL in its current term. Right after a re-election the
/// restart may not have happened yet: that answers 503 (retry), not a
/// verdict from the previous term's deadlines.
fn require_clock(node: &Node) -> Result<(), RaftLayerError> {
    if !node.is_leader() {
        return Err(node.not_leader());
    }
    let term = node.raft.server_metrics().borrow().vote.leader_id().term;
    if node.clock.term() == term {
        Ok(())
    } else {
        Err(RaftLayerError::unavailable(
            "leader in a new term; its lease clock is restarting",
        ))
    }
}

fn unexpected(answer: &LeaderAnswer) -> RaftLayerError {
    tracing::error!(?answer, "the leader answered a different call");
    RaftLayerError::Internal("the leader answered a different call".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `propose` returns, read from its type (never called).
    fn future_size<P, F>(_: &P) -> usize
    where
        P: Fn(&'static Node, Request) -> F,
    {
        std::mem::size_of::<F>()
    }

    #[test]
    fn a_proposal_future_stays_small() {
        // Every client write awaits this inside its handler's future: 10.7 KiB
        // when `IdlePoll::await_briefly` took the answer's future by value and
        // held it three times over, about 3.5 KiB since (BENCHMARKS.md, "Smaller
        // request futures"). The bound leaves room for the compiler to drift.
        let size = future_size(&|node: &'static Node, request| node.propose(request));
        assert!(size <= 6 * 1024, "a proposal's future is {size} bytes");
    }
}
