//! `baton-loadtest snapshot-cluster`: heartbeats while a 3-node cluster builds and
//! installs snapshots of a large state (issue 19: "with 1,000,000 locks held,
//! building and installing a snapshot never stops heartbeats for more than a
//! quarter of the election timeout and causes no election").
//!
//! Three nodes on loopback (fsync on). One follower is killed, `--held` locks are
//! acquired through the leader (`--locks-per-lease` on each lease), then lock-cycle
//! runs against the leader for `--duration-s` while the leader (and the live
//! follower) build snapshots every `--snapshot-every` entries (`--snapshot-log-ratio
//! 0` by default: the worst case, a build every few seconds), and after
//! `--restart-after-s` the killed follower comes back: its log is behind the
//! leader's purged one, so it catches up by installing the leader's snapshot.
//! Each follower's `baton_raft_leader_contact_gap_seconds` (time between accepted
//! leader RPCs) over the window says how long heartbeats stopped; the leader's term
//! before and after says whether an election happened.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use serde_json::Value;

use crate::cluster::{baton_leader, baton_nodes};
use crate::exposition::{metric_sum, scrape};
use crate::fill::{fill, Fill};
use crate::output::OutputArgs;
use crate::process::Server;
use crate::report::Report;
use crate::scenario::{self, RunArgs, Scenario};
use crate::target::{Target, TargetKind};

/// `snapshot-cluster` options.
#[derive(Debug, Clone, Args)]
pub struct SnapshotClusterArgs {
    /// The Baton server binary.
    #[arg(long)]
    pub baton_bin: PathBuf,
    /// Locks held through the window (rounded down to whole leases).
    #[arg(long, default_value_t = 1_000_000)]
    pub held: usize,
    /// Locks on each of their leases.
    #[arg(long, default_value_t = 10)]
    pub locks_per_lease: usize,
    /// The nodes' `--snapshot-every`.
    #[arg(long, default_value_t = 20_000)]
    pub snapshot_every: u64,
    /// The nodes' `--snapshot-log-ratio` (0: every `--snapshot-every` entries).
    #[arg(long, default_value_t = 0.0)]
    pub snapshot_log_ratio: f64,
    /// The nodes' `--election-timeout-ms`; a gap above a quarter of it is counted.
    #[arg(long, default_value_t = 500)]
    pub election_timeout_ms: u64,
    /// Lock-cycle clients against the leader during the window.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Seconds of the window.
    #[arg(long, default_value_t = 60.0)]
    pub duration_s: f64,
    /// Seconds into the window at which the killed follower restarts.
    #[arg(long, default_value_t = 10.0)]
    pub restart_after_s: f64,
    /// Concurrent requests while filling.
    #[arg(long, default_value_t = 64)]
    pub fill_clients: usize,
    /// Data root, JSON report and Markdown section.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The marker name of this section in BENCHMARKS.md.
pub const SECTION: &str = "snapshot-cluster";

/// The leader-contact histogram, as each follower exposes it.
const CONTACT_GAP: &str = "baton_raft_leader_contact_gap_seconds";

/// One node over the window.
#[derive(Debug, Clone, Serialize)]
pub struct NodeWindow {
    /// `leader`, `follower` or `restarted follower`.
    pub role: String,
    /// Leader-contact gaps measured (RPCs from the leader minus one).
    pub gaps: u64,
    /// Of those, longer than a quarter of the election timeout.
    pub gaps_over_quarter: u64,
    /// The smallest bucket bound that all gaps fit under, ms (`None`: no gap, or
    /// beyond the last bound).
    pub longest_gap_at_most_ms: Option<f64>,
    /// Snapshots it built during the window, and their mean build time.
    pub snapshots_built: u64,
    /// Mean seconds per build.
    pub build_s: Option<f64>,
    /// Snapshots it installed during the window.
    pub snapshots_installed: u64,
    /// Size of its last snapshot, bytes.
    pub snapshot_bytes: Option<u64>,
}

/// What `snapshot-cluster` measured.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotClusterReport {
    /// The Baton version measured.
    pub baton_version: String,
    /// Locks held, and the leases holding them.
    pub held: usize,
    /// Leases holding them.
    pub leases: usize,
    /// Seconds to fill them through the leader (one follower down).
    pub fill_s: f64,
    /// The nodes' snapshot flags.
    pub snapshot_every: u64,
    /// The nodes' `--snapshot-log-ratio`.
    pub snapshot_log_ratio: f64,
    /// The election timeout and the gap the target allows (a quarter of it), ms.
    pub election_timeout_ms: u64,
    /// A quarter of the election timeout, ms.
    pub allowed_gap_ms: u64,
    /// Leader's term before and after the window (equal: no election).
    pub term_before: u64,
    /// Leader's term after the window.
    pub term_after: u64,
    /// Whether the same node led after the window.
    pub same_leader: bool,
    /// Seconds into the window at which the killed follower restarted.
    pub restart_after_s: f64,
    /// Seconds from the follower's restart until it had applied what the leader
    /// had when it restarted (`None`: not within the window).
    pub catch_up_s: Option<f64>,
    /// Per node.
    pub nodes: Vec<NodeWindow>,
    /// The lock-cycle run against the leader over the window.
    pub run: Report,
    /// Highest per-interval p99 of that run, µs.
    pub max_interval_p99_us: u64,
}

