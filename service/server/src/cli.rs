//! Command line and environment configuration.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use baton_api::rate_limit::RateLimit;
use baton_api::ApiSettings;
use baton_core::{Limits, Quota};
use baton_raft::{Durability, InFlight, NodeConfig, TlsFiles, WatchConfig};
use clap::{Args, Parser, Subcommand};

/// Baton: a replicated lock-and-lease service over HTTP/JSON.
#[derive(Debug, Parser)]
#[command(name = "baton", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
// Parsed once at start-up: the size of the `Serve` variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a Baton node (with no flags: a single-node cluster on 127.0.0.1:7878
    /// with its data in ./baton-data, initialized on first start).
    Serve(Box<ServeArgs>),
    /// Print the OpenAPI document.
    Openapi,
    /// GET a URL once and exit 0 if it answers 2xx, 1 otherwise: a health check
    /// for images without a shell or curl (`baton probe http://127.0.0.1:7878/readyz`).
    Probe(crate::probe::ProbeArgs),
    /// Bearer tokens for `--auth-file`: make one, or hash one.
    #[command(subcommand)]
    Auth(crate::auth_cli::AuthCommand),
    /// Development helpers.
    #[command(subcommand)]
    Dev(DevCommand),
    /// Run a command while holding a lock: `baton lock NAME -- CMD ARGS...`
    /// (stopped if the lock is lost; exit 75: not acquired in time, 76: lost).
    Lock(crate::client_cli::LockCommand),
    /// Run a command while holding permits of a counting semaphore ("at most
    /// N at a time"): `baton semaphore NAME --limit N -- CMD ARGS...` (exit
    /// codes as for `lock`).
    Semaphore(crate::client_cli::SemaphoreCommand),
    /// Run a command only while leader of an election, or `--observe` it.
    Elect(crate::client_cli::ElectCommand),
    /// Inspect locks; admins force-release them.
    Locks(crate::client_cli::LocksCommand),
    /// Inspect elections; admins force-release their leadership.
    Elections(crate::client_cli::ElectionsCommand),
    /// Inspect and register names.
    Names(crate::client_cli::NamesCommand),
    /// Create, inspect, keep alive and revoke leases.
    Leases(crate::client_cli::LeasesCommand),
    /// Print changes as they happen (`--prefix`, `--kinds`).
    Watch(crate::client_cli::WatchCommand),
    /// Cluster status and membership changes.
    Cluster(crate::client_cli::ClusterCommand),
}

/// `baton dev ...`
#[derive(Debug, Subcommand)]
pub enum DevCommand {
    /// Start a local cluster on 127.0.0.1 (data in a temporary directory, removed
    /// on exit); prints the addresses and stops the nodes on Ctrl-C.
    Cluster(DevClusterArgs),
    /// Write a test CA, a node certificate and client certificates (PEM) for
    /// trying TLS and mTLS locally. Not for production: the CA key is written
    /// next to them.
    Certs(DevCertsArgs),
}

/// Settings of `baton dev certs`.
#[derive(Debug, Clone, Args)]
pub struct DevCertsArgs {
    /// Directory to write ca.crt, ca.key, node.crt, node.key and the client files into.
    #[arg(long, default_value = "./baton-certs")]
    pub out: PathBuf,
    /// Names the node certificate is valid for (DNS names or IP addresses),
    /// comma-separated.
    #[arg(long, default_value = "localhost,127.0.0.1")]
    pub node_names: String,
    /// Client certificates to write (`<name>.crt`, `<name>.key`), one per name,
    /// comma-separated; each is valid for its name (list it under a
    /// principal's `certificates` in the auth file).
    #[arg(long, default_value = "")]
    pub clients: String,
}

/// Settings of `baton dev cluster`.
#[derive(Debug, Clone, Args)]
pub struct DevClusterArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: u64,
    /// Client API port of node 1; node i listens on base + 10*(i-1) (API) and
    /// that plus one (Raft).
    #[arg(long, default_value_t = 7878)]
    pub base_port: u16,
}

