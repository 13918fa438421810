//! What a node counts: applied grants, releases and lease ends, waits and how
//! they ended, hold times, keepalives, proposals and their batches, leader
//! changes, calls to the leader, and (through [`StoreMetrics`]) appends, commits
//! and snapshots. `/metrics` renders them with [`Node::write_metrics`].
//!
//! Two kinds of count, which add up differently over a cluster:
//! - counted at apply (grants, releases, lease ends, hold times, log entries):
//!   every replica applies the same log, so each node shows the cluster's
//!   figure (take one node's, or the `max`, never the sum). They include the
//!   log re-applied when a node starts.
//! - counted where it happens (waits, keepalives on the leader, proposals,
//!   calls to the leader, appends): the sum over the nodes is the cluster's.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_core::{EndReason, EventKind, Outcome, LEASE_TTL_BOUNDS_S};
use baton_metrics::{
    Counter, Exposition, Family, Histogram, BATCH_SIZE, CALL_SECONDS, HOLD_SECONDS, WAIT_SECONDS,
};
use baton_store::StoreMetrics;

use crate::leader_call::LeaderCall;
use crate::leader_contact::LeaderContact;
use crate::node::Node;
use crate::waiting::QueueKind;

/// Holdings whose grant time is remembered for the hold-time histogram; past
/// this many held at once, newer grants go unmeasured (the memory stays
/// bounded when a million locks are held).
const HOLDS_TRACKED: usize = 100_000;

/// Hashes the hold-time map's keys, fencing tokens, with one multiply (the
/// FxHash step): std's SipHash cost ~100 instructions per grant and per end.
/// Tokens are assigned by the state machine, so no caller can choose keys
/// that collide. Hand-written rather than `rustc-hash`: that crate, also a
/// build dependency of bindgen, made cargo rebuild RocksDB's C++ when added.
#[derive(Default, Clone, Copy)]
struct TokenHasher(u64);

