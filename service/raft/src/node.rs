//! A running Baton node: the openraft handle and everything around it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_core::{Command, CoreError, LeaseId, Outcome, Reply, Request, StateMachine, WaiterId};
use baton_store::{ApplyObserver, BatonNode, SharedState, StoreError, TypeConfig};
use openraft::{Config, Raft, ServerState, SnapshotPolicy};
use tokio::sync::watch;

use crate::config::NodeConfig;
use crate::error::RaftLayerError;
use crate::lease_clock::LeaseClock;
use crate::network::HttpNetwork;
use crate::proposer::{raft_error, wall_clock_ms, Proposer};
use crate::waiters::WaiterRegistry;
use crate::watch_hub::WatchHub;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The storage could not be opened.
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    /// openraft refused the configuration or failed to start.
    #[error("raft: {0}")]
    Raft(String),
    /// The data directory could not be prepared.
    #[error("data directory: {0}")]
    Io(#[from] std::io::Error),
}

/// A member of the cluster as `GET /v1/cluster` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Raft node id.
    pub id: u64,
    /// Its client API address.
    pub api_addr: String,
    /// Its Raft address.
    pub raft_addr: String,
    /// Voter or learner.
    pub voter: bool,
}

/// The cluster as this node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterStatus {
    /// This node.
    pub node_id: u64,
    /// The current leader, if known.
    pub leader_id: Option<u64>,
    /// Current Raft term.
    pub term: u64,
    /// Members, by id.
    pub members: Vec<Member>,
    /// Revision applied on this replica.
    pub applied_revision: u64,
    /// Last applied log index on this replica.
    pub applied_index: u64,
    /// Last log index on this replica.
    pub last_log_index: u64,
}

/// Routes applied events to the lease clock, the waiting requests and the
/// watch hub.
struct Dispatcher {
    clock: Arc<LeaseClock>,
    waiters: Arc<WaiterRegistry>,
    watch: Arc<WatchHub>,
}

impl ApplyObserver for Dispatcher {
    fn applied(&self, _log_index: u64, outcomes: &[Outcome]) {
        for outcome in outcomes {
            if !outcome.events.is_empty() {
                self.clock.on_events(&outcome.events);
                self.waiters.on_events(&outcome.events);
                self.watch.publish(&outcome.events);
            }
        }
    }

    fn snapshot_installed(&self, revision: u64) {
        self.watch.snapshot_installed(revision);
    }
}

/// One Baton node.
pub struct Node {
    raft: Raft<TypeConfig>,
    shared: Arc<SharedState>,
    proposer: Proposer,
    clock: Arc<LeaseClock>,
    waiters: Arc<WaiterRegistry>,
    watch: Arc<WatchHub>,
    config: NodeConfig,
    leading: Arc<AtomicBool>,
    stop: watch::Sender<bool>,
}

