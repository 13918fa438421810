//! `baton-loadtest cluster`: a 3-member etcd and a 3-node Baton on loopback (fsync on
//! everywhere), `lock-cycle` and `lock-contended` against the leader of each in
//! alternation, and a "3-node" section in BENCHMARKS.md with the ratios.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use baton_chaos::ports::free_port;
use clap::Args;
use serde_json::{json, Value};

use crate::bench::{run_one, Ctx};
use crate::markdown::{summarize, Summary};
use crate::memory::upsert_section;
use crate::probe::FsyncProbe;
use crate::process::Server;
use crate::report::Report;
use crate::scenario::Scenario;

/// `cluster` options.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// The Baton server binary.
    #[arg(long)]
    pub baton_bin: PathBuf,
    /// The etcd binary (3.4).
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: PathBuf,
    /// Rounds per scenario and target (alternating Baton, etcd); medians are reported.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Measured seconds of each run.
    #[arg(long, default_value_t = 15.0)]
    pub duration_s: f64,
    /// lock-cycle clients.
    #[arg(long, default_value_t = 64)]
    pub lock_cycle_clients: usize,
    /// lock-contended clients.
    #[arg(long, default_value_t = 32)]
    pub lock_contended_clients: usize,
    /// Secret of the Baton cluster's Raft listeners.
    #[arg(long, default_value = "baton-loadtest-cluster-secret")]
    pub cluster_secret: String,
    /// Where the servers keep their data (a temporary directory is made inside).
    #[arg(long)]
    pub data_root: Option<PathBuf>,
    /// Where JSON reports go.
    #[arg(long, default_value = "loadtest/results")]
    pub results_dir: PathBuf,
    /// The Markdown file whose "3-node" section is written (the rest is kept).
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub out: PathBuf,
}

/// The marker name of this section in BENCHMARKS.md.
pub const SECTION: &str = "three-node";

/// One scenario's rounds on both clusters.
struct Pair {
    scenario: Scenario,
    clients: usize,
    baton: Vec<Report>,
    etcd: Vec<Report>,
    failures: Vec<String>,
}

/// Starts both clusters, runs the scenarios against their leaders, writes the section.
pub async fn cluster(args: ClusterArgs) -> anyhow::Result<()> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let root = args.data_root.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("baton-cluster-")
        .tempdir_in(&root)?;
    std::fs::create_dir_all(&args.results_dir)?;

    let mut etcds = start_etcd(&args, dir.path())?;
    let mut batons = start_baton(&args, dir.path())?;
    for s in etcds.iter_mut().chain(batons.iter_mut()) {
        s.wait_ready(Duration::from_secs(60))
            .await
            .with_context(|| format!("{} at {}", s.kind.name(), s.url))?;
    }
    let http = baton_chaos::client::pooled_http_client()
        .timeout(Duration::from_secs(5))
        .build()?;
    let etcd_leader = etcd_leader(&http, &etcds).await?;
    let baton_leader = baton_leader(&http, &batons).await?;
    eprintln!(
        "cluster: etcd leader {}, Baton leader {}",
        etcds[etcd_leader].url, batons[baton_leader].url
    );

    let fsyncs = FsyncProbe::available();
    let ctx = Ctx {
        count_fsyncs: fsyncs,
        results_dir: &args.results_dir,
    };
    let mut pairs = Vec::new();
    for (scenario, clients) in [
        (Scenario::LockCycle, args.lock_cycle_clients),
        (Scenario::LockContended, args.lock_contended_clients),
    ] {
        let mut pair = Pair {
            scenario,
            clients,
            baton: vec![],
            etcd: vec![],
            failures: vec![],
        };
        for round in 0..args.rounds.max(1) {
            for server in [&batons[baton_leader], &etcds[etcd_leader]] {
                let tag = format!("3n-r{}", round + 1);
                let result = run_one(
                    &ctx,
                    scenario,
                    server,
                    (clients, args.duration_s),
                    &tag,
                    |_| {},
                )
                .await;
                match result {
                    Ok(r) if server.kind == crate::target::TargetKind::Baton => pair.baton.push(r),
                    Ok(r) => pair.etcd.push(r),
                    Err(e) => pair.failures.push(format!(
                        "{} on {} ({tag}): {e:#}",
                        scenario.name(),
                        server.kind.name()
                    )),
                }
            }
        }
        pairs.push(pair);
    }
    // A leader change mid-run would mean some runs measured a follower's forwarding.
    let etcd_after = etcd_leader_checked(&http, &etcds).await;
    let baton_after = baton_leader_checked(&http, &batons).await;
    let stable = format!(
        "Leaders after the runs: etcd {}, Baton {}.",
        same(etcd_after, etcd_leader),
        same(baton_after, baton_leader)
    );
    drop(batons);
    drop(etcds);

    let date = String::from_utf8_lossy(
        &std::process::Command::new("date")
            .args(["-u", "+%Y-%m-%d %H:%M UTC"])
            .output()?
            .stdout,
    )
    .trim()
    .to_owned();
    let section = render(&args, &pairs, &command, &date, &stable, fsyncs);
    let old = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(&args.out, upsert_section(&old, SECTION, &section))?;
    eprintln!(
        "cluster: wrote the 3-node section into {}",
        args.out.display()
    );
    Ok(())
}