/// Settings of `baton serve`; every flag can also be set from the environment.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Client API listen address.
    #[arg(long, env = "BATON_LISTEN", default_value = "127.0.0.1:7878")]
    pub listen: String,
    /// Data directory (Raft log, vote, snapshots).
    #[arg(long, env = "BATON_DATA_DIR", default_value = "./baton-data")]
    pub data_dir: PathBuf,
    /// This node's Raft id.
    #[arg(long, env = "BATON_NODE_ID", default_value_t = 1)]
    pub node_id: u64,
    /// Take the node id from the host name's StatefulSet ordinal (`baton-2` is
    /// node 3: ordinal + 1), overriding --node-id.
    #[arg(long, env = "BATON_NODE_ID_FROM_HOSTNAME")]
    pub node_id_from_hostname: bool,
    /// Client API URL advertised to peers and in `GET /v1/cluster`
    /// (default: http://<listen>).
    #[arg(long, env = "BATON_ADVERTISE_API")]
    pub advertise_api: Option<String>,
    /// Peer (Raft) listen address; never the client API's. Port 0 picks a free one.
    #[arg(long, env = "BATON_RAFT_LISTEN", default_value = "127.0.0.1:7879")]
    pub raft_listen: String,
    /// Raft URL peers dial (default: http(s)://<raft-listen>).
    #[arg(long, env = "BATON_ADVERTISE_RAFT")]
    pub advertise_raft: Option<String>,
    /// Static membership, this node included: `1=http://a:7879,2=http://b:7879,...`.
    /// The lowest id initializes the cluster once a majority is reachable.
    #[arg(long, env = "BATON_PEERS")]
    pub peers: Option<String>,
    /// Client API URL of a member: ask it to add this node (learner, then voter).
    #[arg(long, env = "BATON_JOIN", conflicts_with = "peers")]
    pub join: Option<String>,
    /// Secret every peer presents on the Raft listener (and admins on membership
    /// changes). Set it on every multi-node cluster.
    #[arg(long, env = "BATON_CLUSTER_SECRET", hide_env_values = true)]
    pub cluster_secret: Option<String>,
    /// Another cluster secret to accept (never sent): rotate the secret with
    /// three rolling restarts (SECURITY.md). Needs --cluster-secret.
    #[arg(long, env = "BATON_ACCEPT_CLUSTER_SECRET", hide_env_values = true)]
    pub accept_cluster_secret: Option<String>,
    /// This node's TLS certificate chain (PEM): both listeners serve https, and
    /// it is presented to peers. Re-read when it changes.
    #[arg(long, env = "BATON_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "BATON_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CAs of client certificates (PEM): clients may present one instead of a
    /// bearer token; the auth file maps its names to a principal.
    #[arg(long, env = "BATON_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// CAs of the cluster's node certificates (PEM): peers verify each other
    /// against it in both directions. Needed with TLS on more than one node, and
    /// by a --proxy that reaches the cluster over https.
    #[arg(long, env = "BATON_TLS_PEER_CA")]
    pub tls_peer_ca: Option<PathBuf>,
    /// Allow the cluster secret to cross the network in clear text (no TLS on a
    /// multi-node cluster). Only on a network you trust (SECURITY.md).
    #[arg(long, env = "BATON_INSECURE_PLAINTEXT_PEERS")]
    pub insecure_plaintext_peers: bool,
    /// Auth file (YAML or JSON): principals, their token digests, roles and name
    /// prefixes. When set, every API request needs `Authorization: Bearer`.
    /// Reloaded on SIGHUP and when its contents change. See SECURITY.md.
    #[arg(long, env = "BATON_AUTH_FILE")]
    pub auth_file: Option<PathBuf>,
    /// Raft heartbeat interval. openraft checks for a due heartbeat every 1.5 of
    /// these, so an idle follower hears its leader every 90 ms with the default,
    /// inside a quarter of the default election timeout (125 ms).
    #[arg(long, env = "BATON_HEARTBEAT_MS", default_value_t = 60)]
    pub heartbeat_ms: u64,
    /// How long the leader waits, in microseconds, for new log entries to
    /// carry a commit to a follower before it sends the commit alone. With one
    /// request in flight per follower, an immediate commit message makes the
    /// next entries wait behind it; a follower that gets no entries learns of
    /// the commit (and applies it) at most this much later. 0: at once.
    #[arg(long, env = "BATON_COMMIT_HEARTBEAT_DELAY_US", default_value_t = 2000)]
    pub commit_heartbeat_delay_us: u64,
    /// How many appends the leader keeps in flight to each follower: 1 or 2.
    /// With 2, once a follower's position is known, entries appended while an
    /// append to it is unanswered go out at once behind it, instead of one
    /// round trip later: worth it when the round trip between nodes is long
    /// against a disk sync (BENCHMARKS.md, "Two appends in flight").
    #[arg(long, env = "BATON_MAX_INFLIGHT_APPENDS", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=2))]
    pub max_inflight_appends: u64,
    /// Raft election timeout, lower bound (the upper bound is twice it). A follower
    /// calls an election after hearing nothing from the leader for the leader lease
    /// (twice this) plus a random 1-2 times this: 1.5-2 s with the default.
    #[arg(long, env = "BATON_ELECTION_TIMEOUT_MS", default_value_t = 500)]
    pub election_timeout_ms: u64,
    /// The log version this node tells its peers it runs (default: this
    /// build's). A leader proposes only commands every member's version
    /// decodes, so setting the version of the build you may roll back to, on
    /// one node, keeps the whole cluster's log readable by that build during a
    /// rolling upgrade; remove it once every node runs the new one. See
    /// ARCHITECTURE.md, "Compatibility of the log and snapshots".
    #[arg(long, env = "BATON_LOG_VERSION", default_value_t = baton_core::LOG_VERSION)]
    pub log_version: u32,
    /// How long a write may wait for its commit before answering 503 (outcome
    /// unknown: retry with the same Idempotency-Key).
    #[arg(long, env = "BATON_PROPOSE_TIMEOUT_MS", default_value_t = 10_000)]
    pub propose_timeout_ms: u64,
    /// Run as a stateless proxy (no Raft, no disk) forwarding every request to
    /// these cluster URLs (comma-separated; members are discovered from them).
    #[arg(long, env = "BATON_PROXY")]
    pub proxy: Option<String>,
    /// Testing only: dial peer ID at URL instead of its membership address
    /// (`2=http://127.0.0.1:9102,...`), so a harness can proxy each link.
    #[arg(long, env = "BATON_PEER_DIAL", hide = true)]
    pub peer_dial: Option<String>,
    /// MiB written into each of the first two write-ahead log files when the
    /// node starts, which RocksDB then recycles: a synced append overwrites
    /// blocks the file already has instead of growing it, which saves a
    /// journal commit per sync on ext4 and XFS (BENCHMARKS.md, "Write-ahead
    /// log files written in advance"). Costs 120 MiB of writes at each start
    /// and keeps two log files of about 64 MiB. 0 turns it off.
    #[arg(long, env = "BATON_WAL_PREWRITE_MIB", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(baton_raft::MAX_WAL_PREWRITE_MIB)))]
    pub wal_prewrite_mib: u32,
    /// Negative control for the fault harness only: the log and vote skip the
    /// write-ahead log, so a crash loses acknowledged writes. Never in production.
    #[arg(long, env = "BATON_UNSAFE_NO_FSYNC", hide = true)]
    pub unsafe_no_fsync: bool,
    /// Tests only: a leader's own log append, which it replicates while the
    /// append syncs, is held this long before it is written, so a test can tell
    /// that the leader counts itself towards a quorum only once it is on disk.
    #[arg(long, env = "BATON_UNSAFE_LEADER_APPEND_DELAY_MS", hide = true)]
    pub unsafe_leader_append_delay_ms: Option<u64>,
    /// TTL of leases created without `ttl_ms`.
    #[arg(long, env = "BATON_DEFAULT_TTL_MS", default_value_t = 15_000)]
    pub default_ttl_ms: u64,
    /// Smallest lease TTL accepted.
    #[arg(long, env = "BATON_MIN_TTL_MS", default_value_t = 1_000)]
    pub min_ttl_ms: u64,
    /// Largest lease TTL accepted.
    #[arg(long, env = "BATON_MAX_TTL_MS", default_value_t = 3_600_000)]
    pub max_ttl_ms: u64,
    /// Largest `wait_ms` accepted.
    #[arg(long, env = "BATON_MAX_WAIT_MS", default_value_t = 300_000)]
    pub max_wait_ms: u64,
    /// How long a read with `min_revision` waits for this node to apply that
    /// revision before it answers 504 `revision_not_reached`.
    #[arg(long, env = "BATON_MIN_REVISION_WAIT_MS", default_value_t = 3_000,
          value_parser = clap::value_parser!(u64).range(1..=300_000))]
    pub min_revision_wait_ms: u64,
    /// Largest `lock_delay_ms` accepted.
    #[arg(long, env = "BATON_MAX_LOCK_DELAY_MS", default_value_t = 60_000)]
    pub max_lock_delay_ms: u64,
    /// Most requests queued on one lock or election.
    #[arg(long, env = "BATON_MAX_WAITERS_PER_LOCK", default_value_t = 10_000)]
    pub max_waiters_per_lock: u32,
    /// Most holdings (locks, names, elections, waits) on one lease.
    #[arg(long, env = "BATON_MAX_HOLDINGS_PER_LEASE", default_value_t = 10_000)]
    pub max_holdings_per_lease: u32,
    /// Most live leases in the cluster (429 quota_exceeded beyond).
    #[arg(long, env = "BATON_MAX_LEASES", default_value_t = 1_000_000)]
    pub max_leases: u64,
    /// Most live leases one principal owns (auth file `quota.leases` overrides).
    #[arg(
        long,
        env = "BATON_MAX_LEASES_PER_PRINCIPAL",
        default_value_t = 100_000
    )]
    pub max_leases_per_principal: u64,
    /// Most held locks, leaderships and names on one principal's leases.
    #[arg(
        long,
        env = "BATON_MAX_HOLDINGS_PER_PRINCIPAL",
        default_value_t = 1_000_000
    )]
    pub max_holdings_per_principal: u64,
    /// Most queued requests on one principal's leases.
    #[arg(
        long,
        env = "BATON_MAX_WAITERS_PER_PRINCIPAL",
        default_value_t = 100_000
    )]
    pub max_waiters_per_principal: u64,
    /// Most idempotency keys one principal has remembered (each for 10 minutes).
    #[arg(
        long,
        env = "BATON_MAX_IDEMPOTENCY_KEYS_PER_PRINCIPAL",
        default_value_t = 1_000_000
    )]
    pub max_idempotency_keys_per_principal: u64,
    /// Requests a second each principal may send to this node, 0 for no limit
    /// (with auth off, every client shares one bucket). 429 with Retry-After.
    #[arg(long, env = "BATON_RATE_LIMIT", default_value_t = 0)]
    pub rate_limit: u32,
    /// Requests a principal may send at once after a quiet spell.
    #[arg(long, env = "BATON_RATE_LIMIT_BURST", default_value_t = 100)]
    pub rate_limit_burst: u32,
    /// Largest election or name value, in bytes.
    #[arg(long, env = "BATON_MAX_VALUE_BYTES", default_value_t = 4_096)]
    pub max_value_bytes: u32,
    /// Most client requests in one Raft log entry.
    #[arg(long, env = "BATON_MAX_BATCH", default_value_t = 1_024)]
    pub max_batch: usize,
    /// Writes waiting for a place in a log entry, at most; beyond it a write is
    /// refused at once with 503 `overloaded` (certainly not applied: retry).
    #[arg(long, env = "BATON_MAX_QUEUED_PROPOSALS", default_value_t = 8192)]
    pub max_queued_proposals: usize,
    /// Leases the leader expires in one log entry, at most (an expiry storm is
    /// spread over entries; each entry's clients wait for its slice).
    #[arg(long, env = "BATON_EXPIRIES_PER_ENTRY", default_value_t = 128)]
    pub expiries_per_entry: usize,
    /// Log entries proposed but not yet applied, at most: while they are in
    /// flight, new requests gather into the next entry. Default: 1 while this node
    /// is the only voter, 2 with followers (see ARCHITECTURE.md, "Proposal
    /// batching").
    #[arg(long, env = "BATON_MAX_IN_FLIGHT")]
    pub max_in_flight: Option<usize>,
    /// Build a snapshot after this many log entries...
    #[arg(long, env = "BATON_SNAPSHOT_EVERY", default_value_t = 20_000)]
    pub snapshot_every: u64,
    /// ...once the log written since the last snapshot is this many times its
    /// size (0: entries only). A large state is then not rebuilt every few
    /// seconds: snapshots never write more than 1/ratio of what the log did.
    #[arg(long, env = "BATON_SNAPSHOT_LOG_RATIO", default_value_t = 1.0)]
    pub snapshot_log_ratio: f64,
    /// HTTP worker threads of their own for the client API; 0 serves it on the
    /// runtime's thread instead (the runtime then has one thread: not with
    /// `--runtime-threads` above 1). Default: 0 when the runtime has one thread
    /// (`--runtime-threads`, half the cores: on one to three cores), which
    /// saves two thread wake-ups per request
    /// (BENCHMARKS.md, "The client API on the runtime's thread"); otherwise one
    /// per core. A proxy (`--proxy`) always has workers, one per core by default.
    #[arg(long, env = "BATON_HTTP_WORKERS")]
    pub http_workers: Option<usize>,
    /// Worker threads of the runtime that runs Raft, the proposer and the lease
    /// clock (default: half the cores, at least one, or `TOKIO_WORKER_THREADS`).
    /// With one thread it serves the client API too (`--http-workers`). On 2 cores one worker halves
    /// the context switches per request and did better on three nodes and in
    /// expiry storms than two (BENCHMARKS.md, "Runtime threads again").
    #[arg(long, env = "BATON_RUNTIME_THREADS")]
    pub runtime_threads: Option<usize>,
    /// Microseconds a thread keeps polling for work before it sleeps, while this
    /// node leads as its cluster's only voter and at most one request is in
    /// progress: the runtime's worker and that request's HTTP worker, or, with the
    /// API on the runtime's thread, that thread while it awaits the answer. Waking a sleeping
    /// thread costs tens of microseconds on a virtual machine, twice per write,
    /// which a lone client waits for; polling spends otherwise idle CPU on not
    /// waiting (BENCHMARKS.md, "Idle polling"). 0 turns it off.
    #[arg(long, env = "BATON_IDLE_POLL_US", default_value_t = 300)]
    pub idle_poll_us: u64,
    /// Watch events kept for resuming streams (`since`, `Last-Event-ID`).
    #[arg(long, env = "BATON_WATCH_HISTORY", default_value_t = 100_000)]
    pub watch_history: usize,
    /// A watch stream that falls this many revisions behind is ended with a
    /// `resync` event (must be below --watch-history so it can resume).
    #[arg(long, env = "BATON_WATCH_MAX_LAG", default_value_t = 50_000)]
    pub watch_max_lag: u64,
    /// Most concurrent watch streams on this node.
    #[arg(long, env = "BATON_WATCH_MAX_STREAMS", default_value_t = 20_000)]
    pub watch_max_streams: usize,
    /// Most concurrent watch streams per client IP address.
    #[arg(
        long,
        env = "BATON_WATCH_MAX_STREAMS_PER_CLIENT",
        default_value_t = 10_000
    )]
    pub watch_max_streams_per_client: usize,
    /// Longest time between two bookmarks on a watch stream, in milliseconds.
    #[arg(long, env = "BATON_WATCH_BOOKMARK_MS", default_value_t = 10_000)]
    pub watch_bookmark_ms: u64,
    /// Seconds to let in-flight requests finish on SIGTERM.
    #[arg(long, env = "BATON_SHUTDOWN_TIMEOUT_S", default_value_t = 10)]
    pub shutdown_timeout_s: u64,
    /// Log lines as human-readable text, or as one JSON object per line (with
    /// the trace id on lines logged inside a traced request). Traces themselves
    /// are configured by the standard OTEL_* variables (README, "Tracing").
    #[arg(long, env = "BATON_LOG_FORMAT", value_enum, default_value_t = crate::telemetry::LogFormat::Text)]
    pub log_format: crate::telemetry::LogFormat,
}

