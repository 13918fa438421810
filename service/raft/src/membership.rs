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
/// How long a change waits for the previous one to commit before it is tried.
const SETTLE_DEADLINE: Duration = Duration::from_secs(5);

type WriteResult =
    Result<ClientWriteResponse<TypeConfig>, RaftError<u64, ClientWriteError<u64, BatonNode>>>;

/// Adds `id` (learner first, voter once caught up) or updates its addresses.
///
/// Refused (`MembershipRefused`, nothing changed) when the node does not answer
/// on its raft address, or when the request would change this leader's own
/// addresses (they come from its flags). A learner that has not caught up within
/// [`CATCH_UP_DEADLINE`] stays a learner.
pub(crate) async fn add_member_local(
    node: &Node,
    id: u64,
    member: BatonNode,
    voter: bool,
) -> Result<(), RaftLayerError> {
    wait_settled(node).await;
    let membership = node.raft.metrics().borrow().membership_config.clone();
    let membership = membership.membership();
    let is_voter = membership.voter_ids().any(|v| v == id);
    match membership.get_node(&id) {
        Some(known) if known == &member => {}
        Some(_) => {
            if id == node.config.node_id {
                // Only this member's own flags may move it (repair after a restart
                // with new addresses); anyone else's request would cut the
                // leader off from its peers.
                if member != node.own_address() {
                    return Err(RaftLayerError::MembershipRefused(format!(
                        "member {id} is the leader answering this request; its addresses come from its own flags (--advertise-api, --advertise-raft)"
                    )));
                }
            } else {
                check_reachable(node, id, &member).await?;
            }
            tracing::info!(id, %member, "updating a member's addresses");
            let nodes = BTreeMap::from([(id, member)]);
            membership_write(
                node,
                node.raft
                    .change_membership(ChangeMembers::SetNodes(nodes), true)
                    .await,
            )?;
        }
        None => {
            check_reachable(node, id, &member).await?;
            tracing::info!(id, %member, "adding a learner; it is promoted once caught up");
            membership_write(node, node.raft.add_learner(id, member, false).await)?;
        }
    }
    if voter && !is_voter {
        wait_caught_up(node, id).await?;
        tracing::info!(id, "promoting to voter");
        membership_write(
            node,
            node.raft
                .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
                .await,
        )?;
    }
    Ok(())
}

/// The member must answer `GET /raft/status` with this cluster's secret: an
/// unreachable or foreign address is refused before anything is written.
async fn check_reachable(node: &Node, id: u64, member: &BatonNode) -> Result<(), RaftLayerError> {
    match node.link.status(&member.raft_addr, REACH_TIMEOUT).await {
        // Whoever answers there must be the node being added: the leader
        // answering for its own address once let a second id share it, and
        // openraft panicked on the resulting membership.
        Ok(status) if status.node_id == id => Ok(()),
        Ok(status) => Err(RaftLayerError::MembershipRefused(format!(
            "the node answering on {} is node {}, not node {id}",
            member.raft_addr, status.node_id
        ))),
        Err(error) => Err(RaftLayerError::MembershipRefused(format!(
            "node {id} does not answer on its raft address {} ({error}); start it first, with the cluster secret",
            member.raft_addr
        ))),
    }
}

/// Waits (up to [`SETTLE_DEADLINE`]) until the latest membership entry is
/// applied. The cluster view shows a membership as soon as its entry is
/// appended, and a joining node's change (made by its own `--join`) may still
/// be in flight when a script sees the new voter; openraft refuses another
/// change until the first commits, so removing a member right after a join (the
/// process test `a_fourth_node_joins_and_a_member_is_removed`, 1 run in 4 on a
/// busy machine) got a 409 for a change that was merely early. After the
/// deadline the change is tried anyway and openraft's refusal stands.
async fn wait_settled(node: &Node) {
    let _ = node
        .raft
        .wait(Some(SETTLE_DEADLINE))
        .metrics(
            |metrics| metrics.last_applied >= *metrics.membership_config.log_id(),
            "membership change applied",
        )
        .await;
}

/// Waits until learner `id` has replicated everything the leader had when the
/// wait began.
async fn wait_caught_up(node: &Node, id: u64) -> Result<(), RaftLayerError> {
    let target = node.raft.metrics().borrow().last_log_index.unwrap_or(0);
    let caught_up = node
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
pub(crate) async fn remove_member_local(node: &Node, id: u64) -> Result<(), RaftLayerError> {
    wait_settled(node).await;
    let membership = node.raft.metrics().borrow().membership_config.clone();
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
    membership_write(node, node.raft.change_membership(change, false).await)
}

fn membership_write(node: &Node, result: WriteResult) -> Result<(), RaftLayerError> {
    match result {
        Ok(_) => Ok(()),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => Err(node.not_leader()),
        Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(error))) => {
            Err(RaftLayerError::MembershipRefused(error.to_string()))
        }
        Err(RaftError::Fatal(fatal)) => Err(RaftLayerError::unavailable(fatal)),
    }
}
