//! One chaos run end to end: cluster up, workers and nemesis for the duration,
//! heal, final reads, history and report on disk, verdicts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::check::{self, CheckInput, LinearizableConfig, Status, Verdict, FINAL_PROCESS};
use crate::client::BatonClient;
use crate::cluster::{Cluster, ClusterConfig};
use crate::history::{self, Op, Outcome};
use crate::nemesis::{
    schedule, FaultFamily, Nemesis, NemesisEvent, NemesisLog, ScheduleParams, WorkerPauses,
};
use crate::recorder::Recorder;
use crate::register::{AcceptedWrite, FencedRegister};
use crate::worker::{read_key, Worker, WorkerConfig};

/// Checkers whose verdict depends on clocks running at the real rate: a violation
/// whose time window contains a clock jump is outside Baton's contract (leases are
/// timed by the leader's clock) and is set aside as excused; under a whole-life rate
/// skew (`--clock-rate`) their failures are reported but not counted. Unless
/// `strict_clock`.
pub const CLOCK_DEPENDENT: &[&str] = &[
    "lease-kept-alive",
    "mutual-exclusion",
    "semaphore-limit",
    "final-state",
    "linearizable",
];

/// Settings of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunConfig {
    /// Voters.
    pub nodes: usize,
    /// Seconds of faults and load.
    pub duration_s: u64,
    /// Seed of the schedule and the workers.
    pub seed: u64,
    /// The `baton` binary.
    pub baton_bin: PathBuf,
    /// Fault families.
    pub faults: Vec<FaultFamily>,
    /// Client workers.
    pub workers: u32,
    /// Lease TTL of the workers.
    pub ttl_ms: u64,
    /// Output directory.
    pub out: PathBuf,
    /// Negative control: servers acknowledge before syncing.
    pub unsafe_no_fsync: bool,
    /// Negative control: every kill-all also wipes the nodes' data (acknowledged
    /// writes lost, as with a disk that never synced).
    #[serde(default)]
    pub unsafe_wipe_on_kill_all: bool,
    /// Negative control: workers write although their lease is believed lost, and
    /// the register does not check tokens.
    pub unsafe_skip_fencing: bool,
    /// Rate of one node's clock for its whole life (1.0: none).
    pub clock_rate: f64,
    /// Count clock-dependent failures even under clock faults.
    pub strict_clock: bool,
    /// `--heartbeat-ms` of the servers.
    pub heartbeat_ms: u64,
    /// `--election-timeout-ms` of the servers.
    pub election_timeout_ms: u64,
    /// Locks, elections and names used (each).
    pub keys: usize,
    /// Keep the nodes' data directories.
    pub keep_data: bool,
    /// Search budget of the linearizability checker, per key.
    #[serde(default = "default_lin_steps")]
    pub lin_max_steps: u64,
}

fn default_lin_steps() -> u64 {
    LinearizableConfig::default().max_steps
}

/// What a run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The settings.
    pub config: RunConfig,
    /// Operations by kind and outcome.
    pub ops: BTreeMap<String, BTreeMap<String, usize>>,
    /// Total operations.
    pub total_ops: usize,
    /// Faults injected, by name.
    pub faults: BTreeMap<String, usize>,
    /// Verdicts.
    pub verdicts: Vec<VerdictLine>,
    /// Whether any counted checker failed.
    pub violation: bool,
}

/// A verdict as reported.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerdictLine {
    /// Checker.
    pub checker: String,
    /// pass / fail / inconclusive / fail-outside-contract.
    pub status: String,
    /// Items examined.
    pub checked: usize,
    /// Violations.
    pub violations: usize,
    /// Violations excused by a clock jump inside their window.
    #[serde(default)]
    pub excused: usize,
    /// Explanations.
    pub explanations: Vec<String>,
}

/// Limit of the workers' semaphore (`chaos-sem-0`; sessions take 1 or 2 permits).
pub const SEMAPHORE_LIMIT: u64 = 2;

/// Key names of a run.
pub fn keys(n: usize) -> (Vec<String>, Vec<String>, Vec<String>) {
    let locks = (0..n).map(|i| format!("chaos-lock-{i}")).collect();
    let elections = (0..n).map(|i| format!("chaos-election-{i}")).collect();
    let names = (0..n).map(|i| format!("chaos/name-{i}")).collect();
    (locks, elections, names)
}