fn same(after: anyhow::Result<usize>, before: usize) -> String {
    match after {
        Ok(a) if a == before => "unchanged".into(),
        Ok(a) => format!("**changed** (node index {before} -> {a})"),
        Err(e) => format!("unknown ({e:#})"),
    }
}

/// Three etcd members of one new cluster, each on its own ports and data dir.
fn start_etcd(args: &ClusterArgs, dir: &std::path::Path) -> anyhow::Result<Vec<Server>> {
    let ports = (0..3)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let initial = ports
        .iter()
        .enumerate()
        .map(|(i, (_, peer))| format!("e{}=http://127.0.0.1:{peer}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    ports
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            Server::etcd_member(&args.etcd_bin, dir, &format!("e{}", i + 1), p, &initial)
        })
        .collect()
}

/// Three Baton nodes with static `--peers` and a `--cluster-secret`.
fn start_baton(args: &ClusterArgs, dir: &std::path::Path) -> anyhow::Result<Vec<Server>> {
    baton_nodes(dir, &args.cluster_secret, &[])?
        .iter()
        .map(|node| node.start(&args.baton_bin))
        .collect()
}

/// How to start (and restart) one node of a 3-node Baton cluster.
#[derive(Debug, Clone)]
pub struct BatonNode {
    /// Its data directory.
    pub data: PathBuf,
    /// Its log file (appended across restarts).
    pub log: PathBuf,
    /// Client API and raft ports.
    pub ports: (u16, u16),
    /// Its flags beyond the listeners and the data directory.
    pub flags: Vec<String>,
}

impl BatonNode {
    /// Starts the node from `bin`.
    pub fn start(&self, bin: &std::path::Path) -> anyhow::Result<Server> {
        Server::baton_with(bin, &self.data, &self.log, self.ports, &self.flags)
    }
}

