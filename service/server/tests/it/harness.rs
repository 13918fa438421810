//! Real `baton` processes on loopback ports, for the multi-process tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The secret every test cluster uses.
pub const SECRET: &str = "test-cluster-secret";

/// The server binary: `BATON_TEST_BIN` when set (to test another build, such as
/// the release binary), else the one cargo built for these tests.
pub fn baton_bin() -> String {
    std::env::var("BATON_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_baton").to_owned())
}

/// `serve` flags that put the client API on the runtime's own thread (the
/// default on one or two cores).
pub const API_ON_RUNTIME: &[&str] = &["--http-workers", "0"];

/// `serve` flags that serve the client API on HTTP workers of their own, beside
/// a runtime of one thread (the default on four cores and more has more).
pub const API_ON_WORKERS: &[&str] = &["--http-workers", "2", "--runtime-threads", "1"];

/// The environment variable and value every node these tests start gets: 1
/// MiB of write-ahead log written in advance instead of the default 60. The
/// prewrite (two files of 60 MiB, synced) made each start about 0.75 s longer
/// and filled the shared disk while other tests' nodes waited on their syncs;
/// with it the Rust suite took 131 s instead of 79 s. The prewrite's code still
/// runs (1 MiB of it); the tests of the default itself pass
/// `--wal-prewrite-mib` explicitly, which overrides this.
pub const TEST_WAL_PREWRITE: (&str, &str) = ("BATON_WAL_PREWRITE_MIB", "1");

/// How often [`eventually`] asks again.
const POLL: Duration = Duration::from_millis(50);

/// Asks `check` until it answers `Some` (returned), for up to `within`; `None`
/// when it never did. The tests wait on facts through this, never on time:
/// `within` only bounds how long a failing test takes to say so.
pub async fn eventually<T, F, Fut>(within: Duration, check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_every(POLL, within, check).await
}

/// [`eventually`], asking every `poll`.
pub async fn eventually_every<T, F, Fut>(
    poll: Duration,
    within: Duration,
    mut check: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        // The poll interval of a wait on a fact (nothing announces these facts).
        tokio::time::sleep(poll).await;
    }
}

/// Waits (up to `within`) until `child` has exited; its status, or `None`.
/// Asks every 20 ms (a `try_wait` costs nothing), so the exit is seen promptly.
pub async fn exited(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let poll = Duration::from_millis(20);
    eventually_every(poll, within, || {
        std::future::ready(child.try_wait().unwrap())
    })
    .await
}

/// A free loopback port for a server to bind: below the kernel's ephemeral range
/// and never handed out twice by this process (`baton_chaos::ports` says why).
pub fn free_port() -> u16 {
    baton_chaos::ports::free_port().expect("a free loopback port")
}

/// Starts a single-node server on `port` (its peer listener on a free port, so
/// tests can run in parallel) and waits until it is ready.
pub async fn start_single(data_dir: &std::path::Path, port: u16) -> Child {
    start_single_with(data_dir, port, &[]).await
}

/// [`start_single`] with more `serve` options.
pub async fn start_single_with(data_dir: &std::path::Path, port: u16, extra: &[&str]) -> Child {
    let mut command = single_command(data_dir, port);
    let child = command.args(extra).spawn().unwrap();
    wait_ready(child, port).await
}

/// The command [`start_single`] runs: a single node on `port`, its peer
/// listener on a free port, warnings only.
pub fn single_command(data_dir: &std::path::Path, port: u16) -> Command {
    let mut command = Command::new(baton_bin());
    command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--raft-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(data_dir)
        .env("BATON_LOG", "warn")
        .env(TEST_WAL_PREWRITE.0, TEST_WAL_PREWRITE.1)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    command
}

/// Waits until the node `child` serves on `port` answers `/readyz`; kills it
/// and panics when it does not within a minute.
pub async fn wait_ready(mut child: Child, port: u16) -> Child {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/readyz");
    let ready = eventually(Duration::from_secs(60), || async {
        let response = client.get(&url).send().await.ok()?;
        response.status().is_success().then_some(())
    })
    .await;
    if ready.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("baton did not become ready");
    }
    child
}

/// Sends a signal with the `kill` command (the tests forbid unsafe code).
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// One node process.
pub struct NodeProc {
    /// Raft id.
    pub id: u64,
    /// `http://127.0.0.1:port` of the client API.
    pub api: String,
    /// Client API port.
    pub api_port: u16,
    /// Raft port.
    pub raft_port: u16,
    /// Data directory.
    pub data: PathBuf,
    /// The running process, if any.
    pub child: Option<Child>,
    /// Arguments after `serve` that make this node part of the cluster.
    pub membership_args: Vec<String>,
    /// The node's log lines (its standard output), across restarts.
    pub log: PathBuf,
    stopped: bool,
}

