//! `baton-loadtest bench`: one etcd and one Baton side by side, the shared scenarios
//! run against each in alternation, and BENCHMARKS.md written from the medians.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::machine::{self, Machine};
use crate::markdown;
use crate::probe::FsyncProbe;
use crate::process::Server;
use crate::report::Report;
use crate::scenario::{self, RunArgs, Scenario};
use crate::target::TargetKind;

/// `bench` options.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The Baton server binary.
    #[arg(long)]
    pub baton_bin: PathBuf,
    /// The etcd binary (3.4, with the HTTP/JSON gateway).
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: PathBuf,
    /// Rounds of each shared scenario per target (alternating baton, etcd, ...); the median is reported.
    #[arg(long, default_value_t = 3)]
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
    /// names and election-churn clients.
    #[arg(long, default_value_t = 32)]
    pub other_clients: usize,
    /// readers-writers and semaphore clients.
    #[arg(long, default_value_t = 64)]
    pub contended_clients: usize,
    /// readers-writers: percentage of writers.
    #[arg(long, default_value_t = 10)]
    pub writers_percent: u64,
    /// semaphore: its limit.
    #[arg(long, default_value_t = 8)]
    pub semaphore_limit: u32,
    /// Only these scenarios (comma-separated; default: all of them).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub scenarios: Vec<Scenario>,
    /// Write the results as the marked section NAME of `--out` (`<!-- NAME:begin
    /// -->`), keeping the rest of the file, instead of rewriting the whole file.
    #[arg(long)]
    pub section: Option<String>,
    /// keepalive: live leases (0 skips the scenario).
    #[arg(long, default_value_t = 100_000)]
    pub keepalive_leases: usize,
    /// keepalive: lease TTL (kept alive every TTL/3); must exceed the time to grant them all.
    #[arg(long, default_value_t = 90_000)]
    pub keepalive_ttl_ms: u64,
    /// keepalive: measured seconds (at least one TTL shows that nothing expires).
    #[arg(long, default_value_t = 100.0)]
    pub keepalive_duration_s: f64,
    /// keepalive: clients sending the keepalives.
    #[arg(long, default_value_t = 128)]
    pub keepalive_clients: usize,
    /// watch-fanout watchers (Baton only; 0 skips it).
    #[arg(long, default_value_t = 64)]
    pub watchers: usize,
    /// lock-cycle also at these client counts (one round each, except one client:
    /// `--lone-client-rounds`; empty skips the sweep). The 1-client row is judged
    /// against issue 19's single-client target.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    pub sweep_clients: Vec<usize>,
    /// Rounds of the 1-client lock-cycle (Baton's defaults, Baton with
    /// `--latency-args`, etcd, in turn): a lone client's p50 moves by a tenth of a
    /// millisecond from run to run, so its verdict is taken on a median.
    #[arg(long, default_value_t = 3)]
    pub lone_client_rounds: usize,
    /// Baton's flags for a lone client's latency, measured with one client next to
    /// its defaults on a second node of their own (one string, split at spaces; an
    /// empty string skips it). `--http-workers 2` serves the client API on threads
    /// of its own: a lower lone-client p50 for more CPU (ARCHITECTURE.md, "Threads").
    #[arg(long, default_value = "--http-workers 2", allow_hyphen_values = true)]
    pub latency_args: String,
    /// Where the servers keep their data (a temporary directory is made inside).
    #[arg(long)]
    pub data_root: Option<PathBuf>,
    /// Where JSON reports and SVG charts go.
    #[arg(long, default_value = "loadtest/results")]
    pub results_dir: PathBuf,
    /// The Markdown file to write.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub out: PathBuf,
    /// How the Baton binary was built (written into BENCHMARKS.md; default: told
    /// from its path, `.../release/` or `.../debug/`).
    #[arg(long)]
    pub baton_build: Option<String>,
}

