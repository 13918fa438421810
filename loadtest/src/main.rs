//! `baton-loadtest`: load against Baton and, side by side, etcd's HTTP/JSON gateway.
//!
//! - `run`: one scenario against one target, closed loop (`--clients`) or open loop
//!   (`--rate`), with a JSON report and an SVG chart.
//! - `bench`: starts one etcd and one Baton, runs the shared scenarios against each
//!   in alternation and writes BENCHMARKS.md (`make bench`).
//! - `cluster`: the same for 3-member clusters of both (against each leader), written
//!   as the "3-node" section of BENCHMARKS.md.
//! - `memory`: server RSS per held lock (1,000,000 by default) and the restart time
//!   of that state after `kill -9`.
//! - `scale`: lock-cycle throughput and latency with 0 to 1,000,000 other locks
//!   held (each on its own lease), snapshots included (`make bench-scale`).
//! - `storm`: 100,000 leases (1,000,000 locks) expiring together under lock-cycle
//!   load (`make bench-storm`).
//! - `snapshot-cluster`: heartbeats and elections in a 3-node cluster while it
//!   builds and installs snapshots of 1,000,000 held locks
//!   (`make bench-snapshot-cluster`).
//! - `smoke`: a few seconds of every scenario against both, checking the reports are
//!   well-formed (`make test-loadtest`).
//! - `overload`: an open-loop load at twice a node's capacity, checking what
//!   admission control promises (`make test-overload`).

mod baton;
mod bench;
mod chart;
mod cluster;
mod cpu_idle;
mod driver;
mod error;
mod etcd;
mod exposition;
mod fill;
mod holders;
mod machine;
mod markdown;
mod memory;
mod output;
mod overload;
mod probe;
mod process;
mod recorder;
mod report;
mod scale;
mod scenario;
mod smoke;
mod snapshot_cluster;
mod storm;
mod target;
mod watch;

use clap::{Parser, Subcommand};

/// Load generator for Baton and etcd.
#[derive(Debug, Parser)]
#[command(name = "baton-loadtest", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one scenario against one target.
    Run(scenario::RunArgs),
    /// Benchmark Baton against etcd and write BENCHMARKS.md.
    Bench(bench::BenchArgs),
    /// 3-node etcd and 3-node Baton: lock-cycle and lock-contended against each leader.
    Cluster(cluster::ClusterArgs),
    /// RSS per held lock and the time to restart with them (kill -9, then ready).
    Memory(memory::MemoryArgs),
    /// Lock-cycle throughput and latency as the held state grows (issue 19).
    Scale(scale::ScaleArgs),
    /// An expiry storm under load (issue 19).
    Storm(storm::StormArgs),
    /// Heartbeats and elections while 3 nodes build and install large snapshots (issue 19).
    SnapshotCluster(snapshot_cluster::SnapshotClusterArgs),
    /// Short end-to-end check of every scenario against both targets.
    Smoke(smoke::SmokeArgs),
    /// Open-loop load at twice a node's capacity: bounded latency, flat memory,
    /// nothing refused applied, recovery at once.
    Overload(overload::OverloadArgs),
    /// Describe this machine and time synced 4 KiB appends in a directory.
    Machine {
        /// Directory to time fsyncs in.
        #[arg(long, default_value = ".")]
        dir: std::path::PathBuf,
        /// Synced writes to time.
        #[arg(long, default_value_t = 500)]
        samples: u64,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = Cli::parse().command;
    tokio::select! {
        result = run(command) => result,
        signal = stop_signal() => Err(anyhow::anyhow!(
            "stopped by {signal}; the servers it started were stopped with it"
        )),
    }
}

/// Runs one subcommand. Every server it starts is a [`process::Server`], stopped
/// and reaped when dropped, so dropping this future (on a stop signal) stops them.
async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => scenario::run(&args).await.map(drop),
        Command::Bench(args) => bench::bench(args).await,
        Command::Cluster(args) => cluster::cluster(args).await,
        Command::Memory(args) => memory::memory(args).await,
        Command::Scale(args) => scale::scale(args).await,
        Command::Storm(args) => storm::storm(args).await,
        Command::SnapshotCluster(args) => snapshot_cluster::snapshot_cluster(args).await,
        Command::Smoke(args) => smoke::smoke(args).await,
        Command::Overload(args) => overload::overload(args).await,
        Command::Machine { dir, samples } => {
            let machine = machine::describe(&dir, samples);
            println!("{}", serde_json::to_string_pretty(&machine)?);
            Ok(())
        }
    }
}

/// The first of SIGINT, SIGTERM and SIGHUP. Without this, `kill <pid>` of a bench
/// ended the tool at once and left its etcd and Baton servers running on their
/// ports (and their data behind), where they would load the next run's machine.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    );
    let (Ok(mut interrupt), Ok(mut terminate), Ok(mut hangup)) = handlers else {
        eprintln!("baton-loadtest: cannot listen for stop signals");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
        _ = hangup.recv() => "SIGHUP",
    }
}
