//! Orchestrates a cluster of real `baton serve` processes on loopback: free ports,
//! data directories, a TCP proxy on every directed raft link (through the hidden
//! `--peer-dial` flag), signals, clocks (libfaketime) and readiness.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

use crate::client::{BatonClient, Reply};
use crate::proxy::{LinkMode, LinkProxy};

/// Where Debian's `libfaketime` puts the preload library (per architecture).
const FAKETIME_LIBS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
];

/// The libfaketime preload library (`BATON_CHAOS_FAKETIME_LIB` overrides).
pub fn faketime_lib() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BATON_CHAOS_FAKETIME_LIB") {
        return Some(PathBuf::from(p));
    }
    FAKETIME_LIBS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Cluster settings.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Number of voters.
    pub nodes: usize,
    /// The `baton` binary.
    pub baton_bin: PathBuf,
    /// Logs and data go under here.
    pub dir: PathBuf,
    /// `--cluster-secret`.
    pub secret: String,
    /// `--heartbeat-ms`.
    pub heartbeat_ms: u64,
    /// `--election-timeout-ms`.
    pub election_timeout_ms: u64,
    /// Negative control: `--unsafe-no-fsync` on every node.
    pub unsafe_no_fsync: bool,
    /// Run every node under libfaketime with its own control file.
    pub faketime: bool,
    /// Node (1-based) whose clock runs at `clock_rate` for its whole life, if any.
    pub skewed_node: Option<u64>,
    /// Rate of the skewed node's clock (1.0 = real time).
    pub clock_rate: f64,
}

/// Errors of the orchestration.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// I/O (ports, files, processes).
    #[error("cluster i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A node did not become ready.
    #[error("node {0} not ready after {1:?}")]
    NotReady(u64, Duration),
    /// The binary is missing.
    #[error("baton binary not found at {0}")]
    NoBinary(PathBuf),
    /// Clock faults asked for but libfaketime is not installed.
    #[error("clock faults need libfaketime (.ci/setup chaos installs Debian's faketime)")]
    NoFaketime,
}

/// One node.
pub struct Node {
    /// Raft id (1-based).
    pub id: u64,
    /// Client API address.
    pub api: SocketAddr,
    /// Raft listener address.
    pub raft: SocketAddr,
    data_dir: PathBuf,
    log_path: PathBuf,
    clock_file: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// Seconds the node's clock was moved forward so far (never back: a monotonic
    /// clock that goes backwards is not a real fault, and openraft 0.9 panics on it).
    clock_offset_s: i64,
    /// How many times it was started.
    pub starts: u32,
}

impl Node {
    /// The API base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.api)
    }

    /// The OS pid, when running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }
}

/// A running cluster.
pub struct Cluster {
    cfg: ClusterConfig,
    /// Nodes by index (id - 1).
    pub nodes: Vec<Node>,
    links: BTreeMap<(u64, u64), LinkProxy>,
    http: BatonClient,
}

async fn free_listener() -> std::io::Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0").await
}

/// A node's address: on a port [`crate::ports::free_port`] picked (the node binds
/// it, is killed and binds it again, so the harness cannot hold it meanwhile).
fn free_addr() -> std::io::Result<SocketAddr> {
    Ok(SocketAddr::from((
        [127, 0, 0, 1],
        crate::ports::free_port()?,
    )))
}

impl Cluster {
    /// Allocates ports, proxies and directories; starts nothing yet.
    pub async fn new(cfg: ClusterConfig) -> Result<Self, ClusterError> {
        if !cfg.baton_bin.is_file() {
            return Err(ClusterError::NoBinary(cfg.baton_bin.clone()));
        }
        if cfg.faketime && faketime_lib().is_none() {
            return Err(ClusterError::NoFaketime);
        }
        std::fs::create_dir_all(&cfg.dir)?;
        let mut nodes = Vec::new();
        for i in 0..cfg.nodes {
            let id = i as u64 + 1;
            let data_dir = cfg.dir.join(format!("data-{id}"));
            std::fs::create_dir_all(&data_dir)?;
            let clock_file = cfg.dir.join(format!("clock-{id}"));
            nodes.push(Node {
                id,
                api: free_addr()?,
                raft: free_addr()?,
                data_dir,
                log_path: cfg.dir.join(format!("node-{id}.log")),
                clock_file,
                child: None,
                paused: false,
                clock_offset_s: 0,
                starts: 0,
            });
        }
        let mut links = BTreeMap::new();
        for a in &nodes {
            for b in &nodes {
                if a.id != b.id {
                    links.insert(
                        (a.id, b.id),
                        LinkProxy::start(free_listener().await?, b.raft)?,
                    );
                }
            }
        }
        let c = Self {
            cfg,
            nodes,
            links,
            http: BatonClient::new(Duration::from_secs(2)),
        };
        for id in c.ids() {
            c.write_clock(id)?;
        }
        Ok(c)
    }

