//! The scenarios: their workers, setup and teardown, and the report of a run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use serde_json::json;

use crate::driver::{drive, Driven, LoadSpec, Worker};
use crate::error::OpError;
use crate::holders::{Holders, RwWorker, SemaphoreWorker, SplitLatency};
use crate::probe::{CpuProbe, FsyncProbe};
use crate::report::Report;
use crate::target::{Lease, Target, TargetKind};
use crate::watch;

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Each client has its own lease and loops acquire -> release on its own lock.
    LockCycle,
    /// All clients acquire one lock (waiting in its queue) and release it at once.
    LockContended,
    /// N leases kept alive at TTL/3 by a pool of clients (open loop by nature).
    Keepalive,
    /// All clients campaign in one election (waiting) and resign at once.
    ElectionChurn,
    /// Each operation registers a name, looks it up and unregisters it.
    Names,
    /// Watchers on `GET /v1/watch` while writers cycle locks: delivery latency.
    WatchFanout,
    /// All clients on one lock, `--writers-percent` of the operations exclusive
    /// (writers), the rest shared (readers); waiting acquire, hold `--hold-ms`, release, with the
    /// holders counted by the clients (a writer overlapping anyone fails the run).
    ReadersWriters,
    /// All clients on one semaphore of `--limit` permits: waiting acquire of one
    /// permit, hold `--hold-ms`, release; more than `--limit` holders fails the run.
    Semaphore,
}

impl Scenario {
    /// The kebab-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::LockCycle => "lock-cycle",
            Scenario::LockContended => "lock-contended",
            Scenario::Keepalive => "keepalive",
            Scenario::ElectionChurn => "election-churn",
            Scenario::Names => "names",
            Scenario::WatchFanout => "watch-fanout",
            Scenario::ReadersWriters => "readers-writers",
            Scenario::Semaphore => "semaphore",
        }
    }

    /// What one operation is.
    pub fn operation(self) -> &'static str {
        match self {
            Scenario::LockCycle => "acquire + release of the client's own lock (2 writes)",
            Scenario::LockContended => "queued acquire of the shared lock + release (1 handoff)",
            Scenario::Keepalive => "one lease keepalive",
            Scenario::ElectionChurn => "queued campaign + resign (1 leader change)",
            Scenario::Names => "register + whereis + unregister (2 writes, 1 read)",
            Scenario::WatchFanout => "acquire + release by a writer; latency = watch delivery",
            Scenario::ReadersWriters => {
                "queued acquire of the one lock, shared (reader) or exclusive (writer), hold, release"
            }
            Scenario::Semaphore => "queued acquire of 1 permit of the one semaphore, hold, release",
        }
    }

    /// Whether `kind` can run this scenario.
    pub fn supports(self, kind: TargetKind) -> bool {
        !(self == Scenario::WatchFanout && kind == TargetKind::Etcd)
    }

    /// Whether a healthy server answers every operation of this scenario without error.
    pub fn expects_no_errors(self) -> bool {
        true
    }
}

/// One run's parameters (`baton-loadtest run`).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Scenario.
    #[arg(long, value_enum, default_value = "lock-cycle")]
    pub scenario: Scenario,
    /// What the target URL is.
    #[arg(long, value_enum, default_value = "baton")]
    pub target_kind: TargetKind,
    /// Base URL of the server.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    pub target: String,
    /// Concurrent clients (closed loop), or the pool of clients serving `--rate`.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Open loop: operations started per second (latency from the intended start).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Length of the measured phase in seconds (default 10 unless --operations).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Stop after this many operations.
    #[arg(long)]
    pub operations: Option<u64>,
    /// keepalive: leases kept alive.
    #[arg(long, default_value_t = 10_000)]
    pub leases: usize,
    /// Lease TTL (keepalive: leases are kept alive every TTL/3).
    #[arg(long, default_value_t = 60_000)]
    pub ttl_ms: u64,
    /// watch-fanout: concurrent watchers.
    #[arg(long, default_value_t = 16)]
    pub watchers: usize,
    /// readers-writers: percentage of operations that are writers (exclusive).
    #[arg(long, default_value_t = 10)]
    pub writers_percent: u64,
    /// semaphore: its limit (permits).
    #[arg(long, default_value_t = 8)]
    pub limit: u32,
    /// readers-writers and semaphore: how long a holder holds before releasing
    /// (with 0 the clients' holder count would see nobody overlap, readers neither,
    /// so the overlap check would test nothing).
    #[arg(long, default_value_t = 1)]
    pub hold_ms: u64,
    /// Server process id: report its CPU (from /proc) and fsyncs (with perf) over the measured phase.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Count the server's fsync/fdatasync calls with `perf stat` (needs --server-pid).
    #[arg(long)]
    pub count_fsyncs: bool,
    /// Write the JSON report here (default: stdout).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write an SVG chart (latency over time, throughput, distribution) here.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// No progress bar (it is never drawn when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
}

