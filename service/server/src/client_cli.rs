//! The client commands of `baton`: their arguments, the exit codes they share,
//! and how a refusal is reported.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use crate::client::{Client, ClientError};

/// Exit codes of the client commands beyond 0 (success), 1 (a request
/// failed) and 2 (usage). A supervised command's own status passes through
/// (128 + N when signal N killed it).
pub mod exit_code {
    /// `baton lock` / `baton elect`: the wait ran out (`--wait-ms`, `--no-wait`).
    pub const NOT_ACQUIRED: u8 = 75;
    /// `baton lock` / `baton elect`: the lock or the leadership was lost while
    /// held; the command was stopped.
    pub const LOST: u8 = 76;
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// The server's JSON answers, one document per line, for scripts.
    Json,
}

/// Where the server is and who is asking; every client command takes these.
#[derive(Debug, Clone, Args)]
pub struct ClientOptions {
    /// Client API URL of any node (or proxy).
    #[arg(
        long,
        env = "BATON_ENDPOINT",
        default_value = "http://127.0.0.1:7878",
        global = true
    )]
    pub endpoint: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    /// Bearer token (from the server's --auth-file); read from the environment
    /// only, so it never shows in `ps`.
    #[arg(skip = std::env::var("BATON_TOKEN").ok())]
    pub token: Option<String>,
    /// CA certificates (PEM) to trust for an https endpoint.
    #[arg(long, env = "BATON_CA_FILE", global = true)]
    pub ca_file: Option<std::path::PathBuf>,
    /// Client certificate (PEM) to present, with --key-file (mutual TLS).
    #[arg(long, env = "BATON_CERT_FILE", global = true, requires = "key_file")]
    pub cert_file: Option<std::path::PathBuf>,
    /// Private key (PEM) of --cert-file.
    #[arg(long, env = "BATON_KEY_FILE", global = true, requires = "cert_file")]
    pub key_file: Option<std::path::PathBuf>,
}

impl ClientOptions {
    /// The client these options describe.
    pub fn client(&self) -> Result<Client, ClientError> {
        let tls = match &self.ca_file {
            Some(ca) => Some(
                baton_raft::client_config_trusting(
                    ca,
                    self.cert_file.as_deref().zip(self.key_file.as_deref()),
                )
                .map_err(|error| ClientError::Transport {
                    endpoint: self.endpoint.clone(),
                    reason: error.to_string(),
                })?,
            ),
            None => None,
        };
        Client::new(&self.endpoint, self.token.clone(), tls)
    }
}

/// `baton lock` and `baton elect`: what to hold and how.
#[derive(Debug, Clone, Args)]
pub struct HoldArgs {
    /// Lock, semaphore or election name (may contain `/`).
    pub name: String,
    /// TTL of the lease the holding hangs on.
    #[arg(long, default_value_t = 15_000)]
    pub ttl_ms: u64,
    /// Wait at most this long in the FIFO queue (default: wait until granted).
    #[arg(long, conflicts_with = "no_wait")]
    pub wait_ms: Option<u64>,
    /// Try once; exit 75 if someone else holds it.
    #[arg(long)]
    pub no_wait: bool,
    /// Holder identity shown to others (default: <hostname>:<pid>).
    #[arg(long)]
    pub holder: Option<String>,
    /// On loss: time between SIGTERM and SIGKILL to the command. At most half
    /// the TTL.
    #[arg(long, default_value_t = 2_000)]
    pub kill_grace_ms: u64,
    /// Locks: after this holder's lease expires, keep the lock ungrantable this
    /// long (default: the kill grace + 1 s, so no successor runs before the
    /// command is stopped).
    #[arg(long)]
    pub lock_delay_ms: Option<u64>,
    /// Also give the command BATON_LEASE_ID (a capability: whoever has it can
    /// release or renew the holding).
    #[arg(long)]
    pub export_lease_id: bool,
    /// Elections: the value to publish while leader (JSON).
    #[arg(long, value_parser = parse_json)]
    pub value: Option<serde_json::Value>,
    /// The command to run while holding (after `--`). Without one, the grant is
    /// printed and held until SIGINT or SIGTERM.
    #[arg(last = true)]
    pub command: Vec<String>,
}

impl HoldArgs {
    /// The longest wait, or `None` for "until granted".
    pub fn wait_budget(&self) -> Option<Duration> {
        if self.no_wait {
            return Some(Duration::ZERO);
        }
        self.wait_ms.map(Duration::from_millis)
    }
}

/// `baton lock NAME [--shared] [-- CMD ...]`.
#[derive(Debug, Clone, Args)]
pub struct LockCommand {
    /// Server and output.
    #[command(flatten)]
    pub client: ClientOptions,
    /// What to hold.
    #[command(flatten)]
    pub hold: HoldArgs,
    /// Hold the lock shared (a reader: other shared holders may hold it at the
    /// same time, an exclusive one waits for all of them; a queued exclusive
    /// request blocks later shared ones).
    #[arg(long)]
    pub shared: bool,
}

/// `baton semaphore NAME --limit N [--permits P] [-- CMD ...]`.
#[derive(Debug, Clone, Args)]
pub struct SemaphoreCommand {
    /// Server and output.
    #[command(flatten)]
    pub client: ClientOptions,
    /// What to hold.
    #[command(flatten)]
    pub hold: HoldArgs,
    /// The semaphore's number of permits (1 to 1000000). The first acquirer's
    /// limit stands while anyone holds or waits; another is refused (exit 1,
    /// limit_mismatch).
    #[arg(long)]
    pub limit: u32,
    /// Permits to take (1 to the limit).
    #[arg(long, default_value_t = 1)]
    pub permits: u32,
}

