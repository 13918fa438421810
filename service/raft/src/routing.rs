//! Leader-only work from any node: run it here when this node leads, otherwise
//! send it to the leader over the peer listener, and retry across a change of
//! leader whenever the retry cannot apply a request twice.

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

impl Node {
    /// Proposes a request through the log (on the leader, wherever this node is)
    /// and returns its outcome once applied.
    ///
    /// Retries across leader changes when the request certainly did not take
    /// effect (refused before it was appended, or never sent), and also when it
    /// may have but carries an idempotency key, whose retry returns the first
    /// answer. Otherwise an interrupted request answers "outcome unknown".
    pub async fn propose(&self, request: Request) -> Result<Outcome, RaftLayerError> {
        let retry_lost = request.idempotency.is_some();
        let timeout = self.config.propose_timeout + Duration::from_secs(2);
        let call = LeaderCall::Propose(request);
        self.leader_call(call, timeout, retry_lost, LeaderAnswer::into_outcome)
            .await
    }

    /// Waits until this replica has applied everything the leader had committed
    /// when the call was made (Raft ReadIndex through the leader; never a
    /// leader-lease shortcut). Works the same on a follower: the leader confirms
    /// its leadership with a quorum and names the index to wait for.
    pub async fn linearizable(&self) -> Result<(), RaftLayerError> {
        let wait = self.config.leader_wait();
        let call = LeaderCall::ReadIndex;
        let index = self
            .leader_call(call, wait, true, LeaderAnswer::into_read_index)
            .await?;
        self.caught_up_to(index).await
    }

    /// Moves a lease's deadline to a full TTL from now on the leader, which then
    /// confirms it still leads. `Ok(None)` when there is no such lease.
    pub async fn keep_alive(&self, lease_id: LeaseId) -> Result<Option<u64>, RaftLayerError> {
        let call = LeaderCall::KeepAlive(lease_id);
        let wait = self.config.leader_wait();
        self.leader_call(call, wait, true, LeaderAnswer::into_keep_alive)
            .await
    }

    /// Time left before a lease expires, on the leader's clock.
    pub async fn remaining(&self, lease_id: LeaseId) -> Result<Option<Duration>, RaftLayerError> {
        let call = LeaderCall::Remaining(lease_id);
        let wait = self.config.leader_wait();
        let ms = self
            .leader_call(call, wait, true, LeaderAnswer::into_remaining)
            .await?;
        Ok(ms.map(Duration::from_millis))
    }

    /// Adds node `id` as a learner, promotes it to voter once it has caught up
    /// (when `voter`), or updates its addresses if it is already a member.
    pub async fn add_member(
        &self,
        id: u64,
        node: BatonNode,
        voter: bool,
    ) -> Result<(), RaftLayerError> {
        // Catching up may mean a snapshot transfer: allow it time.
        let timeout = Duration::from_secs(120);
        let call = LeaderCall::AddMember { id, node, voter };
        self.leader_call(call, timeout, true, LeaderAnswer::into_membership_changed)
            .await
    }

    /// Removes node `id` from the cluster.
    pub async fn remove_member(&self, id: u64) -> Result<(), RaftLayerError> {
        let call = LeaderCall::RemoveMember { id };
        let timeout = Duration::from_secs(30);
        self.leader_call(call, timeout, false, LeaderAnswer::into_membership_changed)
            .await
    }