/// A cluster of real processes, killed when dropped.
pub struct Cluster {
    /// Nodes, index = id - 1.
    pub nodes: Vec<NodeProc>,
    /// Keeps the data directories alive.
    pub dir: tempfile::TempDir,
    /// HTTP client for the tests.
    pub client: reqwest::Client,
    /// Extra `serve` flags for every node.
    pub extra: Vec<String>,
    /// With TLS: the directory of `baton dev certs` (ca.crt, node.crt, ...).
    pub certs: Option<PathBuf>,
    /// Extra environment variables for every node (`OTEL_*` in the trace tests).
    pub env: Vec<(String, String)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A failed test shows what each node logged (warnings and errors by
        // default); a passing one stays quiet.
        if std::thread::panicking() {
            for node in &self.nodes {
                let log = std::fs::read_to_string(&node.log).unwrap_or_default();
                eprintln!("--- node {} log ---\n{log}", node.id);
            }
        }
        for node in &mut self.nodes {
            if let Some(child) = node.child.as_mut() {
                if node.stopped {
                    let _ = Command::new("kill")
                        .args(["-CONT", &child.id().to_string()])
                        .status();
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Cluster {
    /// Starts `n` voters with static `--peers` and waits until every node is ready.
    pub async fn start(n: u64, extra: &[&str]) -> Cluster {
        Cluster::start_with(n, extra, false, &[]).await
    }

    /// As [`Cluster::start`], with extra environment variables for every node.
    pub async fn start_env(n: u64, extra: &[&str], env: &[(&str, &str)]) -> Cluster {
        Cluster::start_with(n, extra, false, env).await
    }

    /// As [`Cluster::start`], with TLS on both listeners of every node and peers
    /// verifying each other (certificates from `baton dev certs`, including a
    /// client certificate for `billing.client`).
    pub async fn start_tls(n: u64, extra: &[&str]) -> Cluster {
        Cluster::start_with(n, extra, true, &[]).await
    }

    async fn start_with(n: u64, extra: &[&str], tls: bool, env: &[(&str, &str)]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let certs = tls.then(|| write_certs(dir.path()));
        let scheme = if tls { "https" } else { "http" };
        let mut nodes = Vec::new();
        for id in 1..=n {
            let api_port = free_port();
            nodes.push(NodeProc {
                id,
                api: format!("{scheme}://127.0.0.1:{api_port}"),
                api_port,
                raft_port: free_port(),
                data: dir.path().join(format!("node-{id}")),
                child: None,
                membership_args: Vec::new(),
                log: dir.path().join(format!("node-{id}.log")),
                stopped: false,
            });
        }
        let peers = nodes
            .iter()
            .map(|n| format!("{}={scheme}://127.0.0.1:{}", n.id, n.raft_port))
            .collect::<Vec<_>>()
            .join(",");
        for node in &mut nodes {
            node.membership_args = vec!["--peers".into(), peers.clone()];
        }
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(30));
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        match &certs {
            Some(certs) => {
                let trust =
                    baton_raft::client_config_trusting(&certs.join("ca.crt"), None).unwrap();
                builder = builder.use_preconfigured_tls(trust);
                for (flag, file) in [
                    ("--tls-cert", "node.crt"),
                    ("--tls-key", "node.key"),
                    ("--tls-peer-ca", "ca.crt"),
                    ("--tls-client-ca", "ca.crt"),
                ] {
                    extra.push(flag.into());
                    extra.push(certs.join(file).display().to_string());
                }
            }
            None => extra.push("--insecure-plaintext-peers".into()),
        }
        let client = builder.build().unwrap();
        let mut cluster = Cluster {
            nodes,
            dir,
            client,
            extra,
            certs,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        for id in 1..=n {
            cluster.spawn(id);
        }
        for id in 1..=n {
            cluster.wait_ready(id).await;
        }
        cluster
    }

    /// Adds a node that will `--join` through node `via` (not started yet).
    pub fn add_joiner(&mut self, via: u64) -> u64 {
        let id = self.nodes.len() as u64 + 1;
        let api_port = free_port();
        let join = self.node(via).api.clone();
        let scheme = if self.certs.is_some() {
            "https"
        } else {
            "http"
        };
        self.nodes.push(NodeProc {
            id,
            api: format!("{scheme}://127.0.0.1:{api_port}"),
            api_port,
            raft_port: free_port(),
            data: self.dir.path().join(format!("node-{id}")),
            child: None,
            membership_args: vec!["--join".into(), join],
            log: self.dir.path().join(format!("node-{id}.log")),
            stopped: false,
        });
        id
    }

    /// The node with id `id`.
    pub fn node(&self, id: u64) -> &NodeProc {
        &self.nodes[(id - 1) as usize]
    }

    /// Starts (or restarts) node `id`'s process.
    pub fn spawn(&mut self, id: u64) {
        let extra = self.extra.clone();
        let timing: &[&str] = if extra.iter().any(|a| a == "--election-timeout-ms") {
            &[]
        } else {
            &["--heartbeat-ms", "50", "--election-timeout-ms", "500"]
        };
        let propose_timeout: &[&str] = if extra.iter().any(|a| a == "--propose-timeout-ms") {
            &[]
        } else {
            &["--propose-timeout-ms", "3000"]
        };
        let node = &mut self.nodes[(id - 1) as usize];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .unwrap();
        let child = Command::new(baton_bin())
            .arg("serve")
            .args(["--node-id", &id.to_string()])
            .args(["--listen", &format!("127.0.0.1:{}", node.api_port)])
            .args(["--raft-listen", &format!("127.0.0.1:{}", node.raft_port)])
            .arg("--data-dir")
            .arg(&node.data)
            .args(timing)
            .args(propose_timeout)
            .args(&node.membership_args)
            .args(&extra)
            .env("BATON_CLUSTER_SECRET", SECRET)
            .env("BATON_LOG", "warn")
            .env(TEST_WAL_PREWRITE.0, TEST_WAL_PREWRITE.1)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(log)
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        node.child = Some(child);
        node.stopped = false;
    }

    /// `kill -9` node `id`.
    pub fn kill9(&mut self, id: u64) {
        let node = &mut self.nodes[(id - 1) as usize];
        if let Some(mut child) = node.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Node `id`'s log lines so far, each parsed as JSON: start the cluster
    /// with `--log-format json` to read them.
    pub fn json_log(&self, id: u64) -> Vec<Value> {
        json_lines(&self.node(id).log).1
    }

    /// SIGSTOP node `id`.
    pub fn pause(&mut self, id: u64) {
        let node = &mut self.nodes[(id - 1) as usize];
        signal(node.child.as_ref().unwrap().id(), "STOP");
        node.stopped = true;
    }

    /// SIGCONT node `id`.
    pub fn resume(&mut self, id: u64) {
        let node = &mut self.nodes[(id - 1) as usize];
        signal(node.child.as_ref().unwrap().id(), "CONT");
        node.stopped = false;
    }

    /// Waits (up to 60 s) until node `id` answers `/readyz` with 200.
    pub async fn wait_ready(&self, id: u64) {
        let url = format!("{}/readyz", self.node(id).api);
        let ready = eventually(Duration::from_secs(60), || async {
            let response = self.client.get(&url).send().await.ok()?;
            (response.status() == 200).then_some(())
        })
        .await;
        assert!(ready.is_some(), "node {id} never became ready");
    }

    /// `GET /v1/cluster` on node `id` (its own view).
    pub async fn view(&self, id: u64) -> Option<Value> {
        let url = format!("{}/v1/cluster", self.node(id).api);
        let response = self
            .client
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        response.json().await.ok()
    }

    /// Waits (up to 60 s) until the live nodes agree on a leader other than `not`;
    /// returns it.
    pub async fn wait_leader(&self, not: Option<u64>) -> u64 {
        let agreed = eventually(Duration::from_secs(60), || async {
            let mut seen = Vec::new();
            for node in &self.nodes {
                if node.child.is_none() || node.stopped {
                    continue;
                }
                let leader = self
                    .view(node.id)
                    .await
                    .and_then(|v| v["leader_id"].as_u64());
                seen.push(leader);
            }
            let first = (*seen.first()?)?;
            (Some(first) != not && seen.iter().all(|l| *l == Some(first))).then_some(first)
        })
        .await;
        agreed.expect("no agreed leader")
    }

    /// A request to node `id`: (status, JSON body or Null).
    pub async fn call(
        &self,
        id: u64,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        call(&self.client, &self.node(id).api, method, path, body).await
    }

    /// Keeps `lease` alive through node `id` every `period` until stopped.
    pub fn keep_alive_every(&self, id: u64, lease: &str, period: Duration) -> Keeper {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let client = self.client.clone();
        let base = self.node(id).api.clone();
        let path = format!("/v1/leases/{lease}:keepalive");
        let task = {
            let (stop, answers) = (stop.clone(), answers.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let (client, base, path, answers) =
                        (client.clone(), base.clone(), path.clone(), answers.clone());
                    tokio::spawn(async move {
                        let answer = call(&client, &base, reqwest::Method::POST, &path, None).await;
                        answers.lock().unwrap().push(answer);
                    });
                    // The keepalive cadence is what keeps the lease alive: not a wait.
                    tokio::time::sleep(period).await;
                }
            })
        };
        Keeper {
            stop,
            task,
            answers,
        }
    }

    /// An admin request (membership) to node `id`, with the cluster secret.
    pub async fn admin(
        &self,
        id: u64,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.node(id).api);
        let request = self
            .client
            .request(method, url)
            .header("baton-cluster-secret", SECRET);
        send(request, body).await
    }

    /// `POST path` with a JSON body on node `id`.
    pub async fn post(&self, id: u64, path: &str, body: Value) -> (u16, Value) {
        self.call(id, reqwest::Method::POST, path, Some(body)).await
    }

    /// `POST path` with a JSON body and an `Idempotency-Key` on node `id`:
    /// (status, JSON body or Null, whether the answer is a replay).
    pub async fn post_keyed(
        &self,
        id: u64,
        path: &str,
        key: &str,
        body: Value,
    ) -> (u16, Value, bool) {
        let request = self
            .client
            .post(format!("{}{path}", self.node(id).api))
            .header("idempotency-key", key)
            .json(&body);
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let replayed = response.headers().contains_key("idempotent-replayed");
                let body = response.json().await.unwrap_or(Value::Null);
                (status, body, replayed)
            }
            Err(_) => (0, Value::Null, false),
        }
    }

    /// `POST path` on node `id` in its own task (for requests that wait).
    pub fn spawn_post(
        &self,
        id: u64,
        path: &str,
        body: Value,
    ) -> tokio::task::JoinHandle<(u16, Value)> {
        let client = self.client.clone();
        let base = self.node(id).api.clone();
        let path = path.to_owned();
        tokio::spawn(
            async move { call(&client, &base, reqwest::Method::POST, &path, Some(body)).await },
        )
    }

    /// `GET path` on node `id`.
    pub async fn get(&self, id: u64, path: &str) -> (u16, Value) {
        self.call(id, reqwest::Method::GET, path, None).await
    }

    /// Creates a lease through node `id`.
    pub async fn lease(&self, id: u64, ttl_ms: u64) -> String {
        let (status, body) = self.post(id, "/v1/leases", json!({"ttl_ms": ttl_ms})).await;
        assert_eq!(status, 201, "{body}");
        body["lease_id"].as_str().unwrap().to_owned()
    }

    /// A gauge from node `id`'s `/metrics`.
    pub async fn metric(&self, id: u64, name: &str) -> f64 {
        metric(&self.client, &self.node(id).api, name).await
    }
}

/// An unlabelled sample from the `/metrics` of the node at `base`.
pub async fn metric(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    try_metric(client, base, name)
        .await
        .unwrap_or_else(|| panic!("no metric {name}"))
}

/// [`metric`], or `None` when the node does not answer or does not show it
/// (a gauge only the leader writes).
pub async fn try_metric(client: &reqwest::Client, base: &str, name: &str) -> Option<f64> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|value| value.trim().parse().ok())
}