impl Hasher for TokenHasher {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.write_u64(u64::from(*byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Token -> leader-stamped grant time.
type TokenMap = HashMap<u64, u64, BuildHasherDefault<TokenHasher>>;

/// What can be held: the `kind` label of grants, releases and hold times.
const HELD_KINDS: [&str; 4] = ["lock", "semaphore", "election", "name"];
const LOCK: usize = 0;
const SEMAPHORE: usize = 1;
const ELECTION: usize = 2;
const NAME: usize = 3;

/// Why a holding ended: the `reason` label of releases.
const END_REASONS: [&str; 4] = ["released", "revoked", "expired", "force_released"];

fn reason_index(reason: EndReason) -> usize {
    match reason {
        EndReason::Released => 0,
        EndReason::Revoked => 1,
        EndReason::Expired => 2,
        EndReason::ForceReleased => 3,
    }
}

/// What a request waited in line for: the `kind` label of waits.
const WAIT_KINDS: [&str; 3] = ["lock", "semaphore", "election"];

fn wait_index(kind: &QueueKind) -> usize {
    match kind {
        QueueKind::Lock(_) => 0,
        QueueKind::Semaphore(_) => 1,
        QueueKind::Election(_) => 2,
    }
}

/// How a wait in line ended: the `end` label of `baton_waits_ended_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitOutcome {
    /// Granted (a lock, permits, or elected), also when the grant raced a timeout.
    Granted,
    /// `wait_ms` ran out and the request left the line.
    TimedOut,
    /// The client closed its connection while waiting.
    ClientGone,
    /// Its lease ended (expired, revoked) or an admin removed it.
    LeaseEnded,
    /// The wait broke off (the node stopped) or leaving the line after the
    /// timeout could not be confirmed: the client heard 503.
    Failed,
}

const WAIT_OUTCOMES: [&str; 5] = [
    "granted",
    "timed_out",
    "client_gone",
    "lease_ended",
    "failed",
];

/// The `call` label of a follower's call to the leader.
fn call_kind(call: &LeaderCall) -> &'static str {
    match call {
        LeaderCall::Propose(_) => "propose",
        LeaderCall::ReadIndex => "read_index",
        LeaderCall::KeepAlive(_) => "keep_alive",
        LeaderCall::Remaining(_) => "remaining",
        LeaderCall::AddMember { .. } => "add_member",
        LeaderCall::RemoveMember { .. } => "remove_member",
        LeaderCall::Campaign => "campaign",
    }
}

const CALL_KINDS: [&str; 7] = [
    "propose",
    "read_index",
    "keep_alive",
    "remaining",
    "add_member",
    "remove_member",
    "campaign",
];

/// The proposer's own counts (it owns them: it is started before the node).
#[derive(Debug)]
pub(crate) struct ProposerMetrics {
    /// Requests the proposer put into log entries.
    pub(crate) proposals: Counter,
    /// Requests per proposed entry.
    pub(crate) batch_size: Histogram,
    /// Background requests the batching task holds back for a later entry
    /// (out of the queue, not yet proposed).
    pub(crate) held_back: AtomicUsize,
}

impl Default for ProposerMetrics {
    fn default() -> Self {
        ProposerMetrics {
            proposals: Counter::new(),
            batch_size: Histogram::new(BATCH_SIZE),
            held_back: AtomicUsize::new(0),
        }
    }
}

impl ProposerMetrics {
    /// An entry of `requests` requests was formed.
    pub(crate) fn proposed(&self, requests: usize) {
        self.proposals.add(requests as u64);
        self.batch_size.observe(requests as u64);
    }
}

/// One node's counters and histograms (the proposer's are in
/// [`ProposerMetrics`], the storage's in [`StoreMetrics`]).
#[derive(Debug)]
pub struct NodeMetrics {
    pub(crate) store: Arc<StoreMetrics>,
    grants: [Counter; 4],
    releases: [[Counter; 4]; 4],
    hold_seconds: [Histogram; 4],
    /// Token -> leader-stamped time of its grant, for holdings not ended yet.
    holds: Mutex<TokenMap>,
    leases_created: Counter,
    lease_expiries: Counter,
    lease_revocations: Counter,
    keepalives: [Counter; 2],
    /// Appends held until the one ahead of them arrived: taken in order, or
    /// given up on (see `peer_server::wait_for_the_append_ahead`).
    appends_ahead: [Counter; 2],
    waits_started: [Counter; 3],
    waits_ended: [[Counter; 5]; 3],
    wait_seconds: [Histogram; 3],
    leader_changes: Counter,
    leader_calls: Family<&'static str, Histogram>,
    /// Time between leader RPCs, as a follower handles them.
    pub(crate) leader_contact: LeaderContact,
}

impl NodeMetrics {
    /// Metrics of a node whose storage counts into `store`.
    pub(crate) fn new(store: Arc<StoreMetrics>) -> Self {
        let leader_calls = Family::new(CALL_KINDS.len() + 1, "other", || {
            Histogram::new(CALL_SECONDS)
        });
        leader_calls.register(&CALL_KINDS);
        NodeMetrics {
            store,
            grants: Default::default(),
            releases: Default::default(),
            hold_seconds: std::array::from_fn(|_| Histogram::new(HOLD_SECONDS)),
            holds: Mutex::new(TokenMap::default()),
            leases_created: Counter::new(),
            lease_expiries: Counter::new(),
            lease_revocations: Counter::new(),
            keepalives: Default::default(),
            appends_ahead: Default::default(),
            waits_started: Default::default(),
            waits_ended: Default::default(),
            wait_seconds: std::array::from_fn(|_| Histogram::new(WAIT_SECONDS)),
            leader_changes: Counter::new(),
            leader_calls,
            leader_contact: LeaderContact::default(),
        }
    }

