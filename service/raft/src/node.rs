//! A running Baton node: the openraft handle and everything around it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_core::{Command, CoreError, LeaseId, Outcome, Reply, Request, StateMachine, WaiterId};
use baton_store::{ApplyObserver, BatonNode, SharedState, StoreError, TypeConfig};
use openraft::{Config, Raft, ServerState, SnapshotPolicy};
use tokio::sync::watch;

use crate::config::NodeConfig;
use crate::error::RaftLayerError;
use crate::leader_call::{LeaderCall, LeaderResult, PeerStatus};
use crate::leader_link::LeaderLink;
use crate::lease_clock::LeaseClock;
use crate::log_versions::PeerLogVersions;
use crate::metrics::NodeMetrics;
use crate::network::{peer_http_client, HttpNetwork};
use crate::peer_connection::PeerConnector;
use crate::proposer::{wall_clock_ms, Lane, Proposer};
use crate::snapshot_schedule::SnapshotSchedule;
use crate::waiters::WaiterRegistry;
use crate::waiting::{QueueKind, Waited};
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
    /// The configuration contradicts itself.
    #[error("configuration: {0}")]
    Config(String),
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
    snapshots_installed: Arc<AtomicU64>,
    watch: Arc<WatchHub>,
    metrics: Arc<NodeMetrics>,
}

impl ApplyObserver for Dispatcher {
    fn applied(&self, _log_index: u64, now_ms: u64, outcomes: &[Outcome]) {
        self.metrics.applied(now_ms, outcomes);
        for outcome in outcomes {
            if !outcome.events.is_empty() {
                self.clock.on_events(&outcome.events);
                self.waiters.on_events(&outcome.events);
                self.watch.publish(&outcome.events);
            }
        }
    }

    fn snapshot_installed(&self, revision: u64, machine: &StateMachine) {
        // The clock learns leases from applied events, and a snapshot brings
        // none: it catches up with the installed state. That matters on a node
        // that won an election while its install was still being restored (the
        // leadership reset read the old state); the term and decided expiries
        // stay as they are.
        self.clock.restart_from(machine);
        self.snapshots_installed.fetch_add(1, Ordering::Relaxed);
        self.metrics.snapshot_installed();
        self.watch.snapshot_installed(revision);
    }
}

/// One Baton node.
pub struct Node {
    pub(crate) raft: Raft<TypeConfig>,
    pub(crate) shared: Arc<SharedState>,
    pub(crate) proposer: Proposer,
    pub(crate) clock: Arc<LeaseClock>,
    waiters: Arc<WaiterRegistry>,
    pub(crate) config: NodeConfig,
    pub(crate) link: LeaderLink,
    watch: Arc<WatchHub>,
    leading: Arc<AtomicBool>,
    /// Set while a leader hands over before shutting down: it takes no more
    /// leader calls, so the voters' leader lease can run out.
    pub(crate) handing_over: AtomicBool,
    snapshots_installed: Arc<AtomicU64>,
    pub(crate) metrics: Arc<NodeMetrics>,
    pub(crate) stop: watch::Sender<bool>,
    log_versions: PeerLogVersions,
}