/// The complete lines of the log file `log` (a running node may be half way
/// through the last), as text and each parsed as JSON (`--log-format json`).
pub fn json_lines(log: &std::path::Path) -> (String, Vec<Value>) {
    let mut text = std::fs::read_to_string(log).unwrap_or_default();
    text.truncate(text.rfind('\n').map_or(0, |end| end + 1));
    let lines = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    (text, lines)
}

/// The warnings in `lines` (from [`json_lines`]) whose message starts with
/// `message`.
pub fn warnings<'a>(lines: &'a [Value], message: &'a str) -> impl Iterator<Item = &'a Value> {
    lines.iter().filter(move |line| {
        line["level"] == "WARN"
            && line["fields"]["message"]
                .as_str()
                .is_some_and(|text| text.starts_with(message))
    })
}

/// An auth file (`--auth-file`) in a directory of its own, removed when
/// dropped: keep it alive as long as the nodes that read it.
pub struct AuthFile {
    _dir: tempfile::TempDir,
    /// The file's path, as the flag's value.
    pub arg: String,
}

impl AuthFile {
    /// Writes `yaml` (the auth file's contents) to a new temporary file.
    pub fn new(yaml: &str) -> AuthFile {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.yaml");
        std::fs::write(&path, yaml).unwrap();
        AuthFile {
            arg: path.display().to_string(),
            _dir: dir,
        }
    }
}