impl BenchArgs {
    /// `--latency-args` as flags (none: the configuration is not measured).
    pub fn latency_flags(&self) -> Vec<String> {
        self.latency_args
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// How the Baton binary was built, in words.
    pub fn baton_build(&self) -> String {
        if let Some(said) = &self.baton_build {
            return said.clone();
        }
        let parent = self
            .baton_bin
            .parent()
            .and_then(|dir| dir.file_name())
            .and_then(|name| name.to_str());
        match parent {
            Some("release") => "release profile as built by `make release` (the profile the image ships)".to_owned(),
            Some("debug") => "dev profile as built by `make build` (dependencies at opt-level 2, Baton's own code at opt-level 1), not `make release`".to_owned(),
            _ => format!("`{}` as given", self.baton_bin.display()),
        }
    }
}

/// A shared scenario's runs on one target.
#[derive(Debug, Clone)]
pub struct Runs {
    /// Scenario.
    pub scenario: Scenario,
    /// Clients.
    pub clients: usize,
    /// Baton's reports, one per round.
    pub baton: Vec<Report>,
    /// etcd's reports, one per round (empty for Baton-only scenarios).
    pub etcd: Vec<Report>,
    /// Why runs could not happen, if any failed (each one's reason, in order).
    pub failure: Option<String>,
}

impl Runs {
    fn new(scenario: Scenario, clients: usize) -> Runs {
        Runs {
            scenario,
            clients,
            baton: vec![],
            etcd: vec![],
            failure: None,
        }
    }

    /// Files one run's report under its target, or records why it failed
    /// (`what` names the run in the message).
    fn record(&mut self, kind: TargetKind, what: &str, result: anyhow::Result<Report>) {
        match result {
            Ok(report) if kind == TargetKind::Baton => self.baton.push(report),
            Ok(report) => self.etcd.push(report),
            Err(e) => {
                eprintln!("bench: {what} failed: {e:#}");
                let failure = format!("{what}: {e:#}");
                self.failure = Some(match self.failure.take() {
                    Some(earlier) => format!("{earlier}; {failure}"),
                    None => failure,
                });
            }
        }
    }
}

/// Everything BENCHMARKS.md is written from.
pub struct Results {
    /// The command line.
    pub command: String,
    /// UTC date and time.
    pub date: String,
    /// The machine.
    pub machine: Machine,
    /// Versions of the binaries.
    pub versions: Vec<(String, String)>,
    /// The options.
    pub args: BenchArgs,
    /// Per scenario.
    pub runs: Vec<Runs>,
    /// lock-cycle at other client counts (one round per target each, the 1-client
    /// row `--lone-client-rounds`).
    pub sweep: Vec<Runs>,
    /// The 1-client lock-cycle on a Baton node started with `--latency-args` (its
    /// reports under `baton`), when measured.
    pub lone_latency: Option<Runs>,
    /// Whether fsyncs were counted with perf.
    pub fsyncs_counted: bool,
    /// Synced-write latency measured again after the runs.
    pub fsync_end: machine::FsyncLatency,
    /// Load average after the runs.
    pub loadavg_end: String,
}

/// What every run of a bench shares.
pub(crate) struct Ctx<'a> {
    pub(crate) count_fsyncs: bool,
    pub(crate) results_dir: &'a Path,
}

pub(crate) async fn run_one(
    ctx: &Ctx<'_>,
    scenario: Scenario,
    server: &Server,
    (clients, duration_s): (usize, f64),
    tag: &str,
    tweak: impl FnOnce(&mut RunArgs),
) -> anyhow::Result<Report> {
    let mut args = RunArgs::new(scenario, server.kind, &server.url);
    args.clients = clients;
    args.duration_s = Some(duration_s);
    args.server_pid = Some(server.pid());
    args.count_fsyncs = ctx.count_fsyncs;
    args.no_progress = false;
    let stem = format!("{}-{}-{tag}", scenario.name(), server.kind.name());
    args.report = Some(ctx.results_dir.join(format!("{stem}.json")));
    // One chart per scenario with both targets (write_pair_chart), not one per run.
    args.chart = None;
    tweak(&mut args);
    eprintln!(
        "bench: {} on {} ({tag}, {} clients, {duration_s} s)",
        scenario.name(),
        server.kind.name(),
        args.clients
    );
    let report = scenario::run(&args).await?;
    eprintln!(
        "bench:   {:.0} ops/s, p99 {} µs, errors {}, server CPU {:.2} cores, fsyncs {:?}",
        report.throughput_per_s,
        report.latency_us.p99,
        report.errors,
        report.server_cpu_cores.unwrap_or(f64::NAN),
        report.server_fsyncs
    );
    Ok(report)
}