impl RunArgs {
    /// Defaults for `scenario` against `target`, for `bench` and `smoke`.
    pub fn new(scenario: Scenario, kind: TargetKind, target: &str) -> Self {
        Self {
            scenario,
            target_kind: kind,
            target: target.to_owned(),
            clients: 16,
            rate: None,
            duration_s: Some(10.0),
            operations: None,
            leases: 10_000,
            ttl_ms: 60_000,
            watchers: 16,
            writers_percent: 10,
            limit: 8,
            hold_ms: 1,
            server_pid: None,
            count_fsyncs: false,
            report: None,
            chart: None,
            no_progress: false,
        }
    }

    fn spec(&self) -> LoadSpec {
        let duration = match (self.duration_s, self.operations) {
            (Some(d), _) => Some(Duration::from_secs_f64(d)),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs(10)),
        };
        // About 100 points on the timeline, between 0.1 s and 1 s each.
        let interval = duration
            .map(|d| (d / 100).clamp(Duration::from_millis(100), Duration::from_secs(1)))
            .unwrap_or(Duration::from_secs(1));
        LoadSpec {
            clients: self.clients.max(1),
            rate: self.rate,
            duration,
            operations: self.operations,
            interval,
            progress: !self.no_progress,
        }
    }
}

/// Lock/election/name prefix unique to this run, so rounds never meet each other's state.
fn run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("lt-{:x}", nanos & 0xffff_ffff_ffff)
}

/// Acquire -> release on a lock (own lock: lock-cycle; shared: lock-contended).
pub struct LockWorker {
    target: Target,
    lease: Lease,
    name: String,
}

impl Worker for LockWorker {
    async fn op(&mut self, _k: u64) -> Result<(), OpError> {
        let held = self.target.acquire(&self.name, &self.lease).await?;
        self.target.release(&self.lease, &held).await.map(drop)
    }
}

/// Campaign -> resign on one election.
pub struct ElectionWorker {
    target: Target,
    lease: Lease,
    name: String,
    candidate: String,
}

impl Worker for ElectionWorker {
    async fn op(&mut self, _k: u64) -> Result<(), OpError> {
        let held = self
            .target
            .campaign(&self.name, &self.lease, &self.candidate)
            .await?;
        self.target.resign(&self.lease, &held).await
    }
}

/// Register -> whereis -> unregister of a fresh name.
pub struct NamesWorker {
    target: Target,
    lease: Lease,
    prefix: String,
}

impl Worker for NamesWorker {
    async fn op(&mut self, k: u64) -> Result<(), OpError> {
        let name = format!("{}/{k}", self.prefix);
        self.target
            .register(&name, &self.lease, "10.0.0.1:8080")
            .await?;
        self.target.whereis(&name).await?;
        self.target.unregister(&name, &self.lease).await
    }
}

/// Keeps lease `k % n` alive.
pub struct KeepaliveWorker {
    target: Target,
    leases: Arc<Vec<Lease>>,
}

impl Worker for KeepaliveWorker {
    async fn op(&mut self, k: u64) -> Result<(), OpError> {
        let lease = &self.leases[(k % self.leases.len() as u64) as usize];
        self.target.keepalive(lease).await
    }
}

/// Grants `n` leases, `concurrency` at a time.
pub async fn grant_leases(
    target: &Target,
    n: usize,
    ttl_ms: u64,
    concurrency: usize,
) -> Result<Vec<Lease>, OpError> {
    stream::iter(0..n)
        .map(|i| async move { target.grant(ttl_ms, &format!("loadtest-{i}")).await })
        .buffered(concurrency.max(1))
        .try_collect()
        .await
}

async fn revoke_all(target: &Target, leases: impl IntoIterator<Item = Lease>, concurrency: usize) {
    stream::iter(leases)
        .for_each_concurrent(concurrency.max(1), |lease| async move {
            let _ = target.revoke(&lease).await;
        })
        .await;
}

/// Grants one lease per client, makes one worker per lease with `worker(i, lease)`
/// and drives them, with the probes around the measured phase.
async fn drive_leased<W: Worker>(
    target: &Target,
    spec: &LoadSpec,
    args: &RunArgs,
    worker: impl Fn(usize, &Lease) -> W,
) -> anyhow::Result<(Driven<W>, Probes, Vec<Lease>)> {
    let leases = grant_leases(target, spec.clients, args.ttl_ms, spec.clients)
        .await
        .context("granting leases")?;
    let workers = leases
        .iter()
        .enumerate()
        .map(|(i, lease)| worker(i, lease))
        .collect();
    let probes = Probes::start(args);
    let driven = drive(spec, workers).await;
    Ok((driven, probes, leases))
}