/// Runs the whole thing: start the cluster, load and faults for the duration,
/// heal, read the final state, save the history and judge it.
pub async fn run(cfg: RunConfig) -> anyhow::Result<Report> {
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    let cluster_dir = cfg.out.join("cluster");
    let cluster = start_cluster(&cfg, &cluster_dir).await?;
    let urls = cluster.urls();
    let cluster = Arc::new(tokio::sync::Mutex::new(cluster));

    let rec = Recorder::new();
    let register = if cfg.unsafe_skip_fencing {
        FencedRegister::unchecked()
    } else {
        FencedRegister::new()
    };
    let nemesis_log = NemesisLog::new(rec.clone());
    let (locks, elections, names) = keys(cfg.keys);
    let wcfg = Arc::new(WorkerConfig {
        ttl_ms: cfg.ttl_ms,
        locks: locks.clone(),
        elections: elections.clone(),
        names: names.clone(),
        rw_locks: vec!["chaos-rw-0".into()],
        semaphores: vec!["chaos-sem-0".into()],
        semaphore_limit: SEMAPHORE_LIMIT,
        skip_fencing: cfg.unsafe_skip_fencing,
        urls: urls.clone(),
        seed: cfg.seed,
    });
    let (worker_stop_tx, worker_stop) = watch::channel(false);
    let (nemesis_stop_tx, nemesis_stop) = watch::channel(false);
    let mut pause_txs = Vec::new();
    let mut workers = Vec::new();
    for id in 1..=cfg.workers {
        let (tx, rx) = mpsc::unbounded_channel();
        pause_txs.push(tx);
        let w = Worker::new(
            id,
            wcfg.clone(),
            rec.clone(),
            register.clone(),
            rx,
            worker_stop.clone(),
            nemesis_log.clone(),
        );
        workers.push(tokio::spawn(w.run()));
    }
    let plan = schedule(
        &ScheduleParams {
            seed: cfg.seed,
            duration_ms: cfg.duration_s * 1000,
            workers: cfg.workers,
            ttl_ms: cfg.ttl_ms,
            election_timeout_ms: cfg.election_timeout_ms,
            worker_pause: WorkerPauses::for_run(cfg.unsafe_skip_fencing),
        },
        &cfg.faults,
    );
    std::fs::write(
        cfg.out.join("schedule.json"),
        serde_json::to_vec_pretty(&plan)?,
    )?;
    let nemesis = Nemesis {
        cluster: cluster.clone(),
        worker_pauses: pause_txs,
        log: nemesis_log.clone(),
        seed: cfg.seed,
        wipe_on_kill_all: cfg.unsafe_wipe_on_kill_all,
    };
    let nemesis_task = tokio::spawn(nemesis.run(plan, nemesis_stop));

    tokio::time::sleep(Duration::from_secs(cfg.duration_s)).await;
    eprintln!(
        "baton-chaos: {} s done, {} events; healing",
        cfg.duration_s,
        rec.len()
    );
    nemesis_stop_tx.send_replace(true);
    let _ = nemesis_task.await;
    let mut recovery = heal(&cfg, &cluster).await;
    worker_stop_tx.send_replace(true);
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(30), w).await;
    }
    read_final_state(&rec, &urls, [&locks, &elections, &names], &mut recovery).await;
    std::fs::write(
        cfg.out.join("recovery.json"),
        serde_json::to_vec_pretty(&recovery)?,
    )?;
    let end_ns = rec.now_ns();
    cluster.lock().await.shutdown().await;
    if !cfg.keep_data {
        for i in 1..=cfg.nodes {
            let _ = std::fs::remove_dir_all(cluster_dir.join(format!("data-{i}")));
        }
    }
    save_and_judge(cfg, &rec, &register, &nemesis_log, end_ns, recovery)
}

/// Starts the nodes (under libfaketime when clocks are faulted) and waits until
/// the cluster is ready.
async fn start_cluster(cfg: &RunConfig, cluster_dir: &Path) -> anyhow::Result<Cluster> {
    let clock = cfg.faults.contains(&FaultFamily::Clock) || cfg.clock_rate != 1.0;
    let mut seed_rng = StdRng::seed_from_u64(cfg.seed);
    let skewed = (cfg.clock_rate != 1.0).then(|| seed_rng.gen_range(1..=cfg.nodes as u64));
    let _ = std::fs::remove_dir_all(cluster_dir);
    let mut cluster = Cluster::new(ClusterConfig {
        nodes: cfg.nodes,
        baton_bin: cfg.baton_bin.clone(),
        dir: cluster_dir.to_path_buf(),
        secret: format!("chaos-{}", cfg.seed),
        heartbeat_ms: cfg.heartbeat_ms,
        election_timeout_ms: cfg.election_timeout_ms,
        unsafe_no_fsync: cfg.unsafe_no_fsync,
        faketime: clock,
        skewed_node: skewed,
        clock_rate: cfg.clock_rate,
    })
    .await?;
    cluster.start_all().await?;
    if let Err(e) = cluster.wait_ready(Duration::from_secs(60)).await {
        cluster.shutdown().await;
        anyhow::bail!("{e}; see the node logs in {}", cluster_dir.display());
    }
    let leader = cluster.leader().await;
    eprintln!(
        "baton-chaos: cluster of {} ready, leader {leader:?}",
        cfg.nodes
    );
    Ok(cluster)
}

