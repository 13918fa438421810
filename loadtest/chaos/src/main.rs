//! `baton-chaos`: fault injection against a real Baton cluster, with safety
//! checkers over the recorded history.
//!
//! `baton-chaos run --nodes 5 --duration-s 300 --seed 1 --baton-bin PATH` prints a
//! verdict per checker and exits non-zero on any violation; `baton-chaos check
//! --dir OUT` re-checks a saved run.

use std::path::PathBuf;
use std::process::ExitCode;

use baton_chaos::nemesis::FaultFamily;
use baton_chaos::run::{recheck, render, run, RunConfig};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "baton-chaos",
    about = "Fault injection and safety checkers for Baton"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Start a cluster, inject faults under load, check the history.
    Run(RunArgs),
    /// Re-check the history saved in a run's output directory.
    Check {
        /// The run's output directory.
        #[arg(long)]
        dir: PathBuf,
        /// Search budget of the linearizability checker, per key.
        #[arg(long)]
        lin_max_steps: Option<u64>,
    },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Voters in the cluster.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Seconds of load and faults.
    #[arg(long, default_value_t = 60)]
    duration_s: u64,
    /// Seed of the fault schedule and of the workers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The `baton` binary (copy it first if someone rebuilds it meanwhile).
    #[arg(long)]
    baton_bin: PathBuf,
    /// Fault families: kill,pause,partition,clock (empty: none).
    #[arg(long, default_value = "kill,pause,partition")]
    faults: String,
    /// Client workers.
    #[arg(long, default_value_t = 8)]
    workers: u32,
    /// Lease TTL of the workers' sessions.
    #[arg(long, default_value_t = 1500)]
    ttl_ms: u64,
    /// Output directory (history, report, node logs).
    #[arg(long, default_value = "chaos-out")]
    out: PathBuf,
    /// Locks, elections and names (each).
    #[arg(long, default_value_t = 2)]
    keys: usize,
    /// Raft heartbeat of the servers.
    #[arg(long, default_value_t = 50)]
    heartbeat_ms: u64,
    /// Raft election timeout of the servers.
    #[arg(long, default_value_t = 500)]
    election_timeout_ms: u64,
    /// Run one node's clock at this rate for its whole life (libfaketime).
    #[arg(long, default_value_t = 1.0)]
    clock_rate: f64,
    /// Count lease-timing checkers even under clock faults.
    #[arg(long)]
    strict_clock: bool,
    /// Negative control: servers run with --unsafe-no-fsync.
    #[arg(long)]
    unsafe_no_fsync: bool,
    /// Negative control: workers write when they believe the lease lost, and the
    /// register does not check tokens.
    #[arg(long)]
    unsafe_skip_fencing: bool,
    /// Negative control: every kill-all also wipes the nodes' data directories
    /// (acknowledged writes lost, as on a disk that never synced).
    #[arg(long)]
    unsafe_wipe_on_kill_all: bool,
    /// Negative controls: exit 0 only if these checkers (comma-separated) failed;
    /// with no value, if any checker failed.
    #[arg(long, num_args = 0..=1, default_missing_value = "any")]
    expect_violation: Option<String>,
    /// Keep the nodes' data directories.
    #[arg(long)]
    keep_data: bool,
    /// Search budget of the linearizability checker, per key.
    #[arg(long, default_value_t = 2_000_000)]
    lin_max_steps: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("baton-chaos: {e}");
            return ExitCode::from(2);
        }
    };
    let (report, expect_violation) = match cli.command {
        Cmd::Check { dir, lin_max_steps } => (recheck(&dir, lin_max_steps), None),
        Cmd::Run(a) => {
            let faults = match FaultFamily::parse_list(&a.faults) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("baton-chaos: {e}");
                    return ExitCode::from(2);
                }
            };
            let cfg = RunConfig {
                nodes: a.nodes,
                duration_s: a.duration_s,
                seed: a.seed,
                baton_bin: a.baton_bin,
                faults,
                workers: a.workers,
                ttl_ms: a.ttl_ms,
                out: a.out,
                unsafe_no_fsync: a.unsafe_no_fsync,
                unsafe_skip_fencing: a.unsafe_skip_fencing,
                unsafe_wipe_on_kill_all: a.unsafe_wipe_on_kill_all,
                clock_rate: a.clock_rate,
                strict_clock: a.strict_clock,
                heartbeat_ms: a.heartbeat_ms,
                election_timeout_ms: a.election_timeout_ms,
                keys: a.keys,
                keep_data: a.keep_data,
                lin_max_steps: a.lin_max_steps,
            };
            (rt.block_on(run(cfg)), a.expect_violation)
        }
    };
    match report {
        Ok(r) => {
            print!("{}", render(&r));
            let Some(expected) = expect_violation else {
                return if r.violation {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                };
            };
            let failed: Vec<&str> = r
                .verdicts
                .iter()
                .filter(|v| v.status == "fail")
                .map(|v| v.checker.as_str())
                .collect();
            let missed: Vec<&str> = if expected == "any" {
                if failed.is_empty() {
                    vec!["any"]
                } else {
                    vec![]
                }
            } else {
                expected
                    .split(',')
                    .map(str::trim)
                    .filter(|c| !failed.contains(c))
                    .collect()
            };
            if missed.is_empty() {
                println!(
                    "negative control caught, as expected ({})",
                    failed.join(", ")
                );
                ExitCode::SUCCESS
            } else {
                println!(
                    "negative control NOT caught by {}: a violation was expected",
                    missed.join(", ")
                );
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("baton-chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}
