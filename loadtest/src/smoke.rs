//! `baton-loadtest smoke`: a short run of every scenario against a fresh Baton and a
//! fresh etcd, checking that each report is well-formed (not a speed assertion).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;

use crate::process::Server;
use crate::report;
use crate::scenario::{self, RunArgs, Scenario};

/// `smoke` options.
#[derive(Debug, Clone, Args)]
pub struct SmokeArgs {
    /// The Baton server binary.
    #[arg(long)]
    pub baton_bin: PathBuf,
    /// The etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: PathBuf,
    /// Seconds per run.
    #[arg(long, default_value_t = 2.0)]
    pub duration_s: f64,
    /// Fail (rather than skip) watch-fanout when the server has no watch endpoint.
    #[arg(long)]
    pub require_watch: bool,
}

/// One check of the smoke run.
struct Case {
    scenario: Scenario,
    clients: usize,
    rate: Option<f64>,
}

/// Runs the smoke test; fails when any report is malformed.
pub async fn smoke(args: SmokeArgs) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("baton-loadtest-smoke-")
        .tempdir()?;
    let mut baton = Server::baton(&args.baton_bin, dir.path())?;
    let mut etcd = Server::etcd(&args.etcd_bin, dir.path())?;
    baton
        .wait_ready(Duration::from_secs(60))
        .await
        .context("baton")?;
    etcd.wait_ready(Duration::from_secs(30))
        .await
        .context("etcd")?;
    let cases = [
        Case {
            scenario: Scenario::LockCycle,
            clients: 4,
            rate: None,
        },
        Case {
            scenario: Scenario::LockCycle,
            clients: 4,
            rate: Some(100.0),
        },
        Case {
            scenario: Scenario::LockContended,
            clients: 4,
            rate: None,
        },
        Case {
            scenario: Scenario::Names,
            clients: 4,
            rate: None,
        },
        Case {
            scenario: Scenario::ElectionChurn,
            clients: 4,
            rate: None,
        },
        Case {
            scenario: Scenario::Keepalive,
            clients: 8,
            rate: None,
        },
        Case {
            scenario: Scenario::WatchFanout,
            clients: 2,
            rate: None,
        },
        Case {
            scenario: Scenario::ReadersWriters,
            clients: 8,
            rate: None,
        },
        Case {
            scenario: Scenario::Semaphore,
            clients: 8,
            rate: None,
        },
    ];
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for server in [&baton, &etcd] {
        for case in &cases {
            if !case.scenario.supports(server.kind) {
                continue;
            }
            let mode = if case.rate.is_some() || case.scenario == Scenario::Keepalive {
                "open"
            } else {
                "closed"
            };
            let label = format!("{} {} {mode}", server.kind.name(), case.scenario.name());
            let mut run = RunArgs::new(case.scenario, server.kind, &server.url);
            run.clients = case.clients;
            run.rate = case.rate;
            run.duration_s = Some(args.duration_s);
            run.leases = 200;
            run.ttl_ms = 6_000;
            run.watchers = 4;
            // Fewer permits than clients, so that some wait; a writer in every 4.
            run.limit = 3;
            run.writers_percent = 25;
            run.server_pid = Some(server.pid());
            run.no_progress = true;
            let stem = format!("{}-{}-{mode}", server.kind.name(), case.scenario.name());
            let report_path = dir.path().join(format!("{stem}.json"));
            let chart_path = dir.path().join(format!("{stem}.svg"));
            run.report = Some(report_path.clone());
            run.chart = Some(chart_path.clone());
            match scenario::run(&run).await {
                Err(e)
                    if case.scenario == Scenario::WatchFanout
                        && !args.require_watch
                        && format!("{e:#}").contains("404") =>
                {
                    skipped += 1;
                    println!("SKIP {label}: {e:#}");
                    continue;
                }
                Err(e) => {
                    failed += 1;
                    println!("FAIL {label}: {e:#}");
                    continue;
                }
                Ok(_) => {}
            }
            let mut problems = Vec::new();
            match std::fs::read_to_string(&report_path)
                .map(|t| serde_json::from_str::<serde_json::Value>(&t))
            {
                Ok(Ok(json)) => {
                    problems.extend(report::validate(&json, case.scenario.expects_no_errors()));
                    if json["server_cpu_cores"].as_f64().is_none() {
                        problems.push("no server_cpu_cores although --server-pid was given".into());
                    }
                    if matches!(
                        case.scenario,
                        Scenario::ReadersWriters | Scenario::Semaphore
                    ) {
                        problems.extend(holder_problems(case.scenario, &json));
                    }
                    if case.scenario == Scenario::Keepalive
                        && json["extra"]["expired_while_kept_alive"] != 0
                    {
                        problems.push(format!(
                            "expired_while_kept_alive = {}",
                            json["extra"]["expired_while_kept_alive"]
                        ));
                    }
                }
                Ok(Err(e)) => problems.push(format!("report is not JSON: {e}")),
                Err(e) => problems.push(format!("no report: {e}")),
            }
            let chart = std::fs::read_to_string(&chart_path).unwrap_or_default();
            if !chart.starts_with("<svg") || !chart.trim_end().ends_with("</svg>") {
                problems.push("chart is not an SVG document".into());
            }
            if problems.is_empty() {
                passed += 1;
                println!("PASS {label}");
            } else {
                failed += 1;
                println!("FAIL {label}: {}", problems.join("; "));
            }
        }
    }
    // memory: a tiny N, checking the restart brings every lock back (not its speed).
    let memory = crate::memory::MemoryArgs {
        baton_bin: args.baton_bin.clone(),
        locks: 2_000,
        clients: 8,
        locks_per_lease: 500,
        ttl_ms: 3_600_000,
        restart_timeout_s: 60.0,
        output: crate::output::OutputArgs {
            data_root: Some(dir.path().to_owned()),
            report: None,
            markdown: None,
        },
    };
    match crate::memory::measure(&memory).await {
        Ok(r) if r.locks_held_after_restart == 2_000 && r.rss_after_bytes > 0 => {
            passed += 1;
            println!(
                "PASS baton memory ({} locks, {:.0} B/lock, back after restart in {:.2} s)",
                r.locks, r.rss_per_lock_bytes, r.restart_locks_s
            );
        }
        Ok(r) => {
            failed += 1;
            println!("FAIL baton memory: {r:?}");
        }
        Err(e) => {
            failed += 1;
            println!("FAIL baton memory: {e:#}");
        }
    }
    println!("loadtest: {passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        bail!("{failed} smoke checks failed");
    }
    Ok(())
}

/// What a readers-writers or semaphore report must show: no overlap, holders
/// counted, at most the limit out; readers and writers both ran.
fn holder_problems(scenario: Scenario, json: &serde_json::Value) -> Vec<String> {
    let x = &json["extra"];
    let mut problems = Vec::new();
    if x["violations"] != 0 {
        problems.push(format!("violations = {}", x["violations"]));
    }
    let max = x["max_holders"].as_u64().unwrap_or(0);
    if max == 0 || x["mean_holders"].as_f64().is_none() {
        problems.push(format!("no holders counted: {x}"));
    }
    match scenario {
        Scenario::Semaphore if max > x["limit"].as_u64().unwrap_or(0) => {
            problems.push(format!("{max} permits out, limit {}", x["limit"]));
        }
        Scenario::ReadersWriters => {
            for who in ["readers", "writers"] {
                if x[who]["operations"].as_u64().unwrap_or(0) == 0 {
                    problems.push(format!("no {who} completed"));
                }
            }
        }
        _ => {}
    }
    problems
}
