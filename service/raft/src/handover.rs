//! Handing leadership over before a leader shuts down.
//!
//! openraft 0.9 has no leader-transfer call, and its voters refuse any vote while
//! their leader lease (`election_timeout_max` since the leader's last message)
//! runs. So the leader does the next best thing: it stops taking leader calls,
//! waits until a voter has its whole log, stops its heartbeats, and once the
//! voters' lease has run out asks that voter to campaign at once. The cluster has
//! a new leader before this process exits, one lease after the shutdown began,
//! instead of a lease plus a random election timeout (and maybe a split vote)
//! after it died.

use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::ServerState;
use tokio::time::Instant;

use crate::leader_call::LeaderCall;
use crate::node::Node;

/// The body of [`Node::hand_over_leadership`].
pub(crate) async fn hand_over_leadership(node: &Node) {
    let metrics = node.raft.metrics().borrow().clone();
    if metrics.state != ServerState::Leader {
        return;
    }
    let me = node.config.node_id;
    let membership = metrics.membership_config.membership().clone();
    let voters: Vec<u64> = membership.voter_ids().filter(|id| *id != me).collect();
    if voters.is_empty() {
        return;
    }
    node.handing_over.store(true, Ordering::Release);
    let Some(target) = most_up_to_date(node, &voters).await else {
        tracing::warn!("no voter caught up; shutting down without a hand-over");
        return;
    };
    let Some(peer) = membership.get_node(&target) else {
        return;
    };
    let addr = node.config.dial_addr(target, &peer.raft_addr);
    tracing::info!(target, "handing leadership over before shutting down");
    let runtime = node.raft.runtime_config();
    runtime.heartbeat(false);
    runtime.elect(false);
    // The voters' lease is `election_timeout_max`, twice the configured timeout.
    tokio::time::sleep(node.config.election_timeout * 2 + Duration::from_millis(50)).await;
    if let Err(error) = node
        .link
        .call(&addr, &LeaderCall::Campaign, Duration::from_secs(1))
        .await
    {
        tracing::warn!(%error, target, "could not ask the new leader to campaign");
        return;
    }
    let mut watch = node.raft.metrics();
    let elected = async move {
        watch
            .wait_for(|m| m.current_leader.is_some_and(|id| id != me))
            .await
            .is_ok()
    };
    match tokio::time::timeout(Duration::from_secs(2), elected).await {
        Ok(true) => tracing::info!(target, "leadership handed over"),
        _ => tracing::warn!(target, "no new leader yet; shutting down anyway"),
    }
}

/// A voter whose replicated log matches this leader's last entry, waiting up
/// to a second for one; else the most advanced one.
async fn most_up_to_date(node: &Node, voters: &[u64]) -> Option<u64> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let metrics = node.raft.metrics().borrow().clone();
        let last = metrics.last_log_index;
        let best = metrics.replication.as_ref().and_then(|replication| {
            voters
                .iter()
                .filter_map(|id| Some((*id, replication.get(id)?.map(|log| log.index))))
                .max_by_key(|(_, index)| *index)
        });
        match best {
            Some((id, index)) if index >= last || Instant::now() >= deadline => return Some(id),
            None if Instant::now() >= deadline => return None,
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