/// The longest `--idle-poll-us` accepted: 10 ms.
const MAX_IDLE_POLL_US: u64 = 10_000;

impl ServeArgs {
    /// The runtime's worker count: `--runtime-threads` when given; otherwise
    /// tokio's own choice when `TOKIO_WORKER_THREADS` is set (`None`); otherwise
    /// half of `cores`, at least one. The HTTP workers take one thread per core,
    /// and the runtime's tasks (openraft's core, the state machine, the
    /// proposer) hand each request along in a chain rather than in parallel: a
    /// second worker per core mostly wakes to find nothing to steal.
    pub fn runtime_worker_threads(&self, cores: usize, tokio_env_set: bool) -> Option<usize> {
        match self.runtime_threads {
            Some(threads) => Some(threads),
            None if tokio_env_set => None,
            None => Some((cores / 2).max(1)),
        }
    }

    /// Whether the client API is served on the runtime's own thread (a
    /// current-thread runtime) rather than by HTTP workers: `--http-workers 0`,
    /// or by default when the runtime would have one worker
    /// ([`ServeArgs::runtime_worker_threads`]). Never for a proxy.
    pub fn api_on_runtime(&self, cores: usize, tokio_env_set: bool) -> bool {
        if self.proxy.is_some() {
            return false;
        }
        match self.http_workers {
            Some(workers) => workers == 0,
            None => self.runtime_worker_threads(cores, tokio_env_set) == Some(1),
        }
    }