/// `baton elect NAME [-- CMD ...]` or `baton elect NAME --observe`.
#[derive(Debug, Clone, Args)]
pub struct ElectCommand {
    /// Server and output.
    #[command(flatten)]
    pub client: ClientOptions,
    /// What to campaign for.
    #[command(flatten)]
    pub hold: HoldArgs,
    /// Print the election's leader changes until interrupted, instead of
    /// campaigning.
    #[arg(long)]
    pub observe: bool,
}

/// `baton locks ...`.
#[derive(Debug, Clone, Args)]
pub struct LocksCommand {
    /// Server and output.
    #[command(flatten)]
    pub client: ClientOptions,
    /// What to do.
    #[command(subcommand)]
    pub action: LocksAction,
}

/// Lock inspection and administration.
#[derive(Debug, Clone, Subcommand)]
pub enum LocksAction {
    /// One lock: holder, token, queue.
    Get {
        /// Lock name.
        name: String,
    },
    /// Locks (every page).
    List(ListArgs),
    /// Admin: end the current holding now (the next waiter is granted).
    Revoke(RevokeArgs),
}

/// `baton elections ...`.
#[derive(Debug, Clone, Args)]
pub struct ElectionsCommand {
    /// Server and output.
    #[command(flatten)]
    pub client: ClientOptions,
    /// What to do.
    #[command(subcommand)]
    pub action: ElectionsAction,
}

/// Election inspection and administration.
#[derive(Debug, Clone, Subcommand)]
pub enum ElectionsAction {
    /// One election: its leader, value and candidates.
    Get {
        /// Election name.
        name: String,
    },
    /// Admin: end the current leadership now.
    Revoke(RevokeArgs),
}

/// `baton names ...`.
#[derive(Debug, Clone, Args)]
pub struct NamesCommand {
    /// Server and output.
    #[command(flatten)]
    pub client: ClientOptions,
    /// What to do.
    #[command(subcommand)]
    pub action: NamesAction,
}

/// Name registry commands.
#[derive(Debug, Clone, Subcommand)]
pub enum NamesAction {
    /// One registered name.
    Get {
        /// The name.
        name: String,
    },
    /// Registered names (every page).
    List(ListArgs),
    /// Register a name on a new lease (printed: keep it alive with `baton
    /// leases keepalive`, or the name goes when the TTL ends).
    Register {
        /// The name.
        name: String,
        /// Its value (JSON).
        #[arg(long, value_parser = parse_json)]
        value: serde_json::Value,
        /// TTL of the new lease.
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
    /// Admin: unregister a name whoever owns it.
    Revoke(RevokeArgs),
}

/// `baton leases ...`.
#[derive(Debug, Clone, Args)]
pub struct LeasesCommand {
    /// Server and output.
    #[command(flatten)]
    pub client: ClientOptions,
    /// What to do.
    #[command(subcommand)]
    pub action: LeasesAction,
}

/// Lease commands.
#[derive(Debug, Clone, Subcommand)]
pub enum LeasesAction {
    /// Create a lease.
    Create {
        /// Its TTL.
        #[arg(long)]
        ttl_ms: Option<u64>,
        /// Holder identity.
        #[arg(long)]
        holder: Option<String>,
    },
    /// A lease and what hangs on it.
    Get {
        /// Lease id.
        lease_id: String,
    },
    /// Restart a lease's TTL.
    Keepalive {
        /// Lease id.
        lease_id: String,
    },
    /// End a lease and release everything on it.
    Revoke {
        /// Lease id.
        lease_id: String,
    },
}

/// `baton watch`.
#[derive(Debug, Clone, Args)]
pub struct WatchCommand {
    /// Server and output.
    #[command(flatten)]
    pub client: ClientOptions,
    /// Only names starting with this.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Only these kinds (comma-separated: lock, election, name, lease).
    #[arg(long)]
    pub kinds: Option<String>,
    /// Resume after this revision.
    #[arg(long)]
    pub since: Option<u64>,
}

/// `baton cluster ...`.
#[derive(Debug, Clone, Args)]
pub struct ClusterCommand {
    /// Server and output.
    #[command(flatten)]
    pub client: ClientOptions,
    /// The cluster secret, for membership changes when no admin token is set.
    #[arg(
        long,
        env = "BATON_CLUSTER_SECRET",
        hide_env_values = true,
        global = true
    )]
    pub cluster_secret: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub action: ClusterAction,
}

/// Cluster status and membership.
#[derive(Debug, Clone, Subcommand)]
pub enum ClusterAction {
    /// Members, leader, term and revisions.
    Status,
    /// Admin: add a member (it must be running and answer on its raft address).
    Add {
        /// The new member's node id.
        id: u64,
        /// Its client API URL.
        #[arg(long)]
        api: String,
        /// Its raft URL.
        #[arg(long)]
        raft: String,
        /// Keep it a learner (no vote).
        #[arg(long)]
        learner: bool,
    },
    /// Admin: remove a member.
    Remove {
        /// The member's node id.
        id: u64,
    },
}

/// Paging options of the list commands.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Only names starting with this.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Stop after this many items.
    #[arg(long)]
    pub limit: Option<usize>,
}

/// Options of the admin force-release commands.
#[derive(Debug, Clone, Args)]
pub struct RevokeArgs {
    /// The name.
    pub name: String,
    /// Only if this token still holds it (refused with token_mismatch otherwise).
    #[arg(long)]
    pub token: Option<u64>,
}

fn parse_json(text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|error| format!("not JSON: {error}"))
}

/// Reports a failed call as one line on stderr; exit code 1.
pub fn report(error: &ClientError) -> ExitCode {
    eprintln!("baton: {error}");
    ExitCode::FAILURE
}