    /// Runs `call` on the leader, retrying (until a few election timeouts have
    /// passed) while there is no leader or the leader changed under it, and
    /// returns its answer through `expect`, the accessor of the answer `call`
    /// has (an answer of another shape is a bug: `Internal`).
    async fn leader_call<T>(
        &self,
        call: LeaderCall,
        timeout: Duration,
        retry_lost: bool,
        expect: fn(LeaderAnswer) -> Result<T, LeaderAnswer>,
    ) -> Result<T, RaftLayerError> {
        let deadline = Instant::now() + self.config.leader_wait();
        loop {
            let attempt = match self.route(deadline).await? {
                Route::Local => match self.answer(call.clone()).await {
                    Err(RaftLayerError::NotLeader { .. }) => {
                        Attempt::Retry("leadership moved".into())
                    }
                    result => Attempt::Done(result),
                },
                Route::Remote(addr) => match self.link.call(&addr, &call, timeout).await {
                    Ok(Err(RaftLayerError::NotLeader { .. })) => {
                        Attempt::Retry(format!("{addr} no longer leads"))
                    }
                    Ok(result) => Attempt::Done(result),
                    Err(error @ LinkError::NotSent { .. }) => Attempt::Retry(error.to_string()),
                    Err(error @ LinkError::Lost { .. }) if retry_lost => {
                        Attempt::Retry(error.to_string())
                    }
                    Err(error) => return Err(RaftLayerError::outcome_unknown(error)),
                },
            };
            match attempt {
                Attempt::Done(result) => {
                    return expect(result?).map_err(|other| unexpected(&other))
                }
                Attempt::Retry(why) => {
                    if Instant::now() >= deadline {
                        return Err(RaftLayerError::unavailable(format!(
                            "no reachable leader ({why})"
                        )));
                    }
                    tracing::debug!(%why, "retrying on the leader");
                    let pause = self.config.heartbeat.min(Duration::from_millis(100));
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Where leader-only work goes now, waiting until `deadline` for a leader.
    async fn route(&self, deadline: Instant) -> Result<Route, RaftLayerError> {
        let mut metrics = self.raft.metrics();
        loop {
            {
                let now = metrics.borrow_and_update();
                if let Some(leader) = now.current_leader {
                    if leader == self.config.node_id {
                        if now.state == ServerState::Leader {
                            return Ok(Route::Local);
                        }
                    } else if let Some(node) = now.membership_config.membership().get_node(&leader)
                    {
                        return Ok(Route::Remote(
                            self.config.dial_addr(leader, &node.raft_addr),
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

    /// Answers a leader call here, as the leader. Refuses with `NotLeader` when
    /// this node does not lead (the caller retries on the real leader).
    pub async fn answer(&self, call: LeaderCall) -> LeaderResult {
        if self.handing_over.load(std::sync::atomic::Ordering::Acquire)
            && !matches!(call, LeaderCall::Campaign)
        {
            return Err(self.not_leader());
        }
        match call {
            LeaderCall::Campaign => self
                .raft
                .trigger()
                .elect()
                .await
                .map(|()| LeaderAnswer::Campaigning)
                .map_err(RaftLayerError::unavailable),
            LeaderCall::Propose(request) => self
                .propose_as_leader(request)
                .await
                .map(LeaderAnswer::Outcome),
            LeaderCall::ReadIndex => self.read_index_local().await.map(LeaderAnswer::ReadIndex),
            LeaderCall::KeepAlive(lease_id) => self
                .keep_alive_local(lease_id)
                .await
                .map(LeaderAnswer::KeepAlive),
            LeaderCall::Remaining(lease_id) => {
                self.require_clock()?;
                Ok(LeaderAnswer::Remaining(
                    self.clock
                        .remaining(lease_id)
                        .map(|left| left.as_millis() as u64),
                ))
            }
            LeaderCall::AddMember { id, node, voter } => self
                .add_member_local(id, node, voter)
                .await
                .map(|()| LeaderAnswer::MembershipChanged),
            LeaderCall::RemoveMember { id } => self
                .remove_member_local(id)
                .await
                .map(|()| LeaderAnswer::MembershipChanged),
        }
    }

    /// Proposes `request` on this node only, as the leader; `NotLeader`
    /// otherwise (or while it hands leadership over). Two roles use it: the
    /// leader's end of every routed proposal ([`Node::propose`], local or from a
    /// follower), and decisions only this leader's own clock may make (a lease's
    /// expiry), which are never forwarded: a deposed leader, back from a pause,
    /// would expire leases that the new leader has kept alive.
    pub(crate) async fn propose_as_leader(
        &self,
        request: Request,
    ) -> Result<Outcome, RaftLayerError> {
        if self.raft.metrics().borrow().state != ServerState::Leader
            || self.handing_over.load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(self.not_leader());
        }
        self.proposer
            .propose(request, self.config.propose_timeout)
            .await
    }

    async fn read_index_local(&self) -> Result<u64, RaftLayerError> {
        let checked = tokio::time::timeout(self.config.leader_wait(), self.raft.get_read_log_id());
        match checked.await {
            Ok(Ok((read_log_id, _applied))) => Ok(read_log_id.map_or(0, |id| id.index)),
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(_)))) => {
                Err(self.not_leader())
            }
            Ok(Err(error)) => Err(RaftLayerError::unavailable(error)),
            Err(_) => Err(RaftLayerError::unavailable(
                "leadership not confirmed by a quorum in time",
            )),
        }
    }

    async fn keep_alive_local(&self, lease_id: LeaseId) -> Result<Option<u64>, RaftLayerError> {
        self.require_clock()?;
        // Confirm leadership and catch up first: a deposed leader must not answer
        // at all (not even "not found"), and an expiry committed by a previous
        // leader must be applied before this node vouches for the lease.
        let index = self.read_index_local().await?;
        self.caught_up_to(index).await?;
        let known = self.read(|sm| sm.lease_ttl_ms(lease_id));
        let Some(ttl_ms) = known else {
            return Ok(None);
        };
        // `None` here: unknown to the clock, or its expiry is already proposed.
        Ok(self.clock.keep_alive(lease_id).map(|_| ttl_ms))
    }

    /// Waits until this replica has applied log index `index`.
    async fn caught_up_to(&self, index: u64) -> Result<(), RaftLayerError> {
        self.raft
            .wait(Some(self.config.leader_wait()))
            .applied_index_at_least(Some(index), "catch up")
            .await
            .map(|_| ())
            .map_err(|_| RaftLayerError::unavailable("this replica did not catch up in time"))
    }

    /// The lease clock is authoritative only on a leader that has restarted
    /// every lease's TTL in its current term. Right after a re-election the
    /// restart may not have happened yet: that answers 503 (retry), not a
    /// verdict from the previous term's deadlines.
    fn require_clock(&self) -> Result<(), RaftLayerError> {
        if !self.is_leader() {
            return Err(self.not_leader());
        }
        let term = self.raft.server_metrics().borrow().vote.leader_id().term;
        if self.clock.term() == term {
            Ok(())
        } else {
            Err(RaftLayerError::unavailable(
                "leader in a new term; its lease clock is restarting",
            ))
        }
    }

    pub(crate) fn not_leader(&self) -> RaftLayerError {
        let metrics = self.raft.metrics().borrow().clone();
        let leader_api = metrics.current_leader.and_then(|id| {
            metrics
                .membership_config
                .membership()
                .get_node(&id)
                .map(|n| n.api_addr.clone())
        });
        RaftLayerError::NotLeader {
            leader_id: metrics.current_leader,
            leader_api,
        }
    }
}

fn unexpected(answer: &LeaderAnswer) -> RaftLayerError {
    tracing::error!(?answer, "the leader answered a different call");
    RaftLayerError::Internal("the leader answered a different call".into())
}