    /// How long idle threads poll before they sleep (`--idle-poll-us`).
    pub fn idle_poll(&self) -> Duration {
        Duration::from_micros(self.idle_poll_us)
    }

    /// Checks combinations clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_ttl_ms == 0 || self.min_ttl_ms > self.max_ttl_ms {
            return Err("--min-ttl-ms must be positive and at most --max-ttl-ms".into());
        }
        if !(self.min_ttl_ms..=self.max_ttl_ms).contains(&self.default_ttl_ms) {
            return Err("--default-ttl-ms must be between --min-ttl-ms and --max-ttl-ms".into());
        }
        if self.max_batch == 0 {
            return Err("--max-batch must be at least 1".into());
        }
        if self.expiries_per_entry == 0 {
            return Err("--expiries-per-entry must be at least 1".into());
        }
        if self.max_queued_proposals == 0 {
            return Err("--max-queued-proposals must be at least 1".into());
        }
        if self.max_in_flight == Some(0) {
            return Err("--max-in-flight must be at least 1".into());
        }
        if self.runtime_threads == Some(0) {
            return Err("--runtime-threads must be at least 1".into());
        }
        if self.http_workers == Some(0) {
            if self.proxy.is_some() {
                return Err("--http-workers must be at least 1 for a --proxy".into());
            }
            if self.runtime_threads.is_some_and(|threads| threads > 1) {
                return Err("--http-workers 0 serves the API on the runtime's one thread: it does not go with --runtime-threads above 1".into());
            }
        }
        if self.idle_poll_us > MAX_IDLE_POLL_US {
            return Err(format!(
                "--idle-poll-us must be at most {MAX_IDLE_POLL_US} (a thread's wake-up costs tens of microseconds; polling longer only burns CPU)"
            ));
        }
        baton_raft::check_log_version(self.log_version)
            .map_err(|reason| format!("--log-version: {reason}"))?;
        if self.heartbeat_ms == 0 || self.election_timeout_ms < self.heartbeat_ms * 3 {
            return Err(
                "--election-timeout-ms must be at least three --heartbeat-ms intervals".into(),
            );
        }
        if self.commit_heartbeat_delay_us > self.heartbeat_ms.saturating_mul(1000) {
            // A periodic heartbeat carries the commit by then anyway.
            return Err("--commit-heartbeat-delay-us must be at most one --heartbeat-ms".into());
        }
        self.peer_map()?;
        parse_id_map("--peer-dial", self.peer_dial.as_deref())?;
        if self.watch_history == 0 || self.watch_max_lag >= self.watch_history as u64 {
            return Err("--watch-max-lag must be below --watch-history (at least 1)".into());
        }
        if !(1..=10_000).contains(&self.watch_bookmark_ms) {
            return Err("--watch-bookmark-ms must be between 1 and 10000".into());
        }
        if !(0.0..=1_000.0).contains(&self.snapshot_log_ratio) {
            return Err("--snapshot-log-ratio must be between 0 and 1000".into());
        }
        Ok(())
    }

    /// `--peers` as id -> Raft URL.
    pub fn peer_map(&self) -> Result<BTreeMap<u64, String>, String> {
        parse_id_map("--peers", self.peers.as_deref())
    }

    /// The node id: `--node-id`, or the host name's ordinal + 1.
    pub fn resolved_node_id(&self) -> Result<u64, String> {
        if !self.node_id_from_hostname {
            return Ok(self.node_id);
        }
        let hostname = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .unwrap_or_default();
        node_id_from_hostname(hostname.trim())
    }

    /// The advertised client API URL.
    pub fn api_url(&self) -> String {
        self.advertise_api
            .clone()
            .unwrap_or_else(|| format!("{}://{}", self.scheme(), self.listen))
    }

    /// `https` when this node serves TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls_cert.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The TLS files, when --tls-cert is set.
    pub fn tls_files(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
            peer_ca: self.tls_peer_ca.clone(),
        })
    }

    /// The state machine limits.
    pub fn limits(&self) -> Limits {
        Limits {
            min_ttl_ms: self.min_ttl_ms,
            max_ttl_ms: self.max_ttl_ms,
            max_value_bytes: self.max_value_bytes,
            max_holder_bytes: 256,
            max_waiters_per_lock: self.max_waiters_per_lock,
            max_holdings_per_lease: self.max_holdings_per_lease,
            max_lock_delay_ms: self.max_lock_delay_ms,
        }
    }

    /// The admission caps every write is judged by.
    fn quota(&self) -> Quota {
        Quota {
            max_leases: self.max_leases,
            max_leases_per_principal: self.max_leases_per_principal,
            max_holdings_per_principal: self.max_holdings_per_principal,
            max_waiters_per_principal: self.max_waiters_per_principal,
            max_idempotency_keys_per_principal: self.max_idempotency_keys_per_principal,
        }
    }

    /// The request rate each principal may use on this node.
    fn rate_limit(&self) -> RateLimit {
        RateLimit {
            per_second: self.rate_limit,
            burst: self.rate_limit_burst,
        }
    }

    /// The HTTP API's settings these flags give.
    pub fn api_settings(&self) -> ApiSettings {
        ApiSettings {
            default_ttl_ms: self.default_ttl_ms,
            max_wait_ms: self.max_wait_ms,
            min_revision_wait_ms: self.min_revision_wait_ms,
            quota: self.quota(),
            rate: self.rate_limit(),
        }
    }

    /// The node configuration, for a node whose peer listener is `raft_url`.
    pub fn node_config(&self, node_id: u64, raft_url: String) -> Result<NodeConfig, String> {
        let mut config = NodeConfig::single(self.data_dir.clone(), self.api_url());
        config.node_id = node_id;
        config.raft_addr = raft_url;
        config.limits = self.limits();
        config.max_batch = self.max_batch;
        config.max_queued = self.max_queued_proposals;
        config.expiries_per_entry = self.expiries_per_entry;
        config.max_in_flight = self.max_in_flight.map_or(InFlight::Auto, InFlight::Fixed);
        config.snapshot_every = self.snapshot_every;
        config.snapshot_log_ratio = self.snapshot_log_ratio;
        config.lease_tick = Duration::from_millis(50);
        config.heartbeat = Duration::from_millis(self.heartbeat_ms);
        config.commit_heartbeat_delay = Duration::from_micros(self.commit_heartbeat_delay_us);
        config.max_inflight_appends = self.max_inflight_appends;
        config.log_version = self.log_version;
        config.election_timeout = Duration::from_millis(self.election_timeout_ms);
        config.propose_timeout = Duration::from_millis(self.propose_timeout_ms.max(100));
        config.cluster_secret = self.cluster_secret.clone().filter(|s| !s.is_empty());
        config.also_accepted_secrets = self
            .accept_cluster_secret
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect();
        if config.cluster_secret.is_none() && !config.also_accepted_secrets.is_empty() {
            return Err(
                "--accept-cluster-secret needs --cluster-secret (the secret this node sends)"
                    .into(),
            );
        }
        config.peers = self.peer_map()?;
        config.join = self.join.clone();
        config.dial_overrides = parse_id_map("--peer-dial", self.peer_dial.as_deref())?;
        if let Some(ms) = self.unsafe_leader_append_delay_ms {
            config.durability = Durability::DelayedLeaderAppends(Duration::from_millis(ms));
        }
        if self.unsafe_no_fsync {
            config.durability = Durability::UnsafeNoWal;
        }
        config.wal_prewrite_mib = self.wal_prewrite_mib;
        config.watch = WatchConfig {
            history: self.watch_history,
            max_lag: self.watch_max_lag,
            max_watchers: self.watch_max_streams,
            max_watchers_per_principal: self.watch_max_streams_per_client,
            bookmark_interval: Duration::from_millis(self.watch_bookmark_ms),
        };
        Ok(config)
    }
}

