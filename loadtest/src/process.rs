//! Starts and stops the servers under test (one etcd, one Baton) on free loopback
//! ports with their data in a temporary directory.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::target::TargetKind;

/// A free loopback port (bound then released; the caller binds it right away).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

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
        let port = free_port()?;
        let data = dir.join("baton-data");
        let log = dir.join("baton.log");
        let child = Command::new(bin)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(&data)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self {
            kind: TargetKind::Baton,
            url: format!("http://127.0.0.1:{port}"),
            child,
            log,
        })
    }

    /// Starts a single-member etcd from `bin` with its data under `dir`: default
    /// durability (fsync on), an 8 GiB backend quota so long runs do not hit the alarm.
    pub fn etcd(bin: &Path, dir: &Path) -> anyhow::Result<Self> {
        let (client, peer) = (free_port()?, free_port()?);
        let log = dir.join("etcd.log");
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new(bin)
            .args(["--name", "bench"])
            .arg("--data-dir")
            .arg(dir.join("etcd-data"))
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
            .args(["--initial-cluster", &format!("bench={peer_url}")])
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

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the server answers ready (`/readyz` 200 for Baton, `/health`
    /// `"health":"true"` for etcd).
    pub async fn wait_ready(&mut self, within: Duration) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
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

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
