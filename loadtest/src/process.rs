//! Starts and stops the servers under test (one etcd, one Baton) on free loopback
//! ports with their data in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use baton_chaos::ports::free_port;

use crate::target::TargetKind;

/// A running server, killed on drop.
pub struct Server {
    /// Which kind.
    pub kind: TargetKind,
    /// Base URL of its client API.
    pub url: String,
    child: Child,
    /// Where its log goes.
    pub log: PathBuf,
}

impl Server {
    /// Starts `baton serve` from `bin` with its data under `dir`.
    pub fn baton(bin: &Path, dir: &Path) -> anyhow::Result<Self> {
        Self::baton_in(bin, dir, "baton", &[])
    }

    /// Starts `baton serve` from `bin` with `extra` flags, on free ports, its data in
    /// `dir/<name>-data` and its log in `dir/<name>.log`.
    pub fn baton_in(bin: &Path, dir: &Path, name: &str, extra: &[String]) -> anyhow::Result<Self> {
        Self::baton_with(
            bin,
            &dir.join(format!("{name}-data")),
            &dir.join(format!("{name}.log")),
            (free_port()?, free_port()?),
            extra,
        )
    }

    /// Starts `baton serve` from `bin` with its client API on `port` and its raft
    /// listener on `raft_port`, its data in `data`, its log in `log` (appended, so a
    /// restart keeps the first run's lines) and `extra` flags (cluster membership,
    /// limits).
    ///
    /// Both ports are explicit: a server left on its default peer port (7879)
    /// collides with a `make run` server on the same machine (issue 12).
    pub fn baton_with(
        bin: &Path,
        data: &Path,
        log: &Path,
        (port, raft_port): (u16, u16),
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let child = server_command(bin)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--raft-listen", &format!("127.0.0.1:{raft_port}")])
            .arg("--data-dir")
            .arg(data)
            .args(extra)
            // Baton logs to stdout (`BATON_LOG`, info by default): into the log
            // file too, so that a run's own account of itself is kept.
            .stdout(stderr.try_clone()?)
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self {
            kind: TargetKind::Baton,
            url: format!("http://127.0.0.1:{port}"),
            child,
            log: log.to_owned(),
        })
    }

    /// Starts a single-member etcd from `bin` with its data under `dir`: default
    /// durability (fsync on), an 8 GiB backend quota so long runs do not hit the alarm.
    pub fn etcd(bin: &Path, dir: &Path) -> anyhow::Result<Self> {
        let (client, peer) = (free_port()?, free_port()?);
        let cluster = format!("bench=http://127.0.0.1:{peer}");
        Self::etcd_member(bin, dir, "bench", (client, peer), &cluster)
    }

    /// Starts one member `name` of a new etcd cluster (`--initial-cluster-state new`)
    /// on loopback ports `(client, peer)`, its data in `dir/<name>-data` (fsync on,
    /// the default), `initial_cluster` being `name=http://127.0.0.1:peer,...`.
    pub fn etcd_member(
        bin: &Path,
        dir: &Path,
        name: &str,
        (client, peer): (u16, u16),
        initial_cluster: &str,
    ) -> anyhow::Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let data = if name == "bench" {
            dir.join("etcd-data")
        } else {
            dir.join(format!("{name}-data"))
        };
        let child = server_command(bin)
            .args(["--name", name])
            .arg("--data-dir")
            .arg(data)
            .args([
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "baton-loadtest"])
            .args(["--quota-backend-bytes", "8589934592"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self {
            kind: TargetKind::Etcd,
            url: client_url,
            child,
            log,
        })
    }

    /// Kills the process with SIGKILL (no shutdown of any kind) and reaps it.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Resident set size now, bytes (`VmRSS` in `/proc/<pid>/status`).
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        rss_bytes(self.pid())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the server answers ready (`/readyz` 200 for Baton, `/health`
    /// `"health":"true"` for etcd).
    pub async fn wait_ready(&mut self, within: Duration) -> anyhow::Result<()> {
        let http = baton_chaos::client::pooled_http_client().build()?;
        let url = match self.kind {
            TargetKind::Baton => format!("{}/readyz", self.url),
            TargetKind::Etcd => format!("{}/health", self.url),
        };
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                bail!(
                    "{} exited ({status}) before it was ready:\n{log}",
                    self.kind.name()
                );
            }
            if let Ok(response) = http.get(&url).send().await {
                let ok = response.status().is_success();
                let body = response.text().await.unwrap_or_default();
                if ok && (self.kind == TargetKind::Baton || body.contains("true")) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "{} at {} not ready within {within:?}",
                    self.kind.name(),
                    self.url
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The `--version` line of a server binary.
    pub fn version(kind: TargetKind, bin: &Path) -> String {
        let out = Command::new(bin).arg("--version").output();
        let text = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        match kind {
            TargetKind::Baton => text.lines().next().unwrap_or("unknown").trim().to_owned(),
            TargetKind::Etcd => text
                .lines()
                .map(str::trim)
                .filter(|l| l.starts_with("etcd Version") || l.starts_with("Go Version"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// The command that starts the server `bin`: through util-linux's `setpriv
/// --pdeathsig KILL` where it works, so that the kernel kills the server when the
/// thread that started it ends, even when the tool is killed with SIGKILL (which
/// it cannot catch: `Drop` and the stop signals cover everything else). `setpriv`
/// then executes `bin` in its own process, so the child's pid is the server's.
/// Setting the signal in the child ourselves would need `pre_exec`, which is
/// `unsafe` (forbidden in this workspace). The servers are started from the
/// runtime's long-lived threads (the main thread and tokio's workers, never its
/// blocking pool, whose idle threads end), so the signal only comes with the tool's
/// end. Without `setpriv`, the server is started directly.
fn server_command(bin: &Path) -> Command {
    static SETPRIV: OnceLock<bool> = OnceLock::new();
    let works = *SETPRIV.get_or_init(|| {
        Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    // A missing binary is left to `spawn`, whose error names it.
    if works && bin.is_file() {
        let mut command = Command::new("setpriv");
        command.args(["--pdeathsig", "KILL", "--"]).arg(bin);
        command
    } else {
        Command::new(bin)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident set size of process `pid`, bytes (`VmRSS` in `/proc/<pid>/status`).
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_vm_rss(&status).with_context(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// `VmRSS:   1234 kB` as bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tbaton\nVmPeak:\t  999 kB\nVmRSS:\t   2048 kB\nThreads: 4\n";
        assert_eq!(parse_vm_rss(status), Some(2048 * 1024));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
    }

    #[test]
    fn own_rss_is_positive() {
        assert!(rss_bytes(std::process::id()).expect("own /proc status") > 0);
    }

    /// The `baton` binary of the same workspace build (`target/<profile>/baton`,
    /// beside the `deps/` folder this test runs from); `BATON_TEST_BIN` overrides.
    fn baton_bin() -> PathBuf {
        if let Some(bin) = std::env::var_os("BATON_TEST_BIN") {
            return bin.into();
        }
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>/deps/<test>");
        profile_dir.join("baton")
    }

    /// Issue 12: the smoke's Baton took the default peer port, so `make test` failed
    /// while a `make run` server was up. Whoever holds 7878 and 7879 (this test, or a
    /// server someone is running), a server the load test starts must come up.
    #[tokio::test]
    async fn a_server_starts_while_the_default_ports_are_taken() {
        let _held: Vec<TcpListener> = [7878_u16, 7879]
            .into_iter()
            .filter_map(|port| TcpListener::bind(("127.0.0.1", port)).ok())
            .collect();
        for port in [7878_u16, 7879] {
            assert!(
                TcpListener::bind(("127.0.0.1", port)).is_err(),
                "port {port} should be taken for this test"
            );
        }
        let bin = baton_bin();
        assert!(bin.exists(), "{} not built", bin.display());
        let dir = tempfile::tempdir().expect("temp dir");
        let mut server = Server::baton(&bin, dir.path()).expect("spawn baton");
        server
            .wait_ready(Duration::from_secs(60))
            .await
            .expect("ready on free ports");
        assert!(!server.url.ends_with(":7878"), "{}", server.url);
    }
}
