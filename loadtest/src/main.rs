//! `baton-loadtest`: closed-loop load against a Baton node, with a JSON report.
//!
//! Scenarios today: `lock-cycle` (each client has its own lease and loops
//! acquire -> release on its own lock). More scenarios and the etcd target come
//! with the load-test milestone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Scenario {
    /// Each client loops acquire -> release on its own lock (uncontended).
    LockCycle,
}

/// Load generator for Baton.
#[derive(Debug, Parser)]
#[command(name = "baton-loadtest", version, about)]
struct Args {
    /// Baton base URL.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    target: String,
    /// What to run.
    #[arg(long, value_enum, default_value = "lock-cycle")]
    scenario: Scenario,
    /// Concurrent closed-loop clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Run time in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Write the JSON report here (default: stdout).
    #[arg(long)]
    report: Option<std::path::PathBuf>,
}

#[derive(Debug, Serialize)]
struct Report {
    scenario: String,
    target: String,
    clients: usize,
    duration_s: f64,
    operations: u64,
    errors: u64,
    throughput_per_s: f64,
    latency_us: Latency,
}

#[derive(Debug, Serialize)]
struct Latency {
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    max: u64,
}

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<Value> {
    let response = client.post(url).json(body).send().await?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        bail!("{status}: {body}");
    }
    Ok(body)
}

async fn lock_cycle(
    client: reqwest::Client,
    base: String,
    id: usize,
    until: Instant,
    histogram: Arc<Mutex<Histogram<u64>>>,
) -> anyhow::Result<(u64, u64)> {
    let lease = post(
        &client,
        &format!("{base}/v1/leases"),
        &json!({"ttl_ms": 60000, "holder": format!("loadtest-{id}")}),
    )
    .await?;
    let lease_id = lease["lease_id"]
        .as_str()
        .context("no lease_id")?
        .to_owned();
    let (mut ok, mut errors) = (0u64, 0u64);
    let mut local = Histogram::<u64>::new(3)?;
    while Instant::now() < until {
        let started = Instant::now();
        let result = async {
            let grant = post(
                &client,
                &format!("{base}/v1/locks/loadtest/{id}:acquire"),
                &json!({"lease_id": lease_id}),
            )
            .await?;
            let token = grant["token"].as_u64().context("no token")?;
            post(
                &client,
                &format!("{base}/v1/locks/loadtest/{id}:release"),
                &json!({"lease_id": lease_id, "token": token}),
            )
            .await
        }
        .await;
        match result {
            Ok(_) => {
                ok += 1;
                local.record(started.elapsed().as_micros() as u64)?;
            }
            Err(_) => errors += 1,
        }
    }
    histogram.lock().await.add(&local)?;
    Ok((ok, errors))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.clients)
        .build()?;
    let base = args.target.trim_end_matches('/').to_owned();
    let histogram = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(args.duration_s);
    let mut tasks = Vec::new();
    for id in 0..args.clients {
        let scenario = args.scenario;
        let (client, base, histogram) = (client.clone(), base.clone(), histogram.clone());
        tasks.push(tokio::spawn(async move {
            match scenario {
                Scenario::LockCycle => lock_cycle(client, base, id, until, histogram).await,
            }
        }));
    }
    let (mut operations, mut errors) = (0, 0);
    for task in tasks {
        let (ok, failed) = task.await??;
        operations += ok;
        errors += failed;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let h = histogram.lock().await;
    let report = Report {
        scenario: format!("{:?}", args.scenario),
        target: base,
        clients: args.clients,
        duration_s: elapsed,
        operations,
        errors,
        throughput_per_s: operations as f64 / elapsed,
        latency_us: Latency {
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        },
    };
    let text = serde_json::to_string_pretty(&report)?;
    match args.report {
        Some(path) => std::fs::write(path, text)?,
        None => println!("{text}"),
    }
    Ok(())
}
