//! Command line and environment configuration.

use std::path::PathBuf;
use std::time::Duration;

use baton_core::Limits;
use baton_raft::{NodeConfig, WatchConfig};
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
    Serve(ServeArgs),
    /// Print the OpenAPI document.
    Openapi,
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
    /// Client API URL advertised to peers and in `GET /v1/cluster`
    /// (default: http://<listen>).
    #[arg(long, env = "BATON_ADVERTISE_API")]
    pub advertise_api: Option<String>,
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
    /// Largest `lock_delay_ms` accepted.
    #[arg(long, env = "BATON_MAX_LOCK_DELAY_MS", default_value_t = 60_000)]
    pub max_lock_delay_ms: u64,
    /// Most requests queued on one lock or election.
    #[arg(long, env = "BATON_MAX_WAITERS_PER_LOCK", default_value_t = 10_000)]
    pub max_waiters_per_lock: u32,
    /// Most holdings (locks, names, elections, waits) on one lease.
    #[arg(long, env = "BATON_MAX_HOLDINGS_PER_LEASE", default_value_t = 10_000)]
    pub max_holdings_per_lease: u32,
    /// Largest election or name value, in bytes.
    #[arg(long, env = "BATON_MAX_VALUE_BYTES", default_value_t = 4_096)]
    pub max_value_bytes: u32,
    /// Most client requests in one Raft log entry.
    #[arg(long, env = "BATON_MAX_BATCH", default_value_t = 1_024)]
    pub max_batch: usize,
    /// Build a snapshot after this many log entries.
    #[arg(long, env = "BATON_SNAPSHOT_EVERY", default_value_t = 20_000)]
    pub snapshot_every: u64,
    /// HTTP worker threads (default: number of cores).
    #[arg(long, env = "BATON_HTTP_WORKERS")]
    pub http_workers: Option<usize>,
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
}

impl ServeArgs {
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
        if self.watch_history == 0 || self.watch_max_lag >= self.watch_history as u64 {
            return Err("--watch-max-lag must be below --watch-history (at least 1)".into());
        }
        if !(1..=10_000).contains(&self.watch_bookmark_ms) {
            return Err("--watch-bookmark-ms must be between 1 and 10000".into());
        }
        Ok(())
    }

    /// The advertised client API URL.
    pub fn api_url(&self) -> String {
        self.advertise_api
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.listen))
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

    /// The node configuration.
    pub fn node_config(&self) -> NodeConfig {
        let mut config = NodeConfig::single(self.data_dir.clone(), self.api_url());
        config.node_id = self.node_id;
        config.limits = self.limits();
        config.max_batch = self.max_batch;
        config.snapshot_every = self.snapshot_every;
        config.lease_tick = Duration::from_millis(50);
        config.watch = WatchConfig {
            history: self.watch_history,
            max_lag: self.watch_max_lag,
            max_watchers: self.watch_max_streams,
            max_watchers_per_principal: self.watch_max_streams_per_client,
            bookmark_interval: Duration::from_millis(self.watch_bookmark_ms),
        };
        config
    }
}