/// After the last fault: the cluster must be ready again within a minute.
async fn heal(cfg: &RunConfig, cluster: &tokio::sync::Mutex<Cluster>) -> Verdict {
    let ready = cluster
        .lock()
        .await
        .wait_ready(Duration::from_secs(60))
        .await;
    let mut recovery = Verdict::new("cluster-recovered");
    recovery.checked = cfg.nodes;
    if let Err(e) = &ready {
        eprintln!("baton-chaos: after healing: {e}");
        recovery.violation(format!("after the final heal: {e} (see the node logs)"));
    }
    recovery
}

/// Reads every key once more through the API (trying the nodes in turn), right
/// after the workers' last refresh; each read goes into the history.
async fn read_final_state(
    rec: &Recorder,
    urls: &[String],
    [locks, elections, names]: [&Vec<String>; 3],
    recovery: &mut Verdict,
) {
    let http = BatonClient::new(Duration::from_secs(2));
    let mut final_reads = 0;
    for (collection, ks) in [("locks", locks), ("elections", elections), ("names", names)] {
        for (i, k) in ks.iter().enumerate() {
            for attempt in 0..20 {
                let n = (i + attempt) % urls.len();
                let url = &urls[n];
                if read_key(&http, rec, FINAL_PROCESS, n as u64 + 1, url, collection, k).await {
                    final_reads += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    eprintln!("baton-chaos: {final_reads} final reads");
    let expected_reads = locks.len() + elections.len() + names.len();
    if final_reads < expected_reads {
        recovery.violation(format!(
            "only {final_reads} of {expected_reads} final reads answered"
        ));
    }
}

/// Writes the history, the register and the nemesis log into the run directory,
/// runs the checkers over them and writes the report.
fn save_and_judge(
    cfg: RunConfig,
    rec: &Recorder,
    register: &FencedRegister,
    nemesis_log: &NemesisLog,
    end_ns: u64,
    recovery: Verdict,
) -> anyhow::Result<Report> {
    let events = rec.events();
    history::write_jsonl(&cfg.out.join("history.jsonl"), &events)?;
    let reg = register.snapshot();
    std::fs::write(cfg.out.join("register.json"), serde_json::to_vec(&reg)?)?;
    std::fs::write(
        cfg.out.join("nemesis.json"),
        serde_json::to_vec_pretty(&nemesis_log.events())?,
    )?;
    std::fs::write(cfg.out.join("end_ns"), end_ns.to_string())?;
    let ops = history::pair(&events, end_ns);
    let jumps = clock_jumps(&nemesis_log.events());
    let out = cfg.out.clone();
    let report = evaluate(cfg, &ops, reg, nemesis_log.counts(), &jumps, recovery);
    std::fs::write(out.join("report.json"), serde_json::to_vec_pretty(&report)?)?;
    std::fs::write(out.join("report.txt"), render(&report))?;
    Ok(report)
}

/// Re-checks a saved run directory (`lin_max_steps` overrides the saved budget).
pub fn recheck(dir: &Path, lin_max_steps: Option<u64>) -> anyhow::Result<Report> {
    let events = history::read_jsonl(&dir.join("history.jsonl"))?;
    let reg: BTreeMap<String, Vec<AcceptedWrite>> =
        serde_json::from_slice(&std::fs::read(dir.join("register.json"))?)?;
    let end_ns: u64 = std::fs::read_to_string(dir.join("end_ns"))?
        .trim()
        .parse()?;
    let mut old: Report = serde_json::from_slice(&std::fs::read(dir.join("report.json"))?)?;
    if let Some(steps) = lin_max_steps {
        old.config.lin_max_steps = steps;
    }
    let ops = history::pair(&events, end_ns);
    let events: Vec<NemesisEvent> =
        serde_json::from_slice(&std::fs::read(dir.join("nemesis.json"))?)?;
    let jumps = clock_jumps(&events);
    let mut recovery = Verdict::new("cluster-recovered");
    if let Some(r) = old
        .verdicts
        .iter()
        .find(|v| v.checker == "cluster-recovered")
    {
        recovery.checked = r.checked;
        for e in &r.explanations {
            recovery.violation(e.clone());
        }
    }
    Ok(evaluate(
        old.config, &ops, reg, old.faults, &jumps, recovery,
    ))
}

/// When the nemesis jumped a clock (run time, ns).
fn clock_jumps(events: &[NemesisEvent]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| e.what == "clock-jump-leader")
        .map(|e| e.time_ns)
        .collect()
}

fn evaluate(
    config: RunConfig,
    ops: &[Op],
    register: BTreeMap<String, Vec<AcceptedWrite>>,
    faults: BTreeMap<String, usize>,
    clock_jumps_ns: &[u64],
    recovery: Verdict,
) -> Report {
    let mut counts: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for o in ops {
        let kind = serde_json::to_value(o.f)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let outcome = match o.outcome {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Unknown => "unknown",
        };
        *counts
            .entry(kind)
            .or_default()
            .entry(outcome.into())
            .or_default() += 1;
    }
    let input = CheckInput {
        ops: ops.to_vec(),
        register,
    };
    let lin = LinearizableConfig {
        max_steps: config.lin_max_steps,
        ..LinearizableConfig::default()
    };
    let mut verdicts = check::run_all(&input, &lin);
    if !config.strict_clock {
        for v in verdicts
            .iter_mut()
            .filter(|v| CLOCK_DEPENDENT.contains(&v.checker))
        {
            // libfaketime re-reads its control file about once a second, per thread
            // (seen taking effect up to ~2.5 s after the write): allow 3 s.
            v.excuse_clock_jumps(clock_jumps_ns, 3_000_000_000);
        }
    }
    let skewed = config.clock_rate != 1.0;
    // Liveness, not safety: after every fault is healed the cluster must serve again.
    verdicts.push(recovery);
    let strict = config.strict_clock;
    let lines: Vec<VerdictLine> = verdicts
        .iter()
        .map(|v| line(v, skewed && !strict))
        .collect();
    let violation = lines.iter().any(|l| l.status == "fail");
    Report {
        config,
        ops: counts,
        total_ops: ops.len(),
        faults,
        verdicts: lines,
        violation,
    }
}

fn line(v: &Verdict, clock_excused: bool) -> VerdictLine {
    let status = match v.status {
        Status::Pass => "pass",
        Status::Inconclusive => "inconclusive",
        Status::Fail if clock_excused && CLOCK_DEPENDENT.contains(&v.checker) => {
            "fail-outside-contract"
        }
        Status::Fail => "fail",
    };
    VerdictLine {
        checker: v.checker.into(),
        status: status.into(),
        checked: v.checked,
        violations: v.violations,
        excused: v.excused,
        explanations: v.explanations.clone(),
    }
}

/// The human-readable report.
pub fn render(r: &Report) -> String {
    let c = &r.config;
    let mut s = format!(
        "baton-chaos run: seed {}, {} nodes, {} s, faults {:?}, {} workers, ttl {} ms{}{}{}{}\n",
        c.seed,
        c.nodes,
        c.duration_s,
        c.faults,
        c.workers,
        c.ttl_ms,
        if c.unsafe_no_fsync {
            ", UNSAFE no-fsync"
        } else {
            ""
        },
        if c.unsafe_skip_fencing {
            ", UNSAFE skip-fencing"
        } else {
            ""
        },
        if c.unsafe_wipe_on_kill_all {
            ", UNSAFE wipe-on-kill-all"
        } else {
            ""
        },
        if c.clock_rate != 1.0 {
            format!(", one clock at x{}", c.clock_rate)
        } else {
            String::new()
        },
    );
    s += &format!("operations: {}\n", r.total_ops);
    for (kind, outcomes) in &r.ops {
        let parts: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o} {n}")).collect();
        s += &format!("  {kind:<11} {}\n", parts.join(", "));
    }
    let total_faults: usize = r.faults.values().sum();
    s += &format!("faults: {total_faults}\n");
    for (f, n) in &r.faults {
        s += &format!("  {f:<18} {n}\n");
    }
    s += "checker              verdict                 checked  violations  excused(clock)\n";
    for v in &r.verdicts {
        s += &format!(
            "  {:<18} {:<22} {:>8}  {:>10}  {:>14}\n",
            v.checker,
            v.status.to_uppercase(),
            v.checked,
            v.violations,
            v.excused
        );
    }
    for v in r
        .verdicts
        .iter()
        .filter(|v| v.status != "pass" || v.excused > 0)
    {
        s += &format!("\n{} ({}):\n", v.checker, v.status);
        for e in &v.explanations {
            s += &format!("  - {e}\n");
        }
    }
    s += &format!(
        "\nverdict: {}\n",
        if r.violation {
            "VIOLATION"
        } else {
            "no violation"
        }
    );
    s
}