impl Node {
    /// Opens the storage, starts Raft, and (single node) initializes the cluster on
    /// first start. Returns once the node runs; leadership follows shortly.
    pub async fn start(config: NodeConfig) -> Result<Arc<Node>, StartError> {
        std::fs::create_dir_all(&config.data_dir)?;
        let (log_store, state_machine) = baton_store::open(&config.data_dir)?;
        let shared = state_machine.shared();
        let clock = Arc::new(LeaseClock::default());
        let waiters = Arc::new(WaiterRegistry::default());
        // History starts at the restored snapshot; openraft re-applies the log
        // after it (through the observer), which refills it.
        let watch = WatchHub::start(config.watch.clone(), shared.read().machine.revision());
        state_machine.set_observer(Arc::new(Dispatcher {
            clock: clock.clone(),
            waiters: waiters.clone(),
            watch: watch.clone(),
        }));
        let heartbeat = config.heartbeat.as_millis() as u64;
        let election = config.election_timeout.as_millis() as u64;
        let raft_config = Config {
            cluster_name: "baton".to_owned(),
            heartbeat_interval: heartbeat.max(10),
            election_timeout_min: election.max(heartbeat * 3),
            election_timeout_max: (election * 2).max(heartbeat * 6),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every.max(10)),
            max_in_snapshot_log_to_keep: 1_000,
            ..Config::default()
        }
        .validate()
        .map_err(|e| StartError::Raft(e.to_string()))?;
        let raft = Raft::new(
            config.node_id,
            Arc::new(raft_config),
            HttpNetwork::new(config.cluster_secret.clone()),
            log_store,
            state_machine,
        )
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;

        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| StartError::Raft(e.to_string()))?;
        if !initialized {
            let mut members = BTreeMap::new();
            members.insert(
                config.node_id,
                BatonNode {
                    api_addr: config.api_addr.clone(),
                    raft_addr: config.raft_addr.clone(),
                },
            );
            raft.initialize(members)
                .await
                .map_err(|e| StartError::Raft(e.to_string()))?;
        }

        let proposer = Proposer::start(
            raft.clone(),
            config.limits,
            config.max_batch,
            config.max_in_flight,
        );
        let (stop, _) = watch::channel(false);
        let node = Arc::new(Node {
            raft,
            shared,
            proposer,
            clock,
            waiters,
            watch,
            config,
            leading: Arc::new(AtomicBool::new(false)),
            stop,
        });
        tokio::spawn(watch_leadership(node.clone()));
        tokio::spawn(run_lease_clock(node.clone()));
        Ok(node)
    }

    /// This node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// A fresh lease id: 128 bits from the thread-local CSPRNG (ChaCha, seeded by
    /// the operating system).
    pub fn new_lease_id() -> LeaseId {
        LeaseId(rand::random::<u128>())
    }

    /// A fresh waiter id.
    pub fn new_waiter_id() -> WaiterId {
        WaiterId(rand::random::<u64>())
    }

    /// Proposes a request through the log and returns its outcome once applied.
    pub async fn propose(&self, request: Request) -> Result<Outcome, RaftLayerError> {
        self.proposer.propose(request).await
    }

    /// Reads the applied state.
    pub fn read<R>(&self, f: impl FnOnce(&StateMachine) -> R) -> R {
        f(&self.shared.read().machine)
    }

    /// The revision applied on this replica.
    pub fn revision(&self) -> u64 {
        self.shared.read().machine.revision()
    }

    /// Waits until this replica has applied everything the leader had committed
    /// when the call was made (Raft ReadIndex; never a leader-lease shortcut).
    pub async fn linearizable(&self) -> Result<(), RaftLayerError> {
        match self.raft.ensure_linearizable().await {
            Ok(_) => Ok(()),
            Err(openraft::error::RaftError::APIError(
                openraft::error::CheckIsLeaderError::ForwardToLeader(forward),
            )) => Err(RaftLayerError::NotLeader {
                leader_id: forward.leader_id,
                leader_api: forward.leader_node.map(|n| n.api_addr),
            }),
            Err(other) => Err(raft_error(other)),
        }
    }

    /// Waits until this replica has applied revision `wanted`, up to `timeout`.
    pub async fn wait_for_revision(
        &self,
        wanted: u64,
        timeout: Duration,
    ) -> Result<(), RaftLayerError> {
        let mut applied = self.shared.subscribe_applied();
        let reached = tokio::time::timeout(timeout, applied.wait_for(|rev| *rev >= wanted)).await;
        match reached {
            Ok(Ok(_)) => Ok(()),
            _ => Err(RaftLayerError::RevisionNotReached {
                wanted,
                applied: self.revision(),
            }),
        }
    }

    /// Moves a lease's deadline to a full TTL from now, then confirms this node is
    /// still the leader (so a keepalive never lands on a deposed leader only).
    /// `Ok(None)` when there is no such lease.
    pub async fn keep_alive(&self, lease_id: LeaseId) -> Result<Option<u64>, RaftLayerError> {
        if !self.leading.load(Ordering::Acquire) {
            return Err(self.not_leader());
        }
        let known = self.read(|sm| sm.lease_ttl_ms(lease_id));
        let Some(ttl_ms) = known else {
            return Ok(None);
        };
        if self.clock.keep_alive(lease_id).is_none() {
            return Ok(None);
        }
        self.linearizable().await?;
        Ok(Some(ttl_ms))
    }

    /// Time left before a lease expires, on the leader's clock.
    pub fn remaining(&self, lease_id: LeaseId) -> Option<Duration> {
        self.clock.remaining(lease_id)
    }

    /// The registry of requests waiting for queued grants.
    pub fn waiters(&self) -> &WaiterRegistry {
        &self.waiters
    }

    /// The watch hub (events applied on this replica).
    pub fn watch_hub(&self) -> &Arc<WatchHub> {
        &self.watch
    }

    /// Whether this node currently acts as leader (lease clock running).
    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    fn not_leader(&self) -> RaftLayerError {
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

    /// The cluster as this node sees it.
    pub fn cluster(&self) -> ClusterStatus {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, node)| Member {
                id: *id,
                api_addr: node.api_addr.clone(),
                raft_addr: node.raft_addr.clone(),
                voter: voters.contains(id),
            })
            .collect();
        ClusterStatus {
            node_id: self.config.node_id,
            leader_id: metrics.current_leader,
            term: metrics.current_term,
            members,
            applied_revision: self.revision(),
            applied_index: metrics.last_applied.map_or(0, |l| l.index),
            last_log_index: metrics.last_log_index.unwrap_or(0),
        }
    }

    /// The commit index known to this node.
    pub async fn commit_index(&self) -> u64 {
        self.raft
            .with_raft_state(|state| state.committed.map_or(0, |l| l.index))
            .await
            .unwrap_or(0)
    }

    /// Ready: a leader is known and this replica applied everything committed.
    pub async fn is_ready(&self) -> bool {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.current_leader.is_none() || metrics.running_state.is_err() {
            return false;
        }
        let applied = metrics.last_applied.map_or(0, |l| l.index);
        applied >= self.commit_index().await
    }

    /// Waits until this node leads (single node: right after start).
    pub async fn wait_until_leader(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if self.is_leader() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// Stops Raft (after in-flight proposals finish) and the background tasks.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        self.watch.close();
        self.leading.store(false, Ordering::Release);
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "raft shutdown");
        }
    }
}