/// Writes a test CA, a node certificate for 127.0.0.1 and a client certificate
/// for `billing.client` with `baton dev certs`; returns their directory.
pub fn write_certs(dir: &std::path::Path) -> PathBuf {
    let certs = dir.join("certs");
    let status = Command::new(baton_bin())
        .args(["dev", "certs", "--out"])
        .arg(&certs)
        .args([
            "--node-names",
            "localhost,127.0.0.1",
            "--clients",
            "billing.client",
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "baton dev certs failed");
    certs
}

/// A request to `base`: (status, JSON body or Null). Transport errors are 0.
pub async fn call(
    client: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    send(client.request(method, format!("{base}{path}")), body).await
}

/// Sends `request` with `body` as JSON: (status, JSON body or Null). Transport
/// errors are 0.
async fn send(mut request: reqwest::RequestBuilder, body: Option<Value>) -> (u16, Value) {
    if let Some(body) = body {
        request = request.json(&body);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response.json().await.unwrap_or(Value::Null);
            (status, body)
        }
        Err(_) => (0, Value::Null),
    }
}

/// One server-sent event: (id, event name, data line).
pub type Frame = (u64, String, String);

/// Reads SSE frames (bookmarks included) from `response` until the stream ends or
/// a frame with `id >= until` that is not a bookmark arrives.
pub async fn sse_frames(response: &mut reqwest::Response, until: Option<u64>) -> Vec<Frame> {
    let mut buffer = Vec::new();
    let mut seen = Vec::new();
    loop {
        let chunk = tokio::time::timeout(Duration::from_secs(60), response.chunk())
            .await
            .expect("the stream stalled")
            .unwrap();
        let Some(chunk) = chunk else { return seen };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = buffer.drain(..end + 2).collect();
            let frame = String::from_utf8(frame).unwrap();
            let (mut id, mut event, mut data) = (0, String::new(), String::new());
            for line in frame.lines() {
                if let Some(value) = line.strip_prefix("id: ") {
                    id = value.parse().unwrap();
                } else if let Some(value) = line.strip_prefix("event: ") {
                    event = value.to_owned();
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data = value.to_owned();
                }
            }
            let done = event != "bookmark" && until.is_some_and(|u| id >= u);
            seen.push((id, event, data));
            if done {
                return seen;
            }
        }
    }
}