/// The probes around the measured phase.
struct Probes {
    server_cpu: Option<CpuProbe>,
    client_cpu: Option<CpuProbe>,
    fsyncs: Option<FsyncProbe>,
}

impl Probes {
    fn start(args: &RunArgs) -> Self {
        Self {
            server_cpu: args
                .server_pid
                .and_then(|p| CpuProbe::start(&p.to_string())),
            client_cpu: CpuProbe::start("self"),
            fsyncs: match (args.count_fsyncs, args.server_pid) {
                (true, Some(pid)) => FsyncProbe::start(pid),
                _ => None,
            },
        }
    }

    fn finish(self, report: &mut Report) {
        report.server_cpu_cores = self.server_cpu.and_then(|p| p.cores());
        report.client_cpu_cores = self.client_cpu.and_then(|p| p.cores());
        report.server_fsyncs = self.fsyncs.and_then(FsyncProbe::stop);
    }
}

/// Runs one scenario against one target and returns its report (also written to
/// `--report`/`--chart` when given).
pub async fn run(args: &RunArgs) -> anyhow::Result<Report> {
    if !args.scenario.supports(args.target_kind) {
        bail!(
            "{} cannot run against {}",
            args.scenario.name(),
            args.target_kind.name()
        );
    }
    let mut spec = args.spec();
    let connections = spec.clients + args.watchers + 8;
    let target = Target::new(args.target_kind, &args.target, connections)?;
    let id = run_id();
    let mut extra = BTreeMap::new();
    let setup = Instant::now();
    let (recorder, elapsed, spec, probes, leases, override_report) = match args.scenario {
        Scenario::LockCycle | Scenario::LockContended => {
            let (driven, probes, leases) =
                drive_leased(&target, &spec, args, |i, lease| LockWorker {
                    target: target.clone(),
                    lease: lease.clone(),
                    name: if args.scenario == Scenario::LockCycle {
                        format!("{id}/{i}")
                    } else {
                        format!("{id}/contended")
                    },
                })
                .await?;
            (driven.recorder, driven.elapsed, spec, probes, leases, None)
        }
        Scenario::ReadersWriters | Scenario::Semaphore => {
            let holders = Holders::default();
            let split = SplitLatency::new();
            let rw = args.scenario == Scenario::ReadersWriters;
            let hold = Duration::from_millis(args.hold_ms);
            let name = format!("{id}/one");
            let (recorder, elapsed, probes, leases) = if rw {
                let (d, p, l) = drive_leased(&target, &spec, args, |_, lease| RwWorker {
                    target: target.clone(),
                    lease: lease.clone(),
                    name: name.clone(),
                    writers_percent: args.writers_percent.min(100),
                    hold,
                    holders: holders.clone(),
                    split: split.clone(),
                })
                .await?;
                (d.recorder, d.elapsed, p, l)
            } else {
                let (d, p, l) = drive_leased(&target, &spec, args, |_, lease| SemaphoreWorker {
                    target: target.clone(),
                    lease: lease.clone(),
                    name: name.clone(),
                    limit: args.limit.max(1),
                    hold,
                    holders: holders.clone(),
                })
                .await?;
                (d.recorder, d.elapsed, p, l)
            };
            holders.report(elapsed, &mut extra);
            if rw {
                split.report(elapsed, &mut extra);
                extra.insert("writers_percent".into(), json!(args.writers_percent));
            } else {
                extra.insert("limit".into(), json!(args.limit));
            }
            extra.insert("hold_ms".into(), json!(hold.as_millis() as u64));
            (recorder, elapsed, spec, probes, leases, None)
        }
        Scenario::ElectionChurn => {
            let (driven, probes, leases) =
                drive_leased(&target, &spec, args, |i, lease| ElectionWorker {
                    target: target.clone(),
                    lease: lease.clone(),
                    name: format!("{id}/churn"),
                    candidate: format!("candidate-{i}"),
                })
                .await?;
            (driven.recorder, driven.elapsed, spec, probes, leases, None)
        }
        Scenario::Names => {
            let (driven, probes, leases) =
                drive_leased(&target, &spec, args, |_, lease| NamesWorker {
                    target: target.clone(),
                    lease: lease.clone(),
                    prefix: id.clone(),
                })
                .await?;
            (driven.recorder, driven.elapsed, spec, probes, leases, None)
        }
        Scenario::Keepalive => {
            let n = args.leases.max(1);
            let leases = Arc::new(
                grant_leases(&target, n, args.ttl_ms, spec.clients.max(64))
                    .await
                    .context("granting leases")?,
            );
            let setup_s = setup.elapsed().as_secs_f64();
            let every_s = args.ttl_ms as f64 / 3000.0;
            if setup_s > args.ttl_ms as f64 / 1000.0 * 0.8 {
                eprintln!("baton-loadtest: granting {n} leases took {setup_s:.1} s, close to the TTL: raise --ttl-ms");
            }
            spec.rate = Some(args.rate.unwrap_or(n as f64 / every_s));
            extra.insert("leases".into(), json!(n));
            extra.insert("ttl_ms".into(), json!(args.ttl_ms));
            extra.insert(
                "keepalive_every_ms".into(),
                json!((every_s * 1000.0).round() as u64),
            );
            extra.insert("setup_s".into(), json!(setup_s));
            let workers = (0..spec.clients)
                .map(|_| KeepaliveWorker {
                    target: target.clone(),
                    leases: leases.clone(),
                })
                .collect();
            let probes = Probes::start(args);
            let driven = drive(&spec, workers).await;
            let leases = Arc::try_unwrap(leases).unwrap_or_else(|a| (*a).clone());
            (driven.recorder, driven.elapsed, spec, probes, leases, None)
        }
        Scenario::WatchFanout => {
            let leases = grant_leases(&target, spec.clients, args.ttl_ms, spec.clients)
                .await
                .context("granting leases")?;
            let Target::Baton(baton) = &target else {
                bail!("watch-fanout needs a Baton target")
            };
            let prefix = format!("locks/{id}/");
            let fanout = watch::Fanout::connect(baton, &prefix, args.watchers).await?;
            let sent = fanout.sent_log();
            let workers = leases
                .iter()
                .enumerate()
                .map(|(i, lease)| {
                    watch::WriterWorker::new(
                        target.clone(),
                        lease.clone(),
                        format!("{id}/{i}"),
                        sent.clone(),
                    )
                })
                .collect();
            let probes = Probes::start(args);
            let driven = drive(&spec, workers).await;
            let delivery = fanout.finish(spec.interval, &mut extra).await;
            (
                driven.recorder,
                driven.elapsed,
                spec,
                probes,
                leases,
                Some(delivery),
            )
        }
    };
    let mut report = build_report(args, &spec, &recorder, elapsed, extra, override_report);
    probes.finish(&mut report);
    revoke_all(&target, leases, 64).await;
    write_outputs(args, &report)?;
    if let Some(n) = report.extra.get("violations").and_then(|v| v.as_u64()) {
        if n > 0 {
            bail!(
                "{} on {}: {n} overlap(s) of incompatible holders, the first: {}",
                args.scenario.name(),
                args.target_kind.name(),
                report
                    .extra
                    .get("first_violation")
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            );
        }
    }
    Ok(report)
}