async fn watch_leadership(node: Arc<Node>) {
    let mut metrics = node.raft.metrics();
    let mut stop = node.stop.subscribe();
    loop {
        let leading_now = metrics.borrow_and_update().state == ServerState::Leader;
        let was = node.leading.load(Ordering::Acquire);
        if leading_now && !was {
            node.clock.reset_all(&node.shared.read().machine);
            node.leading.store(true, Ordering::Release);
            tracing::info!(
                node = node.config.node_id,
                "became leader; every lease restarts at a full TTL"
            );
        } else if !leading_now && was {
            node.leading.store(false, Ordering::Release);
            tracing::info!(node = node.config.node_id, "no longer leader");
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

async fn run_lease_clock(node: Arc<Node>) {
    let mut stop = node.stop.subscribe();
    let mut ticker = tokio::time::interval(node.config.lease_tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let tick_pending = Arc::new(AtomicBool::new(false));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return,
        }
        if !node.is_leader() {
            continue;
        }
        for lease_id in node.clock.take_expired() {
            let node = node.clone();
            tokio::spawn(async move {
                let outcome = node
                    .propose(Request::plain(Command::ExpireLease { lease_id }))
                    .await;
                match outcome {
                    Ok(Outcome {
                        result: Ok(Reply::LeaseEnded { .. }),
                        ..
                    }) => {}
                    Ok(Outcome {
                        result: Err(CoreError::LeaseNotFound),
                        ..
                    }) => {}
                    _ => node.clock.expiry_failed(lease_id),
                }
            });
        }
        let due = node.read(|sm| sm.next_timer_ms());
        if due.is_some_and(|at| at <= wall_clock_ms()) && !tick_pending.swap(true, Ordering::AcqRel)
        {
            let node = node.clone();
            let pending = tick_pending.clone();
            tokio::spawn(async move {
                let _ = node.propose(Request::plain(Command::Tick)).await;
                pending.store(false, Ordering::Release);
            });
        }
    }
}