/// Runs the whole benchmark and writes BENCHMARKS.md.
pub async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let root = args.data_root.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("baton-bench-")
        .tempdir_in(&root)?;
    std::fs::create_dir_all(&args.results_dir)?;
    let machine = machine::describe(dir.path(), 500);
    eprintln!(
        "bench: fsync p50 {} µs, mean {:.0} µs in {}",
        machine.fsync.p50_us,
        machine.fsync.mean_us,
        dir.path().display()
    );
    let fsyncs_counted = FsyncProbe::available();
    if !fsyncs_counted {
        eprintln!("bench: perf cannot count syscall tracepoints here: no fsync counts");
    }
    let mut etcd = Server::etcd(&args.etcd_bin, dir.path())?;
    let mut baton = Server::baton(&args.baton_bin, dir.path())?;
    etcd.wait_ready(Duration::from_secs(30))
        .await
        .context("etcd")?;
    baton
        .wait_ready(Duration::from_secs(60))
        .await
        .context("baton")?;
    let versions = vec![
        (
            "baton".to_owned(),
            Server::version(TargetKind::Baton, &args.baton_bin),
        ),
        (
            "etcd".to_owned(),
            Server::version(TargetKind::Etcd, &args.etcd_bin),
        ),
        (
            "baton-loadtest".to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        ),
    ];

    let ctx = Ctx {
        count_fsyncs: fsyncs_counted,
        results_dir: &args.results_dir,
    };
    let wanted = |s: Scenario| args.scenarios.is_empty() || args.scenarios.contains(&s);
    let shared = [
        (Scenario::LockCycle, args.lock_cycle_clients),
        (Scenario::LockContended, args.lock_contended_clients),
        (Scenario::Names, args.other_clients),
        (Scenario::ElectionChurn, args.other_clients),
        (Scenario::ReadersWriters, args.contended_clients),
        (Scenario::Semaphore, args.contended_clients),
    ];
    let mut runs = Vec::new();
    for (scenario, clients) in shared.into_iter().filter(|(s, _)| wanted(*s)) {
        let mut r = Runs::new(scenario, clients);
        for round in 0..args.rounds.max(1) {
            for server in [&baton, &etcd] {
                let tag = format!("r{}", round + 1);
                let result = run_one(
                    &ctx,
                    scenario,
                    server,
                    (clients, args.duration_s),
                    &tag,
                    |a| {
                        a.writers_percent = args.writers_percent;
                        a.limit = args.semaphore_limit;
                    },
                )
                .await;
                let what = format!("{} on {}", scenario.name(), server.kind.name());
                r.record(server.kind, &what, result);
            }
        }
        write_pair_chart(&args.results_dir, &r)?;
        runs.push(r);
    }
    let mut sweep = Vec::new();
    let sweep_clients = if wanted(Scenario::LockCycle) && args.section.is_none() {
        args.sweep_clients.clone()
    } else {
        vec![]
    };
    let mut lone_latency = None;
    for &clients in &sweep_clients {
        let mut r = Runs::new(Scenario::LockCycle, clients);
        if clients == 1 {
            let (lone, latency) = lone_client(&ctx, &args, dir.path(), &etcd).await;
            r = lone;
            lone_latency = latency;
        } else {
            for server in [&baton, &etcd] {
                let what = format!(
                    "lock-cycle with {clients} clients on {}",
                    server.kind.name()
                );
                let load = (clients, args.duration_s);
                record_lock_cycle(&mut r, &ctx, server, load, &format!("c{clients}"), &what).await;
            }
        }
        sweep.push(r);
    }
    if args.keepalive_leases > 0 && wanted(Scenario::Keepalive) {
        let mut r = Runs::new(Scenario::Keepalive, args.keepalive_clients);
        for server in [&baton, &etcd] {
            let result = run_one(
                &ctx,
                Scenario::Keepalive,
                server,
                (args.keepalive_clients, args.keepalive_duration_s),
                "r1",
                |a| {
                    a.leases = args.keepalive_leases;
                    a.ttl_ms = args.keepalive_ttl_ms;
                },
            )
            .await;
            let what = format!("keepalive on {}", server.kind.name());
            r.record(server.kind, &what, result);
        }
        write_pair_chart(&args.results_dir, &r)?;
        runs.push(r);
    }
    if args.watchers > 0 && wanted(Scenario::WatchFanout) {
        let mut r = Runs::new(Scenario::WatchFanout, 4);
        let result = run_one(
            &ctx,
            Scenario::WatchFanout,
            &baton,
            (4, args.duration_s),
            "r1",
            |a| {
                a.watchers = args.watchers;
            },
        )
        .await;
        match result {
            Ok(report) => r.baton.push(report),
            Err(e) => r.failure = Some(format!("{e:#}")),
        }
        runs.push(r);
    }
    drop(baton);
    drop(etcd);
    let fsync_end = machine::fsync_latency(dir.path(), 500).unwrap_or_default();

    let results = Results {
        command,
        date: String::from_utf8_lossy(
            &std::process::Command::new("date")
                .args(["-u", "+%Y-%m-%d %H:%M UTC"])
                .output()?
                .stdout,
        )
        .trim()
        .to_owned(),
        machine,
        versions,
        args: args.clone(),
        runs,
        sweep,
        lone_latency,
        fsyncs_counted,
        fsync_end,
        loadavg_end: machine::loadavg(),
    };
    let previous = std::fs::read_to_string(&args.out).unwrap_or_default();
    let text = match &args.section {
        Some(name) => {
            crate::memory::upsert_section(&previous, name, &markdown::render_section(&results))
        }
        None => {
            // Sections written by other subcommands (`memory`, `cluster`, `bench
            // --section`) between their markers survive a rerun of `bench`.
            let mut text = markdown::render(&results);
            for section in crate::memory::marked_sections(&previous) {
                text = format!("{}\n\n{section}\n", text.trim_end());
            }
            text
        }
    };
    std::fs::write(&args.out, text).with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("bench: wrote {}", args.out.display());
    Ok(())
}

