//! How a node finds its cluster: a single node initializes itself; with static
//! peers the lowest id initializes once a majority answers and none of them has
//! a cluster yet; a joining node asks a member to add it. A node whose recorded
//! addresses differ from what it advertises asks the leader to update them.
//!
//! Initialization happens at most once per cluster: a node only initializes when
//! its own log is empty and every peer it reached reports an empty log, and a
//! majority must have answered, so two disjoint groups can never both do it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use baton_core::{Command, Request};
use baton_store::BatonNode;
use openraft::error::{InitializeError, RaftError};
use serde::Serialize;

use crate::leader_call::PeerStatus;
use crate::node::{Node, StartError};

/// The body of `POST /v1/cluster/members` that a joining node sends.
#[derive(Serialize)]
struct JoinRequest<'a> {
    id: u64,
    api_addr: &'a str,
    raft_addr: &'a str,
    voter: bool,
}

/// Starts whichever way of finding the cluster the configuration asks for.
pub(crate) async fn bootstrap(node: &Arc<Node>) -> Result<(), StartError> {
    let initialized = node
        .raft
        .is_initialized()
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    let config = &node.config;
    if !config.peers.is_empty() && !config.peers.contains_key(&config.node_id) {
        return Err(StartError::Config(format!(
            "--peers must include this node's id {}",
            config.node_id
        )));
    }
    if !initialized {
        if let Some(member_url) = config.join.clone() {
            tokio::spawn(join(node.clone(), member_url));
        } else if config.peers.is_empty() {
            let me = BTreeMap::from([(config.node_id, node.own_address())]);
            node.raft
                .initialize(me)
                .await
                .map_err(|e| StartError::Raft(e.to_string()))?;
        } else if config.peers.keys().next() == Some(&config.node_id) {
            tokio::spawn(initialize_with_peers(node.clone()));
        }
    }
    if config.join.is_none() {
        tokio::spawn(repair_own_address(node.clone()));
    }
    tokio::spawn(ensure_cluster_id(node.clone()));
    Ok(())
}

/// Names the cluster in the replicated state if nobody has yet: every node
/// may propose, the first applied stands, so every node shows the same id.
async fn ensure_cluster_id(node: Arc<Node>) {
    let mut stop = node.stop.subscribe();
    loop {
        if node.read(|sm| sm.cluster_id().is_some()) {
            return;
        }
        if node.raft.metrics().borrow().current_leader.is_some() {
            let cluster_id = format!("{:032x}", Node::new_lease_id().0);
            let command = Command::SetClusterId { cluster_id };
            if node.propose(Request::plain(command)).await.is_ok() {
                return;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn initialize_with_peers(node: Arc<Node>) {
    let mut stop = node.stop.subscribe();
    let majority = node.config.peers.len() / 2 + 1;
    loop {
        if node.peer_status().initialized {
            return;
        }
        let mut answered: BTreeMap<u64, PeerStatus> = BTreeMap::new();
        answered.insert(node.config.node_id, node.peer_status());
        let mut someone_initialized = false;
        for (&id, url) in &node.config.peers {
            if id == node.config.node_id {
                continue;
            }
            let addr = node.config.dial_addr(id, url);
            if let Ok(status) = node.link.status(&addr, Duration::from_secs(1)).await {
                someone_initialized |= status.initialized;
                answered.insert(id, status);
            }
        }
        if someone_initialized {
            tracing::info!("a peer already has a cluster; waiting to be contacted");
            return;
        }
        if answered.len() >= majority {
            let members = node
                .config
                .peers
                .iter()
                .map(|(&id, url)| {
                    let api_addr = answered
                        .get(&id)
                        .map(|s| s.api_addr.clone())
                        .unwrap_or_default();
                    let raft_addr = url.trim_end_matches('/').to_owned();
                    (
                        id,
                        BatonNode {
                            api_addr,
                            raft_addr,
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>();
            tracing::info!(reachable = answered.len(), "initializing the cluster");
            match node.raft.initialize(members).await {
                Ok(()) => return,
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => return,
                Err(error) => tracing::warn!(%error, "initialization failed; retrying"),
            }
        } else {
            tracing::info!(
                reachable = answered.len(),
                majority,
                "waiting for a majority of peers before initializing"
            );
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn join(node: Arc<Node>, join: String) {
    let mut stop = node.stop.subscribe();
    let url = format!("{}/v1/cluster/members", join.trim_end_matches('/'));
    loop {
        let body = JoinRequest {
            id: node.config.node_id,
            api_addr: &node.config.api_addr,
            raft_addr: &node.config.raft_addr,
            voter: true,
        };
        match node
            .link
            .post_json(&url, &body, Duration::from_secs(150))
            .await
        {
            Ok(()) => {
                tracing::info!(%join, "joined the cluster");
                return;
            }
            Err(error) => tracing::warn!(%error, "join failed; retrying"),
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Once a leader is known, makes sure the membership records this node's
/// current addresses (a node the initializer could not reach, or one that
/// came back with new addresses).
async fn repair_own_address(node: Arc<Node>) {
    let mut stop = node.stop.subscribe();
    loop {
        let metrics = node.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        if let (Some(_), Some(recorded)) = (
            metrics.current_leader,
            membership.get_node(&node.config.node_id),
        ) {
            let mine = node.own_address();
            if recorded == &mine {
                return;
            }
            let voter = membership.voter_ids().any(|v| v == node.config.node_id);
            match node.add_member(node.config.node_id, mine, voter).await {
                Ok(()) => return,
                Err(error) => tracing::warn!(%error, "could not update this node's addresses"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
    }
}