    /// Node ids.
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// API URLs of every node (live or not).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    fn node(&self, id: u64) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    fn node_mut(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    /// Starts every node.
    pub async fn start_all(&mut self) -> Result<(), ClusterError> {
        for id in self.ids() {
            self.start(id)?;
        }
        Ok(())
    }

    /// Starts (or restarts) one node with the same data directory.
    pub fn start(&mut self, id: u64) -> Result<(), ClusterError> {
        let peers = self
            .nodes
            .iter()
            .map(|n| format!("{}=http://{}", n.id, n.raft))
            .collect::<Vec<_>>()
            .join(",");
        let dial = self
            .links
            .iter()
            .filter(|((from, _), _)| *from == id)
            .map(|((_, to), p)| format!("{to}=http://{}", p.listen))
            .collect::<Vec<_>>()
            .join(",");
        let cfg = self.cfg.clone();
        let node = self.node_mut(id);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log_path)?;
        let mut cmd = Command::new(&cfg.baton_bin);
        cmd.arg("serve")
            .arg("--node-id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(node.api.to_string())
            .arg("--raft-listen")
            .arg(node.raft.to_string())
            .arg("--data-dir")
            .arg(&node.data_dir)
            .arg("--peers")
            .arg(&peers)
            .arg("--peer-dial")
            .arg(&dial)
            .arg("--cluster-secret")
            .arg(&cfg.secret)
            // Loopback and network namespaces of the harness only.
            .arg("--insecure-plaintext-peers")
            .arg("--heartbeat-ms")
            .arg(cfg.heartbeat_ms.to_string())
            .arg("--election-timeout-ms")
            .arg(cfg.election_timeout_ms.to_string())
            .env("BATON_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        if cfg.unsafe_no_fsync {
            cmd.arg("--unsafe-no-fsync");
        }
        if let Some(lib) = faketime_lib().filter(|_| cfg.faketime) {
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME_TIMESTAMP_FILE", &node.clock_file)
                // Re-read the control file at most once a second: reading it on every
                // clock call would slow the node down far more than the fault does.
                .env("FAKETIME_CACHE_DURATION", "1");
        }
        node.child = Some(cmd.spawn()?);
        node.paused = false;
        node.starts += 1;
        Ok(())
    }

    /// kill -9.
    pub async fn kill(&mut self, id: u64) {
        let node = self.node_mut(id);
        if let Some(mut child) = node.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        node.paused = false;
    }

    /// Deletes a (killed) node's data directory: what a disk that acknowledged
    /// writes it never synced gives back after a power cut, at worst.
    pub fn wipe_data(&mut self, id: u64) -> std::io::Result<()> {
        let node = self.node(id);
        if node.child.is_some() {
            return Ok(());
        }
        let dir = node.data_dir.clone();
        std::fs::remove_dir_all(&dir)?;
        std::fs::create_dir_all(&dir)
    }

    /// Whether the node's process is running (not killed).
    pub fn is_running(&self, id: u64) -> bool {
        self.node(id).child.is_some()
    }

    /// Whether it is SIGSTOPped.
    pub fn is_paused(&self, id: u64) -> bool {
        self.node(id).paused
    }