    /// Counts what the entry stamped `now_ms` changed. Hold time is measured
    /// between the leader-stamped times of the grant's entry and the end's
    /// entry, so every replica (and a replay) measures the same interval, with
    /// no clock read here.
    pub(crate) fn applied(&self, now_ms: u64, outcomes: &[Outcome]) {
        let mut holds = None;
        for event in outcomes.iter().flat_map(|outcome| &outcome.events) {
            let (kind, started, ended) = match &event.kind {
                EventKind::LeaseCreated { .. } => {
                    self.leases_created.inc();
                    continue;
                }
                EventKind::LeaseEnded { reason, .. } => {
                    match reason {
                        EndReason::Expired => self.lease_expiries.inc(),
                        EndReason::Revoked => self.lease_revocations.inc(),
                        EndReason::Released | EndReason::ForceReleased => {}
                    }
                    continue;
                }
                EventKind::LockAcquired { grant, .. } => (LOCK, Some(grant.token), None),
                EventKind::SemaphoreAcquired { grant, .. } => (SEMAPHORE, Some(grant.token), None),
                EventKind::Elected { grant, .. } => (ELECTION, Some(grant.token), None),
                EventKind::NameRegistered {
                    grant,
                    created: true,
                    ..
                } => (NAME, Some(grant.token), None),
                EventKind::LockReleased { token, reason, .. } => {
                    (LOCK, None, Some((*token, *reason)))
                }
                EventKind::SemaphoreReleased { token, reason, .. } => {
                    (SEMAPHORE, None, Some((*token, *reason)))
                }
                EventKind::LeaderEnded { token, reason, .. } => {
                    (ELECTION, None, Some((*token, *reason)))
                }
                EventKind::NameUnregistered { token, reason, .. } => {
                    (NAME, None, Some((*token, *reason)))
                }
                _ => continue,
            };
            // One lock per applied entry, taken only by entries that grant or end.
            let holds = holds
                .get_or_insert_with(|| self.holds.lock().unwrap_or_else(PoisonError::into_inner));
            if let Some(token) = started {
                self.grants[kind].inc();
                if holds.len() < HOLDS_TRACKED {
                    holds.insert(token, now_ms);
                }
            }
            if let Some((token, reason)) = ended {
                self.releases[kind][reason_index(reason)].inc();
                if let Some(granted_ms) = holds.remove(&token) {
                    let held = Duration::from_millis(now_ms.saturating_sub(granted_ms));
                    self.hold_seconds[kind].observe_duration(held);
                }
            }
        }
    }