/// Parses `1=http://a:7879,2=http://b:7879`.
fn parse_id_map(flag: &str, text: Option<&str>) -> Result<BTreeMap<u64, String>, String> {
    let mut map = BTreeMap::new();
    for part in text.unwrap_or_default().split(',').map(str::trim) {
        if part.is_empty() {
            continue;
        }
        let (id, url) = part
            .split_once('=')
            .ok_or_else(|| format!("{flag}: expected ID=URL, got '{part}'"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("{flag}: '{id}' is not a node id"))?;
        let url = url.trim().trim_end_matches('/');
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return Err(format!(
                "{flag}: '{url}' must start with http:// or https://"
            ));
        }
        if map.insert(id, url.to_owned()).is_some() {
            return Err(format!("{flag}: node {id} appears twice"));
        }
    }
    Ok(map)
}

/// `baton-2` -> 3: a StatefulSet pod's ordinal, plus one.
fn node_id_from_hostname(hostname: &str) -> Result<u64, String> {
    hostname
        .rsplit_once('-')
        .and_then(|(_, ordinal)| ordinal.parse::<u64>().ok())
        .map(|ordinal| ordinal + 1)
        .ok_or_else(|| format!("host name '{hostname}' does not end in -<ordinal>"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve_args(extra: &[&str]) -> ServeArgs {
        let cli = Cli::try_parse_from(["baton", "serve"].iter().chain(extra)).expect("parses");
        match cli.command {
            Command::Serve(args) => *args,
            _ => panic!("not serve"),
        }
    }

    /// The node configuration `baton serve <extra>` gives node 1.
    fn node_config(extra: &[&str]) -> NodeConfig {
        serve_args(extra)
            .node_config(1, "http://a:7879".to_owned())
            .expect("config")
    }

    /// Asserts that `baton serve <flag> <value>` is refused, naming the flag.
    fn refused(flag: &str, value: &str) {
        let cli = Cli::try_parse_from(["baton", "serve", flag, value]);
        let error = cli.expect_err("refused").to_string();
        assert!(error.contains(flag), "{error}");
    }

    #[test]
    fn the_snapshot_log_ratio_must_be_a_sensible_multiple() {
        assert_eq!(serve_args(&[]).validate(), Ok(()));
        assert_eq!(
            serve_args(&["--snapshot-log-ratio", "0"]).validate(),
            Ok(())
        );
        for bad in ["-1", "NaN", "1001"] {
            let args = serve_args(&[&format!("--snapshot-log-ratio={bad}")]);
            assert!(args.validate().is_err(), "{bad} was accepted");
        }
        let config = serve_args(&["--snapshot-log-ratio", "0.5"]);
        assert_eq!(config.snapshot_log_ratio, 0.5);
    }

    /// `--runtime-threads 0` would reach tokio, whose assertion ends the
    /// process with a panic (exit 70) instead of a usage error.
    #[test]
    fn the_runtime_needs_a_thread() {
        let zero = serve_args(&["--runtime-threads", "0"]).validate();
        assert_eq!(zero, Err("--runtime-threads must be at least 1".to_owned()));
        assert_eq!(serve_args(&["--runtime-threads", "1"]).validate(), Ok(()));
        assert_eq!(
            serve_args(&["--runtime-threads", "3"]).runtime_threads,
            Some(3)
        );
    }

    /// `--http-workers 0` used to reach actix's assertion (exit 70); it now
    /// means the API on the runtime's thread, which needs a runtime of one.
    #[test]
    fn no_http_workers_means_the_api_on_a_runtime_of_one_thread() {
        assert_eq!(serve_args(&["--http-workers", "0"]).validate(), Ok(()));
        let with_one = serve_args(&["--http-workers", "0", "--runtime-threads", "1"]);
        assert_eq!(with_one.validate(), Ok(()));
        assert!(
            serve_args(&["--http-workers", "0", "--runtime-threads", "2"])
                .validate()
                .is_err_and(|e| e
                    .starts_with("--http-workers 0 serves the API on the runtime's one thread"))
        );
        assert_eq!(
            serve_args(&["--http-workers", "0", "--proxy", "http://127.0.0.1:1"]).validate(),
            Err("--http-workers must be at least 1 for a --proxy".to_owned())
        );
    }

    #[test]
    fn the_api_is_on_the_runtime_when_the_runtime_has_one_thread() {
        let default = serve_args(&[]);
        for (cores, on_runtime) in [(1, true), (2, true), (3, true), (4, false), (16, false)] {
            assert_eq!(
                default.api_on_runtime(cores, false),
                on_runtime,
                "{cores} cores"
            );
        }
        // TOKIO_WORKER_THREADS leaves the runtime to tokio: workers as before.
        assert!(!default.api_on_runtime(2, true));
        assert!(!serve_args(&["--http-workers", "2"]).api_on_runtime(2, false));
        assert!(serve_args(&["--http-workers", "0"]).api_on_runtime(16, true));
        assert!(serve_args(&["--runtime-threads", "1"]).api_on_runtime(16, false));
        assert!(!serve_args(&["--runtime-threads", "2"]).api_on_runtime(2, false));
        let proxy = serve_args(&["--proxy", "http://127.0.0.1:1"]);
        assert!(!proxy.api_on_runtime(2, false));
    }

    #[test]
    fn the_runtime_gets_half_the_cores_unless_told() {
        let default = serve_args(&[]);
        for (cores, threads) in [(1, 1), (2, 1), (3, 1), (4, 2), (16, 8)] {
            assert_eq!(
                default.runtime_worker_threads(cores, false),
                Some(threads),
                "{cores} cores"
            );
        }
        // TOKIO_WORKER_THREADS, the way to set it before the flag, still works.
        assert_eq!(default.runtime_worker_threads(2, true), None);
        let told = serve_args(&["--runtime-threads", "2"]);
        assert_eq!(told.runtime_worker_threads(2, true), Some(2));
        assert_eq!(told.runtime_worker_threads(16, false), Some(2));
    }

    #[test]
    fn idle_polling_lasts_300_us_unless_told_and_is_bounded() {
        assert_eq!(serve_args(&[]).idle_poll(), Duration::from_micros(300));
        let off = serve_args(&["--idle-poll-us", "0"]);
        assert_eq!(off.validate(), Ok(()));
        assert_eq!(off.idle_poll(), Duration::ZERO);
        let too_long = serve_args(&["--idle-poll-us", "10001"]).validate();
        assert!(too_long.is_err_and(|e| e.starts_with("--idle-poll-us must be at most 10000")));
    }

    #[test]
    fn a_commit_heartbeat_waits_2_ms_unless_told_and_at_most_one_heartbeat() {
        let default = serve_args(&[]);
        assert_eq!(default.validate(), Ok(()));
        let config = default
            .node_config(1, "http://a:7879".to_owned())
            .expect("config");
        assert_eq!(config.commit_heartbeat_delay, Duration::from_millis(2));
        for fine in ["0", "60000"] {
            let args = serve_args(&["--commit-heartbeat-delay-us", fine]);
            assert_eq!(args.validate(), Ok(()), "{fine}");
        }
        let too_long = serve_args(&["--commit-heartbeat-delay-us", "60001"]).validate();
        assert!(
            too_long.is_err_and(|e| e.starts_with("--commit-heartbeat-delay-us must be at most"))
        );
    }

    #[test]
    fn two_appends_in_flight_unless_told_and_never_more() {
        assert_eq!(node_config(&[]).max_inflight_appends, 2);
        let one = node_config(&["--max-inflight-appends", "1"]);
        assert_eq!(one.max_inflight_appends, 1);
        for value in ["0", "3"] {
            refused("--max-inflight-appends", value);
        }
    }

    #[test]
    fn a_min_revision_read_waits_three_seconds_unless_told() {
        assert_eq!(serve_args(&[]).api_settings().min_revision_wait_ms, 3_000);
        let short = serve_args(&["--min-revision-wait-ms", "200"]).api_settings();
        assert_eq!(short.min_revision_wait_ms, 200);
        for value in ["0", "300001"] {
            refused("--min-revision-wait-ms", value);
        }
    }

    #[test]
    fn the_log_is_prewritten_unless_told_and_never_past_the_memtable() {
        assert_eq!(node_config(&[]).wal_prewrite_mib, 60);
        assert_eq!(
            node_config(&["--wal-prewrite-mib", "0"]).wal_prewrite_mib,
            0
        );
        refused("--wal-prewrite-mib", "61");
    }

    #[test]
    fn peers_parse_and_reject_nonsense() {
        let map = parse_id_map("--peers", Some("1=http://a:7879/, 2=http://b:7879"))
            .expect("valid peers");
        assert_eq!(map.get(&1).map(String::as_str), Some("http://a:7879"));
        assert_eq!(map.len(), 2);
        assert!(parse_id_map("--peers", Some("1=http://a,1=http://b")).is_err());
        assert!(parse_id_map("--peers", Some("x=http://a")).is_err());
        assert!(parse_id_map("--peers", Some("1=a:7879")).is_err());
        assert!(parse_id_map("--peers", Some("1")).is_err());
        assert!(parse_id_map("--peers", None).expect("empty").is_empty());
    }

    #[test]
    fn statefulset_ordinals_become_node_ids() {
        assert_eq!(node_id_from_hostname("baton-0"), Ok(1));
        assert_eq!(node_id_from_hostname("my-baton-12"), Ok(13));
        assert!(node_id_from_hostname("baton").is_err());
        assert!(node_id_from_hostname("baton-x").is_err());
    }
}