    /// SIGSTOP (`pause = true`) or SIGCONT.
    pub async fn signal_pause(&mut self, id: u64, pause: bool) {
        let node = self.node_mut(id);
        let Some(pid) = node.pid() else { return };
        let sig = if pause { "-STOP" } else { "-CONT" };
        // `kill(1)` rather than libc: the workspace forbids unsafe code.
        let ok = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .await
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            node.paused = pause;
        }
    }

    /// Sets a directed link's mode.
    pub fn set_link(&self, from: u64, to: u64, mode: LinkMode) {
        if let Some(p) = self.links.get(&(from, to)) {
            p.set(mode);
        }
    }

    /// Every link back to pass.
    pub fn heal_links(&self) {
        for p in self.links.values() {
            p.set(LinkMode::Pass);
        }
    }

    /// Links not passing, for the report.
    pub fn cut_links(&self) -> Vec<(u64, u64, LinkMode)> {
        self.links
            .iter()
            .filter(|(_, p)| p.mode() != LinkMode::Pass)
            .map(|((a, b), p)| (*a, *b, p.mode()))
            .collect()
    }

    /// Moves the node's clock (wall and monotonic) forward by `secs`, as a VM
    /// suspend or live migration does. Takes effect within a second (libfaketime's
    /// cache duration) and stays: clocks are never moved back.
    pub fn advance_clock(&mut self, id: u64, secs: i64) -> std::io::Result<()> {
        self.node_mut(id).clock_offset_s += secs.max(0);
        self.write_clock(id)
    }

    /// The node's clock offset so far (seconds).
    pub fn clock_offset(&self, id: u64) -> i64 {
        self.node(id).clock_offset_s
    }

    /// Writes the libfaketime control file: offset on top of the node's rate.
    fn write_clock(&self, id: u64) -> std::io::Result<()> {
        let rate = if self.cfg.skewed_node == Some(id) {
            self.cfg.clock_rate
        } else {
            1.0
        };
        let offset_s = self.node(id).clock_offset_s;
        let spec = if rate == 1.0 {
            format!("{offset_s:+}\n")
        } else {
            format!("{offset_s:+} x{rate}\n")
        };
        std::fs::write(&self.node(id).clock_file, spec)
    }

    /// `GET /v1/cluster` of one node.
    pub async fn cluster_info(&self, id: u64) -> Option<Value> {
        match self
            .http
            .get(&self.node(id).url(), "/v1/cluster", Duration::from_secs(1))
            .await
        {
            Reply::Ok(v) => Some(v),
            _ => None,
        }
    }

    /// The leader most running, unpaused nodes agree on.
    pub async fn leader(&self) -> Option<u64> {
        let mut votes: BTreeMap<u64, usize> = BTreeMap::new();
        for n in &self.nodes {
            if n.child.is_none() || n.paused {
                continue;
            }
            if let Some(l) = self
                .cluster_info(n.id)
                .await
                .and_then(|v| v.get("leader_id").and_then(Value::as_u64))
            {
                *votes.entry(l).or_default() += 1;
            }
        }
        votes.into_iter().max_by_key(|(_, c)| *c).map(|(l, _)| l)
    }

    /// Whether `GET /readyz` answers 200.
    pub async fn ready(&self, id: u64) -> bool {
        matches!(
            self.http
                .get(&self.node(id).url(), "/readyz", Duration::from_secs(1))
                .await,
            Reply::Ok(_)
        )
    }

    /// Waits until every running node is ready.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), ClusterError> {
        let deadline = tokio::time::Instant::now() + timeout;
        for n in &self.nodes {
            if n.child.is_none() {
                continue;
            }
            while !self.ready(n.id).await {
                if tokio::time::Instant::now() > deadline {
                    return Err(ClusterError::NotReady(n.id, timeout));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// Heals everything: restarts killed nodes, resumes paused ones, heals links
    /// (clocks stay where they jumped to: they only ever move forward).
    pub async fn heal_all(&mut self) -> Result<(), ClusterError> {
        self.heal_links();
        for id in self.ids() {
            if self.is_paused(id) {
                self.signal_pause(id, false).await;
            }
            if !self.is_running(id) {
                self.start(id)?;
            }
        }
        Ok(())
    }

    /// Kills every node.
    pub async fn shutdown(&mut self) {
        for id in self.ids() {
            if self.is_paused(id) {
                self.signal_pause(id, false).await;
            }
            self.kill(id).await;
        }
    }

    /// Where logs and data live.
    pub fn dir(&self) -> &Path {
        &self.cfg.dir
    }
}
