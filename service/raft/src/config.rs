//! What a node needs to know to start.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton_core::Limits;
use baton_store::Durability;

use crate::idle_poll::IdlePoll;
use crate::proposer::InFlight;
use crate::watch_hub::WatchConfig;

/// Settings of one Baton node.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's Raft id.
    pub node_id: u64,
    /// Where RocksDB keeps the log, vote and snapshots.
    pub data_dir: PathBuf,
    /// The client API address others should use to reach this node (`http://host:port`).
    pub api_addr: String,
    /// The Raft peer address others should dial (`http://host:port`).
    pub raft_addr: String,
    /// Bounds stamped into every batch this node proposes as leader.
    pub limits: Limits,
    /// Most requests in one log entry.
    pub max_batch: usize,
    /// Leases the lease clock expires in one proposal, at most; the proposer
    /// puts at most one such proposal in an entry ([`crate::Lane::Background`]).
    /// An entry's apply holds up every request in it and behind it, so this
    /// bounds what an expiry storm adds to each: ending a lease of 10 locks in
    /// a state of a million costs about 25-35 µs of apply on the 2-core
    /// development machine (criterion `expiry_storm_entry`), so 128 add 3-5 ms.
    /// The bound counts leases, not what they hold: 128 leases of 10,000 locks
    /// each (`max_holdings_per_lease`) would still be seconds of apply in one
    /// entry.
    pub expiries_per_entry: usize,
    /// Log entries proposed but not yet applied, at most. While they are in flight,
    /// new requests gather into the next batch: this is what makes one fsync serve
    /// many requests.
    pub max_in_flight: InFlight,
    /// Requests waiting for a place in a log entry, at most: beyond it a write is
    /// refused at once (503 `overloaded`, certainly not applied) instead of
    /// waiting behind a queue it cannot get through before its deadline.
    pub max_queued: usize,
    /// How often the leader's lease clock looks for expired leases.
    pub lease_tick: Duration,
    /// Raft heartbeat interval.
    pub heartbeat: Duration,
    /// How long a replication stream holds a commit back for entries to carry
    /// it before it sends a heartbeat of its own (openraft patch; zero: at once).
    pub commit_heartbeat_delay: Duration,
    /// How many appends the leader keeps in flight to each follower (1 or 2;
    /// openraft patch): with 2, entries appended while one is unanswered go
    /// out at once behind it instead of a round trip later.
    pub max_inflight_appends: u64,
    /// Raft election timeout range (lower bound; the upper is twice it).
    pub election_timeout: Duration,
    /// Build a snapshot (and purge the log behind it) after this many entries...
    pub snapshot_every: u64,
    /// ...once the log written since the last snapshot is this many times that
    /// snapshot's size (0: entries only). See `snapshot_schedule`.
    pub snapshot_log_ratio: f64,
    /// Shared secret that peers present on the Raft listener: this node sends it
    /// and accepts it.
    pub cluster_secret: Option<String>,
    /// Further secrets this node accepts but never sends, for rotating the
    /// cluster secret without an outage (SECURITY.md). Only with `cluster_secret`.
    pub also_accepted_secrets: Vec<String>,
    /// TLS material: with it, calls to peers go over https, verified against the
    /// peer CA, presenting the node certificate.
    pub tls: Option<std::sync::Arc<crate::tls::Tls>>,
    /// Static membership: every voter's id and Raft URL, this node included. Empty
    /// for a single node or a node that joins. The lowest id initializes the cluster
    /// once a majority answers and none of them is initialized yet.
    pub peers: BTreeMap<u64, String>,
    /// Client API URL of a member to ask for admission (learner, then voter).
    pub join: Option<String>,
    /// Where this node dials a peer instead of the address in the membership (a
    /// fault-injection harness routes each link through its own proxy this way).
    pub dial_overrides: BTreeMap<u64, String>,
    /// How long a proposal may wait for its commit before the caller hears
    /// "unavailable, outcome unknown" (no quorum, partition).
    pub propose_timeout: Duration,
    /// Log and vote durability (only the fault harness turns it off).
    pub durability: Durability,
    /// MiB of RocksDB's write-ahead log written before the node serves, so that
    /// synced appends overwrite written blocks (`baton_store::StoreOptions`).
    /// 0 here, which spares the test suite's many nodes 120 MiB of writes each;
    /// `baton serve` sets 60 (`--wal-prewrite-mib`).
    pub wal_prewrite_mib: u32,
    /// Watch streams: history, lag bound, quotas, bookmark interval.
    pub watch: WatchConfig,
    /// The log version this node tells its peers it runs, at most
    /// [`baton_core::LOG_VERSION`] (the default). A leader proposes only what
    /// every member's version decodes, so one node set lower keeps the whole
    /// cluster's log readable by builds of that version (a rollback stays
    /// possible during a rolling upgrade).
    pub log_version: u32,
    /// How long idle threads poll before they sleep (off here; `baton serve`
    /// sets `--idle-poll-us`). The server shares it with its runtime's park hook.
    pub idle_poll: Arc<IdlePoll>,
}