/// Runs the measurement and writes its report and section.
pub async fn snapshot_cluster(args: SnapshotClusterArgs) -> anyhow::Result<()> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = measure(&args).await?;
    args.output
        .write(&report, SECTION, || render(&report, &command))?;
    Ok(())
}

async fn measure(args: &SnapshotClusterArgs) -> anyhow::Result<SnapshotClusterReport> {
    let dir = args.output.temp_dir("baton-snapshot-cluster-")?;
    // Whole leases: `--held` rounded down to a multiple of `--locks-per-lease`.
    let leases = (args.held / args.locks_per_lease.max(1)).max(1);
    let ttl_ms = 3_600_000;
    let flags = [
        ("--snapshot-every", args.snapshot_every.to_string()),
        ("--snapshot-log-ratio", args.snapshot_log_ratio.to_string()),
        (
            "--election-timeout-ms",
            args.election_timeout_ms.to_string(),
        ),
        ("--max-leases", (leases + args.clients + 1_000).to_string()),
        (
            "--max-holdings-per-lease",
            args.locks_per_lease.max(1).to_string(),
        ),
        ("--max-ttl-ms", ttl_ms.to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_owned(), value])
    .collect::<Vec<_>>();
    let specs = baton_nodes(dir.path(), "baton-loadtest-snapshot-secret", &flags)?;
    let mut nodes = specs
        .iter()
        .map(|spec| spec.start(&args.baton_bin))
        .collect::<anyhow::Result<Vec<Server>>>()?;
    for node in &mut nodes {
        node.wait_ready(Duration::from_secs(60)).await?;
    }
    let http = baton_chaos::client::pooled_http_client().build()?;
    let leader = baton_leader(&http, &nodes).await?;
    let down = (0..3).find(|&i| i != leader).expect("three nodes");
    let live = (0..3)
        .find(|&i| i != leader && i != down)
        .expect("three nodes");
    nodes[down].kill9()?;
    let leader_url = nodes[leader].url.clone();

    let target = Target::new(TargetKind::Baton, &leader_url, args.fill_clients + 16)?;
    let started = Instant::now();
    let per_lease = args.locks_per_lease.max(1);
    let held = leases * per_lease;
    let plan = Fill {
        leases,
        locks_per_lease: per_lease,
        ttl_ms,
        clients: args.fill_clients,
        label: "snapshot-cluster",
    };
    fill(&target, plan, |i, k| {
        format!("snap/{:08}", i * per_lease + k)
    })
    .await
    .context("filling")?;
    let fill_s = started.elapsed().as_secs_f64();
    eprintln!("snapshot-cluster: {held} locks on {leases} leases in {fill_s:.1} s");

    let term_before = cluster_view(&http, &leader_url).await?["term"]
        .as_u64()
        .unwrap_or(0);
    let before = [
        scrape(&http, &nodes[leader].url).await,
        scrape(&http, &nodes[live].url).await,
    ];
    let mut run = RunArgs::new(Scenario::LockCycle, TargetKind::Baton, &leader_url);
    run.clients = args.clients;
    run.duration_s = Some(args.duration_s);
    // Beyond the window: lock-cycle does not keep its leases alive, and on a
    // slow run the window's last cycles came after a 60 s lease had expired.
    run.ttl_ms = ((args.duration_s + 60.0) * 1000.0) as u64;
    run.server_pid = Some(nodes[leader].pid());
    run.no_progress = true;
    let restart = async {
        tokio::time::sleep(Duration::from_secs_f64(args.restart_after_s)).await;
        let goal = cluster_view(&http, &leader_url).await?["applied_revision"]
            .as_u64()
            .unwrap_or(0);
        let restarted_at = Instant::now();
        let server = specs[down].start(&args.baton_bin)?;
        let url = server.url.clone();
        let window_end = restarted_at + Duration::from_secs_f64(args.duration_s);
        let mut caught_up = None;
        while Instant::now() < window_end {
            let applied = cluster_view(&http, &url)
                .await
                .ok()
                .and_then(|view| view["applied_revision"].as_u64());
            if applied.is_some_and(|applied| applied >= goal) {
                caught_up = Some(restarted_at.elapsed().as_secs_f64());
                eprintln!("snapshot-cluster: the restarted follower caught up in {caught_up:?} s");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::Ok((server, caught_up))
    };
    let (report, restarted) = tokio::join!(scenario::run(&run), restart);
    let report = report?;
    let (restarted, catch_up_s) = restarted?;
    nodes[down] = restarted;

    let after_view = cluster_view(&http, &leader_url).await?;
    let term_after = after_view["term"].as_u64().unwrap_or(0);
    let same_leader = after_view["leader_id"] == after_view["node_id"];
    let allowed_gap_ms = args.election_timeout_ms / 4;
    let mut windows = Vec::new();
    for (index, role, before) in [
        (leader, "leader", before[0].as_deref()),
        (live, "follower", before[1].as_deref()),
        (down, "restarted follower", None),
    ] {
        let after = scrape(&http, &nodes[index].url).await;
        windows.push(node_window(
            role,
            before,
            after.as_deref().unwrap_or_default(),
            allowed_gap_ms,
        ));
    }
    let max_interval_p99_us = report.timeline.iter().map(|p| p.p99_us).max().unwrap_or(0);
    let result = SnapshotClusterReport {
        baton_version: Server::version(TargetKind::Baton, &args.baton_bin),
        held,
        leases,
        fill_s,
        snapshot_every: args.snapshot_every,
        snapshot_log_ratio: args.snapshot_log_ratio,
        election_timeout_ms: args.election_timeout_ms,
        allowed_gap_ms,
        term_before,
        term_after,
        same_leader,
        restart_after_s: args.restart_after_s,
        catch_up_s,
        nodes: windows,
        run: report,
        max_interval_p99_us,
    };
    eprintln!(
        "snapshot-cluster: term {} -> {}, caught up after {:?} s, nodes {:?}",
        result.term_before, result.term_after, result.catch_up_s, result.nodes
    );
    // Where the time went: the nodes' own lines about snapshots, and their
    // warnings (late heartbeats, slow appends on either side of the wire);
    // their logs go with the temporary directory.
    for (index, node) in nodes.iter().enumerate() {
        let log = std::fs::read_to_string(&node.log).unwrap_or_default();
        for line in log
            .lines()
            .filter(|l| l.contains("snapshot") || l.contains(" WARN "))
        {
            eprintln!("node {}: {line}", index + 1);
        }
    }
    drop(nodes);
    Ok(result)
}

/// `GET /v1/cluster` of the node at `base`.
async fn cluster_view(http: &reqwest::Client, base: &str) -> anyhow::Result<Value> {
    Ok(http
        .get(format!("{base}/v1/cluster"))
        .timeout(Duration::from_secs(5))
        .send()
        .await?
        .json()
        .await?)
}

/// What one node did between the scrapes `before` (`None`: it started in the
/// window) and `after`.
fn node_window(role: &str, before: Option<&str>, after: &str, allowed_gap_ms: u64) -> NodeWindow {
    let delta = |name: &str| {
        let was = before.and_then(|t| metric_sum(t, name)).unwrap_or(0.0);
        metric_sum(after, name).map_or(0.0, |now| (now - was).max(0.0))
    };
    let buckets = |text: Option<&str>| text.map(|t| buckets(t, CONTACT_GAP)).unwrap_or_default();
    let (now, was) = (buckets(Some(after)), buckets(before));
    let gaps: Vec<(f64, u64)> = now
        .iter()
        .map(|&(le, n)| {
            let earlier = was.iter().find(|(l, _)| *l == le).map_or(0, |(_, n)| *n);
            (le, n.saturating_sub(earlier))
        })
        .collect();
    let total = gaps.last().map_or(0, |(_, n)| *n);
    let allowed_s = allowed_gap_ms as f64 / 1000.0;
    let within = gaps
        .iter()
        .filter(|(le, _)| *le <= allowed_s)
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0);
    let longest = gaps
        .iter()
        .find(|(_, n)| *n == total)
        .map(|(le, _)| *le * 1000.0)
        .filter(|ms| ms.is_finite() && total > 0);
    let built = delta("baton_snapshots_built_total") as u64;
    let build_count = delta("baton_snapshot_build_seconds_count");
    NodeWindow {
        role: role.to_owned(),
        gaps: total,
        gaps_over_quarter: total - within,
        longest_gap_at_most_ms: longest,
        snapshots_built: built,
        build_s: (build_count > 0.0)
            .then(|| delta("baton_snapshot_build_seconds_sum") / build_count),
        snapshots_installed: delta("baton_snapshots_installed") as u64,
        snapshot_bytes: metric_sum(after, "baton_snapshot_bytes").map(|b| b as u64),
    }
}

/// The cumulative buckets `(le in seconds, count)` of histogram `name` (one
/// unlabelled series), `+Inf` last as infinity.
fn buckets(exposition: &str, name: &str) -> Vec<(f64, u64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    exposition
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (le, value) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, value.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// `n` with a comma between each group of three digits, as the rest of
/// BENCHMARKS.md writes counts.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn render(report: &SnapshotClusterReport, command: &str) -> String {
    let ms = |us: u64| format!("{:.1}", us as f64 / 1000.0);
    let mut out = format!(
        "### Snapshots in a 3-node cluster: heartbeats and elections\n\n\
Generated by `{command}` ({version}). Three nodes on loopback, fsync on, \
`--snapshot-every {every} --snapshot-log-ratio {ratio} --election-timeout-ms {timeout}`. \
One follower was killed, {held} locks on {leases} leases were acquired through the leader \
in {fill:.0} s, then lock-cycle ran against the leader ({clients} clients, {dur:.0} s) while \
the nodes built snapshots of that state and, {restart:.0} s in, the killed follower came back \
behind the leader's purged log and caught up by installing its snapshot.\n\n\
A gap is the time a follower went between two accepted RPCs of its leader (appends, \
idle heartbeats every 90 ms with the default `--heartbeat-ms 60`, snapshot chunks), from `baton_raft_leader_contact_gap_seconds`; \
the target allows {allowed} ms (a quarter of the election timeout).\n\n\
| node | gaps | over {allowed} ms | longest gap at most | snapshots built | mean build | installed | snapshot size |\n\
|---|---:|---:|---:|---:|---:|---:|---:|\n",
        version = report.baton_version,
        every = report.snapshot_every,
        ratio = report.snapshot_log_ratio,
        timeout = report.election_timeout_ms,
        held = grouped(report.held as u64),
        leases = grouped(report.leases as u64),
        fill = report.fill_s,
        clients = report.run.clients,
        dur = report.run.duration_s,
        restart = report.restart_after_s,
        allowed = report.allowed_gap_ms,
    );
    for node in &report.nodes {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            node.role,
            grouped(node.gaps),
            grouped(node.gaps_over_quarter),
            node.longest_gap_at_most_ms
                .map_or("-".to_owned(), |ms| format!("{ms:.0} ms")),
            node.snapshots_built,
            node.build_s.map_or("-".to_owned(), |s| format!("{s:.2} s")),
            node.snapshots_installed,
            node.snapshot_bytes.map_or("-".to_owned(), |b| format!(
                "{:.1} MiB",
                b as f64 / (1 << 20) as f64
            )),
        ));
    }
    out.push_str(&format!(
        "\nTerm before and after the window: {} -> {} ({}), same leader: {}. The restarted \
follower caught up in {}. Lock-cycle against the leader meanwhile: {:.0} cycles/s, p50 {} ms, \
p99 {} ms, worst one-second p99 {} ms, {} errors.\n",
        report.term_before,
        report.term_after,
        if report.term_after == report.term_before {
            "no election"
        } else {
            "**an election**"
        },
        if report.same_leader { "yes" } else { "**no**" },
        report
            .catch_up_s
            .map_or("**not within the window**".to_owned(), |s| format!(
                "{s:.1} s"
            )),
        report.run.throughput_per_s,
        ms(report.run.latency_us.p50),
        ms(report.run.latency_us.p99),
        ms(report.max_interval_p99_us),
        report.run.errors,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_by_thousands() {
        let cases = [(0, "0"), (999, "999"), (1_000, "1,000"), (18_463, "18,463")];
        for (n, text) in cases {
            assert_eq!(grouped(n), text);
        }
        assert_eq!(grouped(1_000_000), "1,000,000");
    }

    const BEFORE: &str = "\
baton_raft_leader_contact_gap_seconds_bucket{le=\"0.1\"} 10
baton_raft_leader_contact_gap_seconds_bucket{le=\"0.125\"} 12
baton_raft_leader_contact_gap_seconds_bucket{le=\"0.25\"} 12
baton_raft_leader_contact_gap_seconds_bucket{le=\"+Inf\"} 12
baton_raft_leader_contact_gap_seconds_count 12
baton_snapshots_built_total 1
baton_snapshot_build_seconds_sum 2
baton_snapshot_build_seconds_count 1
";
    const AFTER: &str = "\
baton_raft_leader_contact_gap_seconds_bucket{le=\"0.1\"} 100
baton_raft_leader_contact_gap_seconds_bucket{le=\"0.125\"} 105
baton_raft_leader_contact_gap_seconds_bucket{le=\"0.25\"} 107
baton_raft_leader_contact_gap_seconds_bucket{le=\"+Inf\"} 107
baton_raft_leader_contact_gap_seconds_count 107
baton_snapshots_built_total 3
baton_snapshot_build_seconds_sum 8
baton_snapshot_build_seconds_count 3
baton_snapshot_bytes 1048576
";

    #[test]
    fn buckets_are_read_in_order_with_inf_last() {
        let read = buckets(AFTER, CONTACT_GAP);
        assert_eq!(read.len(), 4);
        assert_eq!(read[1], (0.125, 105));
        assert!(read[3].0.is_infinite());
    }

    #[test]
    fn a_window_counts_only_what_happened_in_it() {
        let node = node_window("follower", Some(BEFORE), AFTER, 125);
        assert_eq!(node.gaps, 95);
        // 93 gaps up to 125 ms in the window, 2 between 125 and 250 ms.
        assert_eq!(node.gaps_over_quarter, 2);
        assert_eq!(node.longest_gap_at_most_ms, Some(250.0));
        assert_eq!(node.snapshots_built, 2);
        assert_eq!(node.build_s, Some(3.0));
        assert_eq!(node.snapshot_bytes, Some(1 << 20));
    }

    #[test]
    fn a_node_started_in_the_window_counts_everything_and_no_gap_is_none() {
        let node = node_window("restarted follower", None, AFTER, 125);
        assert_eq!(node.gaps, 107);
        assert_eq!(node.gaps_over_quarter, 2);
        let quiet = node_window("leader", None, "baton_snapshots_built_total 0\n", 125);
        assert_eq!(quiet.gaps, 0);
        assert_eq!(quiet.longest_gap_at_most_ms, None);
        assert_eq!(quiet.build_s, None);
    }
}
