//! Membership changes, run on the leader.
//!
//! A membership change is the one request that can take a whole cluster down: a
//! voter that cannot be reached is counted in every quorum, so it stops every
//! later write. So a node must answer on its peer port before it is added, it joins
//! as a learner (which counts in no quorum), and it becomes a voter only once it has
//! replicated the log up to the leader's last entry, within [`CATCH_UP_DEADLINE`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use baton_store::{BatonNode, TypeConfig};
use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::ClientWriteResponse;
use openraft::ChangeMembers;

use crate::error::RaftLayerError;
use crate::node::Node;

/// How long the leader waits for a new member to answer on its peer port.
const REACH_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a learner may take to catch up before the request answers that it
/// stays a learner (a snapshot of a large state takes seconds; the caller repeats
/// the request to promote it later).
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(60);

type WriteResult =
    Result<ClientWriteResponse<TypeConfig>, RaftError<u64, ClientWriteError<u64, BatonNode>>>;

impl Node {
    /// Adds `id` (learner first, voter once caught up) or updates its addresses.
    ///
    /// Refused (`MembershipRefused`, nothing changed) when the node does not answer
    /// on its raft address, or when the request would change this leader's own
    /// addresses (they come from its flags). A learner that has not caught up within
    /// [`CATCH_UP_DEADLINE`] stays a learner.
    pub(crate) async fn add_member_local(
        &self,
        id: u64,
        node: BatonNode,
        voter: bool,
    ) -> Result<(), RaftLayerError> {
        let membership = self.raft.metrics().borrow().membership_config.clone();
        let membership = membership.membership();
        let is_voter = membership.voter_ids().any(|v| v == id);
        match membership.get_node(&id) {
            Some(known) if known == &node => {}
            Some(_) => {
                if id == self.config.node_id {
                    // Only this node's own flags may move it (repair after a restart
                    // with new addresses); anyone else's request would cut the
                    // leader off from its peers.
                    if node != self.own_address() {
                        return Err(RaftLayerError::MembershipRefused(format!(
                            "node {id} is the leader answering this request; its addresses come from its own flags (--advertise-api, --advertise-raft)"
                        )));
                    }
                } else {
                    self.check_reachable(id, &node).await?;
                }
                tracing::info!(id, %node, "updating a member's addresses");
                let nodes = BTreeMap::from([(id, node)]);
                self.membership_write(
                    self.raft
                        .change_membership(ChangeMembers::SetNodes(nodes), true)
                        .await,
                )?;
            }
            None => {
                self.check_reachable(id, &node).await?;
                tracing::info!(id, %node, "adding a learner; it is promoted once caught up");
                self.membership_write(self.raft.add_learner(id, node, false).await)?;
            }
        }
        if voter && !is_voter {
            self.wait_caught_up(id).await?;
            tracing::info!(id, "promoting to voter");
            self.membership_write(
                self.raft
                    .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
                    .await,
            )?;
        }
        Ok(())
    }

    /// The node must answer `GET /raft/status` with this cluster's secret: an
    /// unreachable or foreign address is refused before anything is written.
    async fn check_reachable(&self, id: u64, node: &BatonNode) -> Result<(), RaftLayerError> {
        match self.link.status(&node.raft_addr, REACH_TIMEOUT).await {
            // Whoever answers there must be the node being added: the leader
            // answering for its own address once let a second id share it, and
            // openraft panicked on the resulting membership.
            Ok(status) if status.node_id == id => Ok(()),
            Ok(status) => Err(RaftLayerError::MembershipRefused(format!(
                "the node answering on {} is node {}, not node {id}",
                node.raft_addr, status.node_id
            ))),
            Err(error) => Err(RaftLayerError::MembershipRefused(format!(
                "node {id} does not answer on its raft address {} ({error}); start it first, with the cluster secret",
                node.raft_addr
            ))),
        }
    }

    /// Waits until learner `id` has replicated everything the leader had when the
    /// wait began.
    async fn wait_caught_up(&self, id: u64) -> Result<(), RaftLayerError> {
        let target = self.raft.metrics().borrow().last_log_index.unwrap_or(0);
        let caught_up = self
            .raft
            .wait(Some(CATCH_UP_DEADLINE))
            .metrics(
                |metrics| {
                    metrics
                        .replication
                        .as_ref()
                        .and_then(|replication| replication.get(&id).cloned().flatten())
                        .is_some_and(|matched| matched.index >= target)
                },
                "learner caught up",
            )
            .await;
        caught_up.map(|_| ()).map_err(|_| {
            RaftLayerError::MembershipRefused(format!(
                "node {id} has not caught up with the log within {} s; it stays a learner (no quorum counts it): repeat the request to promote it",
                CATCH_UP_DEADLINE.as_secs()
            ))
        })
    }

    /// Removes `id` from the voters and the nodes.
    pub(crate) async fn remove_member_local(&self, id: u64) -> Result<(), RaftLayerError> {
        let membership = self.raft.metrics().borrow().membership_config.clone();
        let membership = membership.membership();
        if membership.get_node(&id).is_none() {
            return Err(RaftLayerError::MemberNotFound(id));
        }
        let ids = BTreeSet::from([id]);
        let change = if membership.voter_ids().any(|v| v == id) {
            ChangeMembers::RemoveVoters(ids)
        } else {
            ChangeMembers::RemoveNodes(ids)
        };
        tracing::info!(id, "removing a member");
        // `retain = false`: a removed voter leaves the node list too.
        self.membership_write(self.raft.change_membership(change, false).await)
    }

    fn membership_write(&self, result: WriteResult) -> Result<(), RaftLayerError> {
        match result {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
                Err(self.not_leader())
            }
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(error))) => {
                Err(RaftLayerError::MembershipRefused(error.to_string()))
            }
            Err(RaftError::Fatal(fatal)) => Err(RaftLayerError::unavailable(fatal)),
        }
    }
}
