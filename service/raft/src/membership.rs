//! Membership changes, run on the leader.

use std::collections::{BTreeMap, BTreeSet};

use baton_store::{BatonNode, TypeConfig};
use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::ClientWriteResponse;
use openraft::ChangeMembers;

use crate::error::RaftLayerError;
use crate::node::Node;

type WriteResult =
    Result<ClientWriteResponse<TypeConfig>, RaftError<u64, ClientWriteError<u64, BatonNode>>>;

impl Node {
    /// Adds `id` (learner first, voter once caught up) or updates its addresses.
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
            Some(known) => {
                if known != &node {
                    tracing::info!(id, %node, "updating a member's addresses");
                    let nodes = BTreeMap::from([(id, node)]);
                    self.membership_write(
                        self.raft
                            .change_membership(ChangeMembers::SetNodes(nodes), true)
                            .await,
                    )?;
                }
            }
            None => {
                tracing::info!(id, %node, "adding a learner; it is promoted once caught up");
                // Blocks until the learner has replicated up to the change.
                self.membership_write(self.raft.add_learner(id, node, true).await)?;
            }
        }
        if voter && !is_voter {
            tracing::info!(id, "promoting to voter");
            self.membership_write(
                self.raft
                    .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
                    .await,
            )?;
        }
        Ok(())
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