/// The 1-client lock-cycle, `--lone-client-rounds` rounds: Baton's defaults and
/// Baton with `--latency-args`, each on a fresh node of its own for these runs (the
/// node that carried the other scenarios has their state and background work), and
/// etcd, in turn. Returns the defaults' and etcd's runs, and the latency
/// configuration's (its reports under `baton`) unless `--latency-args` is empty.
async fn lone_client(
    ctx: &Ctx<'_>,
    args: &BenchArgs,
    dir: &Path,
    etcd: &Server,
) -> (Runs, Option<Runs>) {
    let flags = args.latency_flags();
    let mut runs = Runs::new(Scenario::LockCycle, 1);
    let mut latency_runs = Runs::new(Scenario::LockCycle, 1);
    let defaults = lone_node(args, dir, "defaults", &[], &mut runs).await;
    let latency = if flags.is_empty() {
        None
    } else {
        lone_node(args, dir, "latency", &flags, &mut latency_runs).await
    };
    for round in 0..args.lone_client_rounds.max(1) {
        let tag = format!("c1-r{}", round + 1);
        let turns = [
            (defaults.as_ref(), "defaults", &mut runs),
            (latency.as_ref(), "latency", &mut latency_runs),
        ];
        for (node, config, into) in turns {
            if let Some(node) = node {
                lone_run(into, ctx, args, node, &format!("{tag}-{config}")).await;
            }
        }
        lone_run(&mut runs, ctx, args, etcd, &format!("{tag}-etcd")).await;
    }
    (runs, (!flags.is_empty()).then_some(latency_runs))
}

/// One 1-client lock-cycle run on `server`, filed in `runs` (`tag` names it in
/// the report's file and in a failure).
async fn lone_run(runs: &mut Runs, ctx: &Ctx<'_>, args: &BenchArgs, server: &Server, tag: &str) {
    let what = format!("lock-cycle {tag} on {}", server.kind.name());
    record_lock_cycle(runs, ctx, server, (1, args.duration_s), tag, &what).await;
}