/// Three nodes of one cluster under `dir`, with static `--peers`, `secret` on
/// their raft listeners and `extra` flags each.
pub fn baton_nodes(
    dir: &std::path::Path,
    secret: &str,
    extra: &[String],
) -> anyhow::Result<Vec<BatonNode>> {
    let ports = (0..3)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let peers = ports
        .iter()
        .enumerate()
        .map(|(i, (_, raft))| format!("{}=http://127.0.0.1:{raft}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    Ok(ports
        .iter()
        .enumerate()
        .map(|(i, &ports)| {
            let id = i + 1;
            let mut flags = vec![
                "--node-id".to_owned(),
                id.to_string(),
                "--peers".to_owned(),
                peers.clone(),
                "--cluster-secret".to_owned(),
                secret.to_owned(),
                // Loopback only, and etcd runs without TLS too.
                "--insecure-plaintext-peers".to_owned(),
            ];
            flags.extend_from_slice(extra);
            BatonNode {
                data: dir.join(format!("baton-{id}-data")),
                log: dir.join(format!("baton-{id}.log")),
                ports,
                flags,
            }
        })
        .collect())
}

/// Index of etcd's leader among `members`, waiting up to 30 s for one.
async fn etcd_leader(http: &reqwest::Client, members: &[Server]) -> anyhow::Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match etcd_leader_checked(http, members).await {
            Ok(i) => return Ok(i),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// `POST /v3/maintenance/status` on each member: the one whose own id is the leader.
async fn etcd_leader_checked(http: &reqwest::Client, members: &[Server]) -> anyhow::Result<usize> {
    for (i, m) in members.iter().enumerate() {
        let v: Value = http
            .post(format!("{}/v3/maintenance/status", m.url))
            .json(&json!({}))
            .send()
            .await?
            .json()
            .await?;
        if is_etcd_leader(&v) {
            return Ok(i);
        }
    }
    bail!("no etcd member says it is the leader")
}

/// Whether a maintenance status answer comes from the leader (ids are JSON strings).
fn is_etcd_leader(status: &Value) -> bool {
    let own = &status["header"]["member_id"];
    let leader = &status["leader"];
    !own.is_null() && own == leader
}

/// Index of Baton's leader among `nodes`, waiting up to 30 s for one.
pub async fn baton_leader(http: &reqwest::Client, nodes: &[Server]) -> anyhow::Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match baton_leader_checked(http, nodes).await {
            Ok(i) => return Ok(i),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// `GET /v1/cluster`: the member whose id is `leader_id`, matched by `api_addr`.
async fn baton_leader_checked(http: &reqwest::Client, nodes: &[Server]) -> anyhow::Result<usize> {
    let v: Value = http
        .get(format!("{}/v1/cluster", nodes[0].url))
        .send()
        .await?
        .json()
        .await?;
    let addr = leader_api_addr(&v).context("no leader in GET /v1/cluster")?;
    nodes
        .iter()
        .position(|n| n.url.trim_end_matches('/') == addr.trim_end_matches('/'))
        .with_context(|| format!("leader {addr} is none of the started nodes"))
}

/// The `api_addr` of the member whose `id` is `leader_id`.
fn leader_api_addr(cluster: &Value) -> Option<String> {
    let leader = cluster["leader_id"].as_u64()?;
    cluster["members"]
        .as_array()?
        .iter()
        .find(|m| m["id"].as_u64() == Some(leader))?["api_addr"]
        .as_str()
        .map(str::to_owned)
}

fn ms(us: f64) -> String {
    format!("{:.2}", us / 1000.0)
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "n/a".into()
    }
}

fn cpu(s: &Summary) -> String {
    s.cpu_us_per_op()
        .map(|c| format!("{c:.0}"))
        .unwrap_or_else(|| "n/a".into())
}

/// The Markdown section.
fn render(
    args: &ClusterArgs,
    pairs: &[Pair],
    command: &str,
    date: &str,
    stable: &str,
    fsyncs: bool,
) -> String {
    let mut out = format!(
        "## 3-node: Baton / etcd\n\n\
Generated by `baton-loadtest cluster` on {date}. Both as 3-member clusters on this one \
machine, on loopback, fsync on: etcd started with `--initial-cluster` and \
`--initial-cluster-state new`, Baton with `baton serve --peers ... --cluster-secret ...`, \
each member with its own data dir. The clients talk to the leader of each (etcd's from \
`/v3/maintenance/status`, Baton's `leader_id` from `GET /v1/cluster`); {rounds} round(s) \
of {dur} s per scenario and target, alternating Baton and etcd; medians over the rounds. \
Server CPU is the leader's only. The 6 server processes and the client share the \
machine's cores, so these numbers are lower than the single-node ones above. {stable}\n\n\
Command:\n\n```\n{command}\n```\n\n\
| scenario | clients | Baton ops/s | etcd ops/s | throughput ratio | Baton p99 ms | etcd p99 ms | p99 ratio | leader CPU µs/op Baton | etcd |\n\
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        rounds = args.rounds.max(1),
        dur = args.duration_s,
    );
    let mut detail = String::from(
        "\n| scenario | target | rounds | ops/s | ops/s per round | p50 ms | p99 ms | p99.9 ms | max ms | errors | leader CPU (cores) | leader fsyncs/s |\n\
|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut failures = Vec::new();
    for p in pairs {
        failures.extend(p.failures.iter().cloned());
        let (Some(b), Some(e)) = (summarize(&p.baton), summarize(&p.etcd)) else {
            out.push_str(&format!(
                "| {} | {} | failed | | | | | | | |\n",
                p.scenario.name(),
                p.clients
            ));
            continue;
        };
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | **{}** | {} | {} | {} | {} | {} |\n",
            p.scenario.name(),
            p.clients,
            b.throughput,
            e.throughput,
            ratio(b.throughput, e.throughput),
            ms(b.p99),
            ms(e.p99),
            ratio(b.p99, e.p99),
            cpu(&b),
            cpu(&e)
        ));
        for (name, s, reports) in [("baton", &b, &p.baton), ("etcd", &e, &p.etcd)] {
            let per_round = reports
                .iter()
                .map(|r| format!("{:.0}", r.throughput_per_s))
                .collect::<Vec<_>>()
                .join(", ");
            detail.push_str(&format!(
                "| {} | {name} | {} | {:.0} | {per_round} | {} | {} | {} | {} | {} | {} | {} |\n",
                p.scenario.name(),
                s.rounds,
                s.throughput,
                ms(s.p50),
                ms(s.p99),
                ms(s.p999),
                ms(s.max),
                s.errors,
                s.server_cpu
                    .map(|c| format!("{c:.2}"))
                    .unwrap_or_else(|| "n/a".into()),
                s.fsyncs_per_s
                    .map(|f| format!("{f:.0}"))
                    .unwrap_or_else(|| "n/a".into()),
            ));
        }
    }
    out.push_str(&detail);
    if !fsyncs {
        out.push_str("\nfsyncs were not counted (perf cannot count syscall tracepoints here).\n");
    }
    if !failures.is_empty() {
        out.push_str("\nRuns that failed:\n\n");
        for f in failures {
            out.push_str(&format!("- {f}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_leader_is_the_member_whose_id_is_the_leader() {
        let leader = json!({"header": {"member_id": "42"}, "leader": "42"});
        let follower = json!({"header": {"member_id": "7"}, "leader": "42"});
        assert!(is_etcd_leader(&leader));
        assert!(!is_etcd_leader(&follower));
        assert!(!is_etcd_leader(&json!({})));
    }

    #[test]
    fn baton_leader_address_comes_from_members() {
        let v = json!({"leader_id": 2, "members": [
            {"id": 1, "api_addr": "http://127.0.0.1:1"},
            {"id": 2, "api_addr": "http://127.0.0.1:2"}]});
        assert_eq!(leader_api_addr(&v).as_deref(), Some("http://127.0.0.1:2"));
        assert_eq!(
            leader_api_addr(&json!({"leader_id": null, "members": []})),
            None
        );
    }
}