impl NodeConfig {
    /// A single-node configuration with defaults, storing data in `data_dir`.
    pub fn single(data_dir: PathBuf, api_addr: String) -> Self {
        NodeConfig {
            node_id: 1,
            data_dir,
            raft_addr: String::new(),
            api_addr,
            limits: Limits::default(),
            max_batch: 1024,
            expiries_per_entry: 128,
            max_in_flight: InFlight::Auto,
            max_queued: 8192,
            lease_tick: Duration::from_millis(100),
            heartbeat: Duration::from_millis(60),
            commit_heartbeat_delay: Duration::from_millis(2),
            max_inflight_appends: 2,
            election_timeout: Duration::from_millis(500),
            snapshot_every: 20_000,
            snapshot_log_ratio: 1.0,
            cluster_secret: None,
            also_accepted_secrets: Vec::new(),
            tls: None,
            peers: BTreeMap::new(),
            join: None,
            dial_overrides: BTreeMap::new(),
            propose_timeout: Duration::from_secs(10),
            durability: Durability::Synced,
            wal_prewrite_mib: 0,
            watch: WatchConfig::default(),
            log_version: baton_core::LOG_VERSION,
            idle_poll: Arc::new(IdlePoll::default()),
        }
    }
}

impl NodeConfig {
    /// Every cluster secret this node accepts: the one it sends, then the ones
    /// it also accepts. Empty when no secret is set (the listener is open).
    pub fn accepted_secrets(&self) -> Vec<String> {
        self.cluster_secret
            .iter()
            .chain(&self.also_accepted_secrets)
            .cloned()
            .collect()
    }

    /// The URL to dial for `peer`, whose membership entry says `raft_addr`.
    pub fn dial_addr(&self, peer: u64, raft_addr: &str) -> String {
        dial_url(&self.dial_overrides, peer, raft_addr)
    }

    /// Longest time without a leader before a request gives up: a few election
    /// timeouts, enough for one failed election and a successful one.
    pub fn leader_wait(&self) -> Duration {
        self.election_timeout * 4
    }

    /// How often an idle leader's heartbeat reaches a follower. openraft 0.9
    /// sends an idle heartbeat only from its tick, which runs every 1.5
    /// heartbeat intervals (`Tick::spawn` in its `raft/mod.rs`), so the
    /// cadence is 1.5 intervals, not one.
    pub fn idle_heartbeat_cadence(&self) -> Duration {
        self.heartbeat * 3 / 2
    }

    /// How long a follower may go without an RPC from its leader before it
    /// warns that heartbeats are late: a quarter of the election timeout, but
    /// never less than the idle cadence plus a third of it, so that a
    /// configuration whose healthy cadence is already above the quarter (a
    /// long `--heartbeat-ms`) does not warn on every idle heartbeat.
    pub fn late_leader_contact(&self) -> Duration {
        let cadence = self.idle_heartbeat_cadence();
        (self.election_timeout / 4).max(cadence + cadence / 3)
    }
}

/// The URL to dial for `peer`: its override if there is one, else `raft_addr`.
pub(crate) fn dial_url(overrides: &BTreeMap<u64, String>, peer: u64, raft_addr: &str) -> String {
    overrides
        .get(&peer)
        .map_or(raft_addr, String::as_str)
        .trim_end_matches('/')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_timing(heartbeat_ms: u64, election_ms: u64) -> NodeConfig {
        let mut config = NodeConfig::single("unused".into(), "http://127.0.0.1:1".into());
        config.heartbeat = Duration::from_millis(heartbeat_ms);
        config.election_timeout = Duration::from_millis(election_ms);
        config
    }

    #[test]
    fn by_default_an_idle_follower_hears_its_leader_within_a_quarter_of_the_election_timeout() {
        let config = NodeConfig::single("unused".into(), "http://127.0.0.1:1".into());
        assert_eq!(config.idle_heartbeat_cadence(), Duration::from_millis(90));
        assert_eq!(config.late_leader_contact(), Duration::from_millis(125));
        // Room for a late tick on a busy machine before the warning.
        assert!(
            config.idle_heartbeat_cadence() + Duration::from_millis(30)
                < config.late_leader_contact()
        );
    }

    #[test]
    fn a_long_heartbeat_does_not_make_every_idle_gap_a_warning() {
        // 100 ms heartbeats tick every 150 ms, above a quarter of 500 ms.
        let config = with_timing(100, 500);
        assert_eq!(config.idle_heartbeat_cadence(), Duration::from_millis(150));
        assert_eq!(config.late_leader_contact(), Duration::from_millis(200));
        // A long election timeout keeps its quarter.
        assert_eq!(
            with_timing(50, 2_000).late_leader_contact(),
            Duration::from_millis(500)
        );
    }
}