    /// A snapshot replaced the state: the holdings it ended are never seen
    /// ending, so their grant times are dropped rather than kept forever.
    pub(crate) fn snapshot_installed(&self) {
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The leader answered a keepalive: the lease was renewed, or unknown.
    pub(crate) fn keepalive(&self, renewed: bool) {
        self.keepalives[usize::from(!renewed)].inc();
    }

    /// A follower held an append that arrived before the one ahead of it:
    /// that one came (`in_order`), or not within the time allowed.
    pub(crate) fn append_ahead(&self, in_order: bool) {
        self.appends_ahead[usize::from(!in_order)].inc();
    }

    /// A request joined a line on this node.
    pub(crate) fn wait_started(&self, kind: &QueueKind) {
        self.waits_started[wait_index(kind)].inc();
    }

    /// A wait that started at `queued` ended.
    pub(crate) fn wait_ended(&self, kind: &QueueKind, queued: Instant, outcome: WaitOutcome) {
        let kind = wait_index(kind);
        self.waits_ended[kind][outcome as usize].inc();
        if outcome == WaitOutcome::Granted {
            self.wait_seconds[kind].observe_duration(queued.elapsed());
        }
    }

    /// A call to the leader took `elapsed` (answered or not).
    pub(crate) fn leader_call(&self, call: &LeaderCall, elapsed: Duration) {
        self.leader_calls
            .get(call_kind(call))
            .observe_duration(elapsed);
    }
}

/// Counts every new leadership this node sees: another leader, or the same
/// one in a later term. The first leader after start counts too (as etcd's
/// `leader_changes_seen`), so a node that never saw a change shows 1.
pub(crate) async fn count_leader_changes(node: Arc<Node>) {
    let mut seen = node.raft.server_metrics();
    let mut stop = node.stop.subscribe();
    let mut last = None;
    loop {
        let now = {
            let metrics = seen.borrow_and_update();
            metrics
                .current_leader
                .map(|leader| (metrics.vote.leader_id().term, leader))
        };
        if now.is_some() && now != last {
            node.metrics.leader_changes.inc();
            last = now;
        }
        tokio::select! {
            changed = seen.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

impl Node {
    /// The node's counters and histograms.
    pub fn metrics(&self) -> &NodeMetrics {
        &self.metrics
    }

    /// Renders this node's metrics into `out`: the applied-state and Raft
    /// families, waits, the proposer and the storage. The gauges of
    /// `/metrics` that predate these are written by the API.
    pub fn write_metrics(&self, out: &mut Exposition) {
        let m = &self.metrics;
        let kinds = |counters: &[Counter; 4]| -> Vec<(Vec<String>, u64)> {
            HELD_KINDS
                .iter()
                .zip(counters)
                .map(|(kind, c)| (vec![(*kind).to_owned()], c.get()))
                .collect()
        };
        out.counter_series(
            "baton_grants_total",
            "Grants applied: locks, semaphore permits, elections won, names registered.",
            &["kind"],
            &kinds(&m.grants),
        );
        let mut releases = Vec::new();
        for (kind, by_reason) in HELD_KINDS.iter().zip(&m.releases) {
            for (reason, counter) in END_REASONS.iter().zip(by_reason) {
                releases.push((
                    vec![(*kind).to_owned(), (*reason).to_owned()],
                    counter.get(),
                ));
            }
        }
        out.counter_series(
            "baton_releases_total",
            "Holdings ended, applied: released by the holder, by a lease revoked or expired, or force-released by an admin.",
            &["kind", "reason"],
            &releases,
        );
        let holds: Vec<(Vec<String>, &Histogram)> = HELD_KINDS
            .iter()
            .zip(&m.hold_seconds)
            .map(|(kind, h)| (vec![(*kind).to_owned()], h))
            .collect();
        out.histogram_series(
            "baton_hold_seconds",
            "Time from the grant to the end of a holding, between the leader-stamped times of their log entries.",
            &["kind"],
            &holds,
        );
        out.counter(
            "baton_leases_created_total",
            "Leases created, applied.",
            &m.leases_created,
        );
        out.counter(
            "baton_lease_expiries_total",
            "Leases expired, applied.",
            &m.lease_expiries,
        );
        out.counter(
            "baton_lease_revocations_total",
            "Leases revoked by their owner, applied.",
            &m.lease_revocations,
        );
        out.counter_series(
            "baton_keepalives_total",
            "Keepalives this node answered as leader: renewed, or not_found (no such lease, or its expiry already proposed).",
            &["result"],
            &[
                (vec!["renewed".to_owned()], m.keepalives[0].get()),
                (vec!["not_found".to_owned()], m.keepalives[1].get()),
            ],
        );
        out.counter_series(
            "baton_raft_appends_ahead_total",
            "Appends from the leader that reached this follower before the one ahead of them (two in flight, on two connections) and were held: in_order, the one ahead came and both were taken; given_up, it did not come within half a heartbeat (or the leader was probing just past this log).",
            &["outcome"],
            &[
                (vec!["in_order".to_owned()], m.appends_ahead[0].get()),
                (vec!["given_up".to_owned()], m.appends_ahead[1].get()),
            ],
        );
        let started: Vec<(Vec<String>, u64)> = WAIT_KINDS
            .iter()
            .zip(&m.waits_started)
            .map(|(kind, c)| (vec![(*kind).to_owned()], c.get()))
            .collect();
        out.counter_series(
            "baton_waits_started_total",
            "Requests that joined a line on this node (a queued acquire or campaign).",
            &["kind"],
            &started,
        );
        let mut ended = Vec::new();
        for (kind, by_end) in WAIT_KINDS.iter().zip(&m.waits_ended) {
            for (end, counter) in WAIT_OUTCOMES.iter().zip(by_end) {
                ended.push((vec![(*kind).to_owned(), (*end).to_owned()], counter.get()));
            }
        }
        out.counter_series(
            "baton_waits_ended_total",
            "Waits on this node that ended: granted, timed_out, client_gone, lease_ended or failed.",
            &["kind", "end"],
            &ended,
        );
        let waits: Vec<(Vec<String>, &Histogram)> = WAIT_KINDS
            .iter()
            .zip(&m.wait_seconds)
            .map(|(kind, h)| (vec![(*kind).to_owned()], h))
            .collect();
        out.histogram_series(
            "baton_wait_seconds",
            "Time a granted request waited in line on this node, from the moment it queued to its grant.",
            &["kind"],
            &waits,
        );
        let proposer = self.proposer.metrics();
        out.counter(
            "baton_proposals_total",
            "Requests this node's proposer put into log entries (as leader).",
            &proposer.proposals,
        );
        out.histogram(
            "baton_proposal_batch_size",
            "Requests per log entry the proposer formed.",
            &proposer.batch_size,
        );
        out.gauge(
            "baton_log_version",
            "The log version this node tells its peers it runs (--log-version; this build's unless lowered).",
            f64::from(self.config.log_version),
        );
        if self.is_leader() {
            out.gauge(
                "baton_cluster_log_version",
                "On the leader: the newest log version every member said it runs (0 for one that has not answered); the leader proposes nothing newer.",
                f64::from(self.cluster_log_version()),
            );
        }
        out.gauge(
            "baton_proposer_queue_depth",
            "Requests waiting in the proposer's queue for a place in an entry (background requests held back for a later entry included).",
            self.proposer.queued() as f64,
        );
        out.counter(
            "baton_log_entries_appended_total",
            "Log entries appended and synced on this node (its own proposals and replicated ones).",
            &self.metrics.store.entries_appended,
        );
        out.counter(
            "baton_log_bytes_appended_total",
            "Bytes of log entries appended on this node, as encoded: the snapshot schedule weighs them against the last snapshot's size.",
            &self.metrics.store.log_bytes_appended,
        );
        out.counter_series(
            "baton_log_entries_read_total",
            "Log entries read back (to apply or replicate them), by where they came from: memory (the newest entries, right behind their append) or disk (older ones: a lagging follower, the log re-applied at start).",
            &["source"],
            &[
                (
                    vec!["memory".to_owned()],
                    self.metrics.store.log_entries_read_from_memory.get(),
                ),
                (
                    vec!["disk".to_owned()],
                    self.metrics.store.log_entries_read_from_disk.get(),
                ),
            ],
        );
        out.histogram(
            "baton_log_append_seconds",
            "Duration of one log append, from its call to the entries being on disk: queued writes ahead of it, then a synced RocksDB write batch, fsync included.",
            &self.metrics.store.append,
        );
        out.histogram(
            "baton_commit_apply_lag_seconds",
            "Time from an entry being recorded as committed on this node to its apply.",
            &self.metrics.store.commit_to_apply,
        );
        out.counter(
            "baton_snapshots_built_total",
            "Snapshots this node built from its own state.",
            &self.metrics.store.snapshots_built,
        );
        out.histogram(
            "baton_snapshot_build_seconds",
            "Duration of one snapshot build: encoding the state and writing and syncing its file, beside applying.",
            &self.metrics.store.snapshot_build,
        );
        out.gauge(
            "baton_snapshot_bytes",
            "Size of the last snapshot this node built or installed, bytes.",
            self.metrics
                .store
                .snapshot_bytes
                .load(std::sync::atomic::Ordering::Relaxed) as f64,
        );
        // Snapshots installed are the gauge `baton_snapshots_installed` (kept
        // from before): a counter `baton_snapshots_installed_total` beside it
        // would be the same family name to OpenMetrics parsers.
        out.counter(
            "baton_raft_leader_changes_total",
            "New leaderships this node saw (another leader, or the same in a later term); the first after start counts.",
            &m.leader_changes,
        );
        out.histogram(
            "baton_raft_leader_contact_gap_seconds",
            "Time a follower went without an accepted RPC (append, heartbeat, snapshot chunk) from its leader, between two of one term.",
            m.leader_contact.gaps(),
        );
        out.histograms(
            "baton_leader_call_seconds",
            "Calls from this node to the leader's peer listener, by call, answered or not.",
            &["call"],
            &m.leader_calls,
        );
        // Kept by the state with every change: no walk, and no copy of the state
        // whose map nodes every apply beside the walk would have to copy.
        let by_ttl = self.read(|machine| machine.lease_ttl_counts());
        let mut cumulative = 0;
        let samples: Vec<(String, f64)> = by_ttl
            .counts()
            .iter()
            .enumerate()
            .map(|(i, count)| {
                cumulative += count;
                let le = LEASE_TTL_BOUNDS_S
                    .get(i)
                    .map_or_else(|| "+Inf".to_owned(), u64::to_string);
                (le, cumulative as f64)
            })
            .collect();
        out.gauges(
            "baton_leases_by_ttl",
            "Live leases with a TTL of at most `le` seconds (cumulative, like histogram buckets).",
            "le",
            &samples,
        );
    }
}

#[cfg(test)]
mod tests {
    use baton_core::{Event, Grant, LeaseId, LockMode};

    use super::*;

    fn outcome(events: Vec<EventKind>) -> Outcome {
        Outcome {
            revision: 1,
            result: Ok(baton_core::Reply::Ticked),
            replayed: false,
            events: events
                .into_iter()
                .map(|kind| Event { revision: 1, kind })
                .collect(),
        }
    }

    fn grant(token: u64) -> Grant {
        Grant {
            name: "a".into(),
            token,
            lease_id: LeaseId(7),
            ttl_ms: 15_000,
            holder: String::new(),
        }
    }

    #[test]
    fn hold_time_runs_between_the_leader_stamped_times_of_grant_and_end() {
        let metrics = NodeMetrics::new(Arc::default());
        metrics.applied(
            1_000,
            &[outcome(vec![EventKind::LockAcquired {
                grant: grant(5),
                waiter: None,
                mode: LockMode::Exclusive,
            }])],
        );
        metrics.applied(
            3_500,
            &[outcome(vec![EventKind::LockReleased {
                name: "a".into(),
                token: 5,
                reason: EndReason::Expired,
            }])],
        );
        // A release whose grant was never seen (before a snapshot) is counted
        // but not timed.
        metrics.applied(
            4_000,
            &[outcome(vec![EventKind::LockReleased {
                name: "b".into(),
                token: 9,
                reason: EndReason::Released,
            }])],
        );
        assert_eq!(metrics.grants[LOCK].get(), 1);
        assert_eq!(
            metrics.releases[LOCK][reason_index(EndReason::Expired)].get(),
            1
        );
        assert_eq!(
            metrics.releases[LOCK][reason_index(EndReason::Released)].get(),
            1
        );
        let held = metrics.hold_seconds[LOCK].snapshot();
        assert_eq!(held.count(), 1);
        assert_eq!(held.sum, 2_500_000, "2.5 s in microseconds");
        assert!(metrics.holds.lock().expect("lock").is_empty());
    }
}
