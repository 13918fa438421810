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
mod http;
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
use std::process::ExitCode;

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
async fn main() -> anyhow::Result<ExitCode> {
    let command = Cli::parse().command;
    // Listening before the subcommand runs any of its synchronous start (a bench
    // times fsyncs and starts two servers before it first waits), and checked first.
    let stop = StopSignals::listen();
    tokio::select! {
        biased;
        (name, number) = stop.first() => {
            eprintln!("baton-loadtest: stopped by {name}; any server it started is stopped too");
            // The shell's convention for a process a signal ended (130 for
            // Ctrl-C), so that make and CI report it as such.
            Ok(ExitCode::from(128 + number))
        }
        result = run(command) => result.map(|()| ExitCode::SUCCESS),
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

/// SIGINT, SIGTERM and SIGHUP, each unless the tool inherited it ignored (`nohup`
/// ignores SIGHUP, a shell's background job SIGINT: listening would undo that).
/// Without these, `kill <pid>` of a bench ended the tool at once and left its etcd
/// and Baton servers running on their ports (and their data behind), where they
/// would load the next run's machine.
struct StopSignals(Vec<(&'static str, u8, tokio::signal::unix::Signal)>);

impl StopSignals {
    fn listen() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let ignored = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| ignored_signals(&status))
            .unwrap_or(0);
        let wanted = [
            ("SIGINT", 2, SignalKind::interrupt()),
            ("SIGTERM", 15, SignalKind::terminate()),
            ("SIGHUP", 1, SignalKind::hangup()),
        ];
        let mut listening = Vec::new();
        for (name, number, kind) in wanted {
            if ignored & (1 << (number - 1)) != 0 {
                continue;
            }
            match signal(kind) {
                Ok(stream) => listening.push((name, number, stream)),
                Err(e) => eprintln!("baton-loadtest: cannot listen for {name}: {e}"),
            }
        }
        Self(listening)
    }

    /// The name and number of the first signal that arrives (never, if none is
    /// listened for).
    async fn first(mut self) -> (&'static str, u8) {
        let arrivals = self.0.iter_mut().map(|(name, number, stream)| {
            Box::pin(async move {
                stream.recv().await;
                (*name, *number)
            })
        });
        match arrivals.collect::<Vec<_>>() {
            arrivals if arrivals.is_empty() => std::future::pending().await,
            arrivals => futures_util::future::select_all(arrivals).await.0,
        }
    }
}

/// The signals a process ignores, from the `SigIgn:` mask of `/proc/<pid>/status`
/// (bit n-1 for signal n).
fn ignored_signals(status: &str) -> Option<u64> {
    let mask = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))?;
    u64::from_str_radix(mask.trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_signals_are_read_from_the_status_mask() {
        let status =
            "Name:\tbaton-loadtest\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000003\n";
        let mask = ignored_signals(status).expect("a mask");
        assert_eq!(mask & 1, 1, "SIGHUP (1) ignored");
        assert_eq!(mask & 2, 2, "SIGINT (2) ignored");
        assert_eq!(mask & (1 << 14), 0, "SIGTERM (15) not");
        assert_eq!(ignored_signals("Name:\tx\n"), None);
        assert_eq!(ignored_signals("SigIgn:\tzz\n"), None);
    }
}