/// One lock-cycle run of `(clients, seconds)` on `server`, its report or its
/// failure (named `what`) filed in `runs`.
async fn record_lock_cycle(
    runs: &mut Runs,
    ctx: &Ctx<'_>,
    server: &Server,
    load: (usize, f64),
    tag: &str,
    what: &str,
) {
    let result = run_one(ctx, Scenario::LockCycle, server, load, tag, |_| {}).await;
    runs.record(server.kind, what, result);
}

/// A fresh Baton node for the 1-client runs of `config`, started with `flags` and
/// ready, or `None` with the reason filed in `runs`.
async fn lone_node(
    args: &BenchArgs,
    dir: &Path,
    config: &str,
    flags: &[String],
    runs: &mut Runs,
) -> Option<Server> {
    let started = async {
        let mut node = Server::baton_in(&args.baton_bin, dir, &format!("baton-{config}"), flags)?;
        node.wait_ready(Duration::from_secs(60)).await?;
        anyhow::Ok(node)
    };
    match started.await {
        Ok(node) => Some(node),
        Err(e) => {
            let what = format!("starting Baton for the 1-client runs ({config}: {flags:?})");
            runs.record(TargetKind::Baton, &what, Err(e));
            None
        }
    }
}

/// One chart with Baton and etcd (last round of each) on the same axes.
fn write_pair_chart(dir: &Path, runs: &Runs) -> anyhow::Result<()> {
    let reports: Vec<&Report> = runs
        .baton
        .last()
        .into_iter()
        .chain(runs.etcd.last())
        .collect();
    if reports.is_empty() {
        return Ok(());
    }
    let title = format!(
        "{}, {} clients: Baton vs etcd",
        runs.scenario.name(),
        runs.clients
    );
    std::fs::write(
        dir.join(format!("{}.svg", runs.scenario.name())),
        crate::chart::svg(&title, &reports),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn build_of(args: &[&str]) -> String {
        let cli = Cli::try_parse_from(["bench"].iter().chain(args)).unwrap();
        cli.args.baton_build()
    }

    fn latency_flags_of(args: &[&str]) -> Vec<String> {
        let all = ["bench", "--baton-bin", "b"].iter().chain(args);
        Cli::try_parse_from(all).unwrap().args.latency_flags()
    }

    #[test]
    fn latency_args_are_split_at_spaces_and_empty_skips_them() {
        assert_eq!(latency_flags_of(&[]), ["--http-workers", "2"]);
        assert_eq!(
            latency_flags_of(&["--latency-args", " --http-workers  3 --idle-poll-us 0 "]),
            ["--http-workers", "3", "--idle-poll-us", "0"]
        );
        assert!(latency_flags_of(&["--latency-args", ""]).is_empty());
        assert!(latency_flags_of(&["--latency-args", "  "]).is_empty());
    }

    #[test]
    fn a_failure_is_added_to_the_earlier_ones() {
        let mut runs = Runs::new(Scenario::LockCycle, 1);
        runs.record(TargetKind::Baton, "first", Err(anyhow::anyhow!("refused")));
        runs.record(
            TargetKind::Etcd,
            "second",
            Err(anyhow::anyhow!("timed out")),
        );
        assert_eq!(
            runs.failure.as_deref(),
            Some("first: refused; second: timed out")
        );
        assert!(runs.baton.is_empty() && runs.etcd.is_empty());
    }

    #[test]
    fn the_build_is_told_from_the_binary_path_unless_given() {
        assert!(build_of(&["--baton-bin", "/t/release/baton"]).starts_with("release profile"));
        assert!(build_of(&["--baton-bin", "/t/debug/baton"]).starts_with("dev profile"));
        assert_eq!(
            build_of(&["--baton-bin", "/usr/bin/baton"]),
            "`/usr/bin/baton` as given"
        );
        assert_eq!(
            build_of(&["--baton-bin", "/t/debug/baton", "--baton-build", "mine"]),
            "mine"
        );
    }
}