/// Assembles the report; `delivery` replaces the latency view (watch-fanout).
fn build_report(
    args: &RunArgs,
    spec: &LoadSpec,
    recorder: &crate::recorder::SharedRecorder,
    elapsed: Duration,
    mut extra: BTreeMap<String, serde_json::Value>,
    delivery: Option<crate::recorder::Recorder>,
) -> Report {
    let (operations, errors_by_code, mut latency, mut timeline, mut distribution, mut intervals) =
        recorder.with(|r| {
            (
                r.operations(),
                r.errors().clone(),
                r.latency(),
                r.timeline(),
                r.distribution(),
                r.interval_histograms(),
            )
        });
    if let Some(d) = delivery {
        extra.insert("write_latency_us".into(), json!(latency));
        latency = d.latency();
        timeline = d.timeline();
        distribution = d.distribution();
        intervals = d.interval_histograms();
    }
    if args.scenario == Scenario::Keepalive {
        let expired = errors_by_code.get("lease_not_found").copied().unwrap_or(0);
        extra.insert("expired_while_kept_alive".into(), json!(expired));
    }
    let duration_s = elapsed.as_secs_f64();
    Report {
        scenario: args.scenario.name().to_owned(),
        target_kind: args.target_kind.name().to_owned(),
        target: args.target.clone(),
        mode: if spec.rate.is_some() {
            "open"
        } else {
            "closed"
        }
        .to_owned(),
        clients: spec.clients,
        rate_per_s: spec.rate,
        duration_s,
        operations,
        errors: errors_by_code.values().sum(),
        errors_by_code,
        throughput_per_s: operations as f64 / duration_s.max(1e-9),
        latency_us: latency,
        operation: args.scenario.operation().to_owned(),
        server_cpu_cores: None,
        client_cpu_cores: None,
        server_fsyncs: None,
        extra,
        timeline,
        distribution,
        intervals,
    }
}

fn write_outputs(args: &RunArgs, report: &Report) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    match &args.report {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?
        }
        None => println!("{text}"),
    }
    if let Some(path) = &args.chart {
        let title = format!(
            "{} on {} ({} clients)",
            report.scenario, report.target_kind, report.clients
        );
        std::fs::write(path, crate::chart::svg(&title, &[report]))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