impl Node {
    /// Opens the storage and starts Raft. A node with no peers and nothing to join
    /// initializes a single-member cluster on first start; with `peers`, the
    /// lowest id initializes once a majority answers; with `join`, the node asks
    /// to be added. Returns once the node runs; leadership follows shortly.
    pub async fn start(config: NodeConfig) -> Result<Arc<Node>, StartError> {
        crate::log_versions::check_log_version(config.log_version).map_err(StartError::Config)?;
        std::fs::create_dir_all(&config.data_dir)?;
        let (mut log_store, mut state_machine) = baton_store::open_with(
            &config.data_dir,
            baton_store::StoreOptions {
                durability: config.durability,
                wal_prewrite_mib: config.wal_prewrite_mib,
            },
        )?;
        // Before openraft reads the vote (see the function).
        crate::stored_leadership::give_up_stored_leadership(
            config.node_id,
            &mut log_store,
            &mut state_machine,
        )
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
        let shared = state_machine.shared();
        let clock = Arc::new(LeaseClock::default());
        let waiters = Arc::new(WaiterRegistry::default());
        let snapshots_installed = Arc::new(AtomicU64::new(0));
        // History starts at the restored snapshot; openraft re-applies the log
        // after it (through the observer), which refills it.
        let watch = WatchHub::start(config.watch.clone(), shared.read().machine.revision());
        let metrics = Arc::new(NodeMetrics::new(state_machine.metrics()));
        state_machine.set_observer(Arc::new(Dispatcher {
            clock: clock.clone(),
            waiters: waiters.clone(),
            snapshots_installed: snapshots_installed.clone(),
            watch: watch.clone(),
            metrics: metrics.clone(),
        }));
        let raft_config = raft_config(&config)?;
        let log_versions = PeerLogVersions::default();
        let connect_timeout = config.heartbeat.max(Duration::from_millis(100)) * 2;
        let client = peer_http_client(connect_timeout, config.tls.as_ref())
            .map_err(|error| StartError::Config(format!("the peer HTTP client: {error}")))?;
        let connector = PeerConnector::new(connect_timeout, config.tls.as_ref())
            .map_err(|error| StartError::Config(format!("the peer connector: {error}")))?;
        let raft = Raft::new(
            config.node_id,
            Arc::new(raft_config),
            HttpNetwork::new(
                connector,
                config.cluster_secret.clone(),
                config.dial_overrides.clone(),
                config.late_leader_contact(),
                log_versions.clone(),
            ),
            log_store,
            state_machine,
        )
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;

        let proposer = Proposer::start(
            raft.clone(),
            config.limits,
            config.max_batch,
            config.max_in_flight,
            config.propose_timeout,
            config.max_queued,
        );
        let (stop, _) = watch::channel(false);
        let link = LeaderLink::new(client, config.cluster_secret.clone());
        let node = Arc::new(Node {
            raft,
            shared,
            proposer,
            clock,
            waiters,
            watch,
            config,
            link,
            leading: Arc::new(AtomicBool::new(false)),
            handing_over: AtomicBool::new(false),
            snapshots_installed,
            metrics,
            stop,
            log_versions,
        });
        crate::bootstrap::bootstrap(&node).await?;
        tokio::spawn(watch_leadership(node.clone()));
        tokio::spawn(run_lease_clock(node.clone()));
        tokio::spawn(crate::metrics::count_leader_changes(node.clone()));
        let schedule = SnapshotSchedule {
            every: node.config.snapshot_every.max(10),
            log_ratio: node.config.snapshot_log_ratio,
        };
        tokio::spawn(crate::snapshot_schedule::run(node.clone(), schedule));
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

    /// Reads the applied state, holding the lock applying waits for: for
    /// lookups, not for walks over the whole state.
    pub fn read<R>(&self, f: impl FnOnce(&StateMachine) -> R) -> R {
        f(&self.shared.read().machine)
    }

    /// The revision applied on this replica.
    pub fn revision(&self) -> u64 {
        self.shared.read().machine.revision()
    }

    /// Waits until this replica has applied revision `wanted`, up to `timeout`.
    pub async fn wait_for_revision(
        &self,
        wanted: u64,
        timeout: Duration,
    ) -> Result<(), crate::RaftLayerError> {
        let mut applied = self.shared.subscribe_applied();
        let reached = tokio::time::timeout(timeout, applied.wait_for(|rev| *rev >= wanted)).await;
        match reached {
            Ok(Ok(_)) => Ok(()),
            _ => Err(crate::RaftLayerError::RevisionNotReached {
                wanted,
                applied: self.revision(),
            }),
        }
    }

    /// Snapshots received from a leader since start (a follower far behind).
    pub fn snapshots_installed(&self) -> u64 {
        self.snapshots_installed.load(Ordering::Relaxed)
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

    /// The newest log version every member decodes, as far as this node knows:
    /// its own `--log-version` and what each peer said in its latest answer
    /// (a member that has not answered counts as the oldest, 0). Only a
    /// leader hears its peers, so a follower's answer is its own version alone
    /// or 0; the leader's is what its proposals are held to.
    pub fn cluster_log_version(&self) -> u32 {
        let members: Vec<u64> = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .collect();
        self.log_versions
            .lowest(self.config.node_id, self.config.log_version, members)
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
            // The state's own position: openraft's includes a snapshot that is
            // still being restored.
            applied_index: self.shared.applied_index().unwrap_or(0),
            last_log_index: metrics.last_log_index.unwrap_or(0),
        }
    }

    /// The commit index known to this node (0 once raft has stopped).
    pub async fn commit_index(&self) -> u64 {
        self.committed_if_running().await.unwrap_or(0)
    }

    /// The commit index known to this node, or `None` when raft has stopped.
    async fn committed_if_running(&self) -> Option<u64> {
        self.raft
            .with_raft_state(|state| state.committed.map_or(0, |l| l.index))
            .await
            .ok()
    }

    /// Ready: a leader is known and this replica applies what is committed:
    /// everything committed when asked is applied within [`READY_APPLY_GRACE`].
    ///
    /// Not "applied equals committed" at one instant: an entry is committed a
    /// moment before it is applied, so under writes that comparison fails
    /// most of the time on a healthy node (1,313 of 2,000 probes in
    /// `a_node_under_writes_stays_ready`), and a readiness probe that flaps
    /// with the load takes the pod out of its Service. A replica restoring a
    /// snapshot or with more than the grace of committed entries to apply is
    /// not ready. The whole check, the question to raft's core included, is
    /// bounded by the grace, inside the chart's 2 s probe time-out.
    pub async fn is_ready(&self) -> bool {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.current_leader.is_none() || metrics.running_state.is_err() {
            return false;
        }
        let caught_up = async {
            // None: raft stopped since the check above.
            let Some(committed) = self.committed_if_running().await else {
                return false;
            };
            self.shared.applied_at_least(committed).await;
            true
        };
        tokio::time::timeout(READY_APPLY_GRACE, caught_up)
            .await
            .unwrap_or(false)
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

    /// Waits until some node (this one or another) is known to lead.
    pub async fn wait_until_leader_known(&self, timeout: Duration) -> bool {
        let mut metrics = self.raft.metrics();
        let known = async move {
            metrics
                .wait_for(|m| m.current_leader.is_some())
                .await
                .is_ok()
        };
        matches!(tokio::time::timeout(timeout, known).await, Ok(true))
    }

    /// Proposes a request through the log (on the leader, wherever this node is)
    /// and returns its outcome once applied.
    ///
    /// Retries across leader changes when the request certainly did not take
    /// effect (refused before it was appended, or never sent), and also when it
    /// may have but carries an idempotency key, whose retry returns the first
    /// answer. Otherwise an interrupted request answers "outcome unknown".
    pub async fn propose(&self, request: Request) -> Result<Outcome, RaftLayerError> {
        crate::routing::propose(self, request).await
    }

    /// Waits until this replica has applied everything the leader had committed
    /// when the call was made (Raft ReadIndex through the leader; never a
    /// leader-lease shortcut). Works the same on a follower: the leader confirms
    /// its leadership with a quorum and names the index to wait for.
    pub async fn linearizable(&self) -> Result<(), RaftLayerError> {
        crate::routing::linearizable(self).await
    }

    /// Moves a lease's deadline to a full TTL from now on the leader, which then
    /// confirms it still leads. `Ok(None)` when there is no such lease.
    pub async fn keep_alive(&self, lease_id: LeaseId) -> Result<Option<u64>, RaftLayerError> {
        crate::routing::keep_alive(self, lease_id).await
    }

    /// Time left before a lease expires, on the leader's clock.
    pub async fn remaining(&self, lease_id: LeaseId) -> Result<Option<Duration>, RaftLayerError> {
        crate::routing::remaining(self, lease_id).await
    }

    /// Adds node `id` as a learner, promotes it to voter once it has caught up
    /// (when `voter`), or updates its addresses if it is already a member.
    pub async fn add_member(
        &self,
        id: u64,
        member: BatonNode,
        voter: bool,
    ) -> Result<(), RaftLayerError> {
        crate::routing::add_member(self, id, member, voter).await
    }

    /// Removes node `id` from the cluster.
    pub async fn remove_member(&self, id: u64) -> Result<(), RaftLayerError> {
        crate::routing::remove_member(self, id).await
    }

    /// Answers a leader call here, as the leader. Refuses with `NotLeader` when
    /// this node does not lead (the caller retries on the real leader).
    pub async fn answer(&self, call: LeaderCall) -> LeaderResult {
        crate::routing::answer(self, call).await
    }

    /// Proposes `request` (an acquire or campaign carrying `waiter`) and, if it
    /// queues, waits up to `wait` for the grant, or until `abandoned` resolves
    /// (the client went away). If the wait is abandoned or the caller's future is
    /// dropped, the wait is cancelled through the log.
    ///
    /// `abandoned` is polled only once the request has queued: most acquires are
    /// answered at once, and watching a client (a socket registered with the
    /// reactor) costs a few system calls that an immediate answer does not need.
    pub async fn propose_and_wait(
        self: &Arc<Self>,
        request: Request,
        kind: QueueKind,
        waiter: WaiterId,
        wait: Duration,
        abandoned: impl std::future::Future<Output = ()>,
    ) -> Result<Waited, RaftLayerError> {
        crate::waiting::propose_and_wait(self, request, kind, waiter, wait, abandoned).await
    }

    /// Hands leadership to the most up-to-date voter, if this node leads a cluster
    /// of several voters. Bounded (about one leader lease plus two seconds); on any
    /// failure it gives up and the others elect a leader after their timeout.
    pub async fn hand_over_leadership(&self) {
        crate::handover::hand_over_leadership(self).await
    }

    /// What this node says about itself on the peer listener.
    pub fn peer_status(&self) -> PeerStatus {
        let metrics = self.raft.metrics().borrow().clone();
        PeerStatus {
            node_id: self.config.node_id,
            initialized: metrics.membership_config.log_id().is_some()
                || metrics.last_log_index.is_some(),
            api_addr: self.config.api_addr.clone(),
            raft_addr: self.config.raft_addr.clone(),
            leader_id: metrics.current_leader,
        }
    }

    pub(crate) fn own_address(&self) -> BatonNode {
        BatonNode {
            api_addr: self.config.api_addr.clone(),
            raft_addr: self.config.raft_addr.clone(),
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
    // The server metrics change only with the vote, state, leader or membership;
    // the full metrics change with every applied entry, which would wake this
    // task once per write for nothing.
    let mut metrics = node.raft.server_metrics();
    let mut stop = node.stop.subscribe();
    loop {
        let (leading_now, term, voters) = {
            let seen = metrics.borrow_and_update();
            (
                seen.state == ServerState::Leader,
                seen.vote.leader_id().term,
                seen.membership_config.membership().voter_ids().count(),
            )
        };
        node.config
            .idle_poll
            .set_lone_voter(leading_now && voters == 1);
        let was = node.leading.load(Ordering::Acquire);
        // Leading again in a later term counts as becoming leader, even when the
        // step down in between was too brief for this task to see it.
        if leading_now && (!was || node.clock.term() != term) {
            node.leading.store(false, Ordering::Release);
            node.clock.reset_all(&node.shared.read().machine, term);
            node.leading.store(true, Ordering::Release);
            tracing::info!(
                node = node.config.node_id,
                term,
                "became leader; every lease restarts at a full TTL"
            );
        } else if !leading_now && was {
            node.leading.store(false, Ordering::Release);
            node.clock.stand_down();
            tracing::info!(node = node.config.node_id, "no longer leader");
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() {
                // Raft stopped (shutdown or a fatal error): this node leads no more.
                // The server metrics never report `Shutdown`; the channel just closes.
                node.leading.store(false, Ordering::Release);
                node.clock.stand_down();
                return;
            },
            _ = stop.changed() => return,
        }
    }
}

/// How long a readiness check waits for this replica to apply what was
/// committed when it asked: far beyond a healthy apply (milliseconds), short
/// of the chart's probe time-out (2 s) and of a million-holding restore.
const READY_APPLY_GRACE: Duration = Duration::from_secs(1);

/// Expiry proposals queued or in flight, at most: two, so that the next slice
/// already waits while one is applied and every entry of a storm carries one
/// (with one, the next slice often misses the entry being gathered).
const EXPIRY_PROPOSALS_IN_FLIGHT: usize = 2;

async fn run_lease_clock(node: Arc<Node>) {
    let mut stop = node.stop.subscribe();
    let mut ticker = tokio::time::interval(node.config.lease_tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let tick_pending = Arc::new(AtomicBool::new(false));
    let expiries_due = Arc::new(tokio::sync::Notify::new());
    // Subscribed here, not in the task: a stop sent before the task first runs
    // must still end it.
    tokio::spawn(propose_expiries(
        node.clone(),
        expiries_due.clone(),
        node.stop.subscribe(),
    ));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return,
        }
        if !node.is_leader() {
            continue;
        }
        expiries_due.notify_one();
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

/// Proposes the expiries the lease clock finds due, woken by its ticks: slices
/// of up to `expiries_per_entry` leases ([`NodeConfig::expiries_per_entry`]), the next taken as soon as one of
/// [`EXPIRY_PROPOSALS_IN_FLIGHT`] is answered, for as long as full slices are
/// due. So a storm of expiries goes out at the pace the log applies them, one
/// slice per entry, while the proposer's queue keeps room for live clients
/// (issue 19: "no live lease's keepalive is refused").
async fn propose_expiries(
    node: Arc<Node>,
    due: Arc<tokio::sync::Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let places = Arc::new(tokio::sync::Semaphore::new(EXPIRY_PROPOSALS_IN_FLIGHT));
    loop {
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            _ = due.notified() => {}
            _ = stop.changed() => return,
        }
        loop {
            let place = tokio::select! {
                place = places.clone().acquire_owned() => place,
                _ = stop.changed() => return,
            };
            let Ok(place) = place else {
                return;
            };
            if !node.is_leader() {
                break;
            }
            let slice = node.config.expiries_per_entry.max(1);
            let expired = node.clock.take_expired(slice);
            if expired.leases.is_empty() {
                break;
            }
            let full = expired.leases.len() == slice;
            let node = node.clone();
            tokio::spawn(async move {
                let _place = place;
                propose_expiry_slice(&node, expired.leases, expired.term).await;
            });
            if !full {
                break;
            }
        }
    }
}

async fn propose_expiry_slice(node: &Node, lease_ids: Vec<LeaseId>, term: u64) {
    // Only this node's clock decided them, so only this node may propose them:
    // never forwarded (a deposed leader's stale decision would expire a lease
    // the new leader just kept alive). And only in the term they were decided
    // in: a proposal that waited across a re-election of this same node is
    // refused by the log (chaos finding 7).
    let proposals = expiry_commands(lease_ids, term, node.cluster_log_version())
        .into_iter()
        .map(|(command, covered)| async move {
            let request = Request::plain(command);
            let outcome = crate::routing::propose_as_leader(node, Lane::Background, request).await;
            match outcome {
                // A lease already gone (revoked meanwhile) needs no expiry.
                Ok(Outcome {
                    result:
                        Ok(Reply::LeasesExpired { .. } | Reply::LeaseClosed(_))
                        | Err(CoreError::ExpiryOutdated { .. } | CoreError::LeaseNotFound),
                    ..
                }) => {}
                _ => {
                    for lease_id in covered {
                        node.clock.expiry_failed(term, lease_id);
                    }
                }
            }
        });
    futures_util::future::join_all(proposals).await;
}

/// The commands that expire `lease_ids` (decided in `term`), each with the
/// leases it covers: one [`Command::ExpireLeasesOfTerm`] when every member's
/// log version decodes it, else one [`Command::ExpireLeaseOfTerm`] per lease,
/// which every build does. An older follower cannot parse an entry carrying a
/// command it does not know and refuses the whole append, so a leader of a
/// newer build that proposed one mid-upgrade would leave such followers
/// unable to take any entry, and with a quorum of them nothing would commit.
fn expiry_commands(
    lease_ids: Vec<LeaseId>,
    term: u64,
    cluster_log_version: u32,
) -> Vec<(Command, Vec<LeaseId>)> {
    let batched = Command::ExpireLeasesOfTerm {
        lease_ids: lease_ids.clone(),
        term,
    };
    if cluster_log_version >= batched.log_version() {
        return vec![(batched, lease_ids)];
    }
    lease_ids
        .into_iter()
        .map(|lease_id| {
            (
                Command::ExpireLeaseOfTerm { lease_id, term },
                vec![lease_id],
            )
        })
        .collect()
}

/// How long a snapshot chunk may take to be answered. The last chunk is
/// answered only once the follower has decoded, restored and stored the whole
/// snapshot: 2.4 s for 1,000,000 held locks on the 2-core development machine
/// (`make bench-snapshot-cluster`). With the 1 s this was, that answer timed
/// out, the leader resent the chunk, the follower (done with it) called it a
/// mismatch and the leader sent the whole snapshot again. 30 s covers about ten
/// million holdings; a follower that is really gone refuses the connection at
/// once and is retried on openraft's backoff, whatever this is.
const SNAPSHOT_CHUNK_TIMEOUT_MS: u64 = 30_000;

/// The most entries one append carries. Entries are batches of up to
/// `max_batch` requests: a few dozen per append keep a catching-up request
/// bounded.
pub(crate) const MAX_PAYLOAD_ENTRIES: u64 = 64;

/// openraft's configuration for a node configured as `config`.
fn raft_config(config: &NodeConfig) -> Result<Config, StartError> {
    let heartbeat = config.heartbeat.as_millis() as u64;
    let election = config.election_timeout.as_millis() as u64;
    Config {
        cluster_name: "baton".to_owned(),
        heartbeat_interval: heartbeat.max(10),
        commit_heartbeat_delay_us: config.commit_heartbeat_delay.as_micros() as u64,
        max_inflight_appends: config.max_inflight_appends,
        election_timeout_min: election.max(heartbeat * 3),
        election_timeout_max: (election * 2).max(heartbeat * 6),
        // Snapshot chunks travel as JSON (about 3.5 bytes per byte): 1 MiB chunks
        // keep each request small and well inside its timeout.
        snapshot_max_chunk_size: 1 << 20,
        install_snapshot_timeout: SNAPSHOT_CHUNK_TIMEOUT_MS.max(election),
        max_payload_entries: MAX_PAYLOAD_ENTRIES,
        // `snapshot_schedule` asks for snapshots: it also weighs the log
        // written against the last snapshot's size.
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: config.snapshot_every.clamp(10, 1_000),
        ..Config::default()
    }
    .validate()
    .map_err(|e| StartError::Raft(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster with a member of log version 0 (an older build, or one that
    /// has not answered yet) gets expiries it can parse, one per lease; a
    /// cluster all on this build gets one command for the slice.
    #[test]
    fn expiries_are_batched_only_when_every_member_decodes_the_batch() {
        let leases = vec![LeaseId(1), LeaseId(2), LeaseId(3)];
        let batched = expiry_commands(leases.clone(), 7, baton_core::LOG_VERSION);
        assert_eq!(
            batched,
            vec![(
                Command::ExpireLeasesOfTerm {
                    lease_ids: leases.clone(),
                    term: 7
                },
                leases.clone()
            )]
        );
        let single = expiry_commands(leases.clone(), 7, 0);
        assert_eq!(single.len(), 3);
        for ((command, covered), lease_id) in single.into_iter().zip(leases) {
            assert_eq!(command, Command::ExpireLeaseOfTerm { lease_id, term: 7 });
            assert_eq!(command.log_version(), 0);
            assert_eq!(covered, vec![lease_id]);
        }
    }

    /// A node elected while its install was still being restored reset its
    /// clock from the state before the snapshot: the install's announcement
    /// must bring the snapshot's leases in, in the term the clock keeps.
    #[tokio::test]
    async fn an_installed_snapshot_restarts_the_lease_clock_from_its_state() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_log, store) = baton_store::open(dir.path()).expect("open");
        let clock = Arc::new(LeaseClock::default());
        let dispatcher = Dispatcher {
            clock: clock.clone(),
            waiters: Arc::new(WaiterRegistry::default()),
            snapshots_installed: Arc::new(AtomicU64::new(0)),
            watch: WatchHub::start(crate::WatchConfig::default(), 0),
            metrics: Arc::new(NodeMetrics::new(store.metrics())),
        };
        clock.reset_all(&StateMachine::new(), 3);
        let mut installed = StateMachine::new();
        installed.apply(
            &baton_core::ApplyContext {
                now_ms: 1_000,
                limits: baton_core::Limits::default(),
                term: 2,
            },
            &Request::plain(Command::CreateLease {
                lease_id: LeaseId(5),
                ttl_ms: 10_000,
                holder: "h".to_owned(),
            }),
        );
        assert_eq!(clock.remaining(LeaseId(5)), None);

        dispatcher.snapshot_installed(installed.revision(), &installed);
        assert!(
            clock.remaining(LeaseId(5)).is_some(),
            "the lease is tracked"
        );
        assert_eq!(clock.term(), 3);
        assert_eq!(dispatcher.snapshots_installed.load(Ordering::Relaxed), 1);
    }

    /// A single node with its data under `dir`, once it leads.
    async fn leading_single_node(dir: &std::path::Path) -> Arc<Node> {
        let config = NodeConfig::single(dir.join("data"), "http://127.0.0.1:1".into());
        let node = Node::start(config).await.expect("start");
        assert!(node.wait_until_leader(Duration::from_secs(20)).await);
        node
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_whose_raft_stopped_no_longer_claims_to_lead() {
        let dir = tempfile::tempdir().expect("temp dir");
        let node = leading_single_node(dir.path()).await;
        // Raft stops on its own (as after a fatal storage error), not through
        // `Node::shutdown`, which clears the flag itself.
        node.raft.shutdown().await.expect("raft shutdown");
        let mut still_leading = true;
        for _ in 0..500 {
            still_leading = node.is_leader();
            if !still_leading {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!still_leading, "the leadership flag outlived raft");
        assert!(!node.is_ready().await, "a stopped raft is not ready");
    }

    /// CI's fuzzer found /readyz answering 503 on a healthy single node
    /// under writes: an entry is committed a moment before it is applied, and
    /// a probe that fell in between saw the replica "behind". Readiness must
    /// not flap with the write load (a 503 takes the pod out of its Service).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_under_writes_stays_ready() {
        let dir = tempfile::tempdir().expect("temp dir");
        let node = leading_single_node(dir.path()).await;
        let writing = Arc::new(AtomicBool::new(true));
        let writers: Vec<_> = (0..16)
            .map(|writer| {
                let (node, writing) = (node.clone(), writing.clone());
                tokio::spawn(async move {
                    let mut proposed = 0u64;
                    while writing.load(Ordering::Relaxed) {
                        let lease_id = Node::new_lease_id();
                        node.propose(Request::plain(Command::CreateLease {
                            lease_id,
                            ttl_ms: 60_000,
                            holder: format!("writer-{writer}"),
                        }))
                        .await
                        .expect("propose");
                        proposed += 1;
                    }
                    proposed
                })
            })
            .collect();
        let mut not_ready = 0;
        for _ in 0..2_000 {
            if !node.is_ready().await {
                not_ready += 1;
            }
            tokio::task::yield_now().await;
        }
        writing.store(false, Ordering::Relaxed);
        let mut proposed = 0;
        for writer in writers {
            proposed += writer.await.expect("writer");
        }
        assert!(proposed > 0, "the writers wrote nothing");
        assert_eq!(
            not_ready, 0,
            "not ready in {not_ready} of 2000 probes during {proposed} writes"
        );
        node.shutdown().await;
    }

    #[test]
    fn a_snapshot_chunk_may_take_as_long_as_installing_a_large_state() {
        let config = NodeConfig::single("unused".into(), "http://127.0.0.1:1".into());
        let raft = raft_config(&config).expect("valid");
        // Far beyond the election timeout: the last chunk's answer waits for
        // the whole install (2.4 s at a million holdings).
        assert_eq!(raft.install_snapshot_timeout, SNAPSHOT_CHUNK_TIMEOUT_MS);
        assert!(raft.install_snapshot_timeout >= 20 * raft.election_timeout_max);
        assert_eq!(raft.heartbeat_interval, 60);
    }
}