/// `GET url` as JSON (panics on a transport error: for tests only).
pub async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// Keepalives of one lease sent every period, each call in its own task (one
/// stuck on a paused node does not hold up the next).
pub struct Keeper {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    answers: Arc<Mutex<Vec<(u16, Value)>>>,
}

impl Keeper {
    /// The answers so far, in the order they came back.
    pub fn answers(&self) -> Vec<(u16, Value)> {
        self.answers.lock().unwrap().clone()
    }

    /// Stops sending; returns every answer that came back.
    pub async fn stop(self) -> Vec<(u16, Value)> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        self.answers.lock().unwrap().clone()
    }
}

/// A listener that keeps, as text, every request sent to it and never
/// answers: `(its base URL, what it got)`.
pub async fn recording_server() -> (String, Arc<Mutex<String>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(String::new()));
    let recorded = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let recorded = recorded.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0; 64 * 1024];
                while let Ok(read @ 1..) =
                    tokio::io::AsyncReadExt::read(&mut socket, &mut buffer).await
                {
                    let text = String::from_utf8_lossy(&buffer[..read]).into_owned();
                    recorded.lock().unwrap().push_str(&text);
                }
            });
        }
    });
    (base, seen)
}

/// A listener that answers every request with `307 Temporary Redirect` to
/// `location`, as a misconfigured address (an ingress, an http-to-https
/// redirector) would: its base URL.
pub async fn redirecting_server(location: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let answer = format!(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n"
    );
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0; 64 * 1024];
                let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut buffer).await;
                let _ = tokio::io::AsyncWriteExt::write_all(&mut socket, answer.as_bytes()).await;
            });
        }
    });
    base
}
