//! `baton-loadtest overload`: an open-loop load at twice what a node can do
//! (issue 16, admission control). A fresh node with a small write queue; its
//! capacity measured closed-loop; then operations started at twice that rate
//! whatever the answers, each an acquire of a fresh lock name on the worker's
//! lease followed by its release. It checks what admission control promises:
//!
//! - admitted requests keep a bounded latency: none waits longer than the
//!   propose timeout (a write still queued then is withdrawn, not served late);
//! - memory stays flat: RSS in the second half of the overload is not above the
//!   first half's by more than a small margin (no queue grows without bound);
//! - nothing refused is applied later: after the queue drained, no lock whose
//!   acquire was refused with `overloaded` is held, and every held lock is one
//!   whose acquire was granted or had an unknown outcome;
//! - the node recovers at once: the first operations after the load all
//!   succeed.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use baton_chaos::client::pooled_http_client;
use baton_chaos::ports::free_port;
use clap::Args;
use serde::Serialize;
use serde_json::{json, Value};

use crate::process::Server;

/// `overload` options.
#[derive(Debug, Clone, Args)]
pub struct OverloadArgs {
    /// The Baton server binary.
    #[arg(long)]
    pub baton_bin: PathBuf,
    /// Length of the capacity measurement, in seconds.
    #[arg(long, default_value_t = 3.0)]
    pub capacity_s: f64,
    /// Length of the overload, in seconds.
    #[arg(long, default_value_t = 6.0)]
    pub duration_s: f64,
    /// Offered load as a multiple of the measured capacity.
    #[arg(long, default_value_t = 2.0)]
    pub factor: f64,
    /// The node's `--max-queued-proposals`.
    #[arg(long, default_value_t = 512)]
    pub max_queued: usize,
    /// The node's `--max-batch`. Small by default so that the log, not the CPU
    /// the load generator shares with the node, is what runs out: that is the
    /// overload admission control is for (a CPU-bound node on two shared cores
    /// mostly measures the generator).
    #[arg(long, default_value_t = 1)]
    pub max_batch: usize,
    /// The node's `--max-in-flight` (log entries proposed, not yet applied).
    #[arg(long, default_value_t = 1)]
    pub max_in_flight: usize,
    /// The node's `--propose-timeout-ms`: the bound on an admitted request's wait.
    #[arg(long, default_value_t = 2_000)]
    pub propose_timeout_ms: u64,
    /// Workers (each with its own lease) in the capacity run; operations of the
    /// overload take a worker's lease in turn.
    #[arg(long, default_value_t = 64)]
    pub workers: usize,
    /// Write the JSON result here (default: stdout).
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// What `overload` measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OverloadReport {
    /// Operations per second the node completed closed-loop.
    pub capacity_per_s: f64,
    /// Operations started per second during the overload.
    pub offered_per_s: f64,
    /// Operations started.
    pub started: u64,
    /// Operations whose acquire and release both succeeded.
    pub completed: u64,
    /// Acquires refused with 503 `overloaded` (certainly not applied).
    pub refused: u64,
    /// Acquires with an unknown outcome (timeouts, 503 other than `overloaded`).
    pub unknown: u64,
    /// Operations completed per second during the overload.
    pub goodput_per_s: f64,
    /// Admitted acquires' latency (send to answer), in milliseconds.
    pub admitted_p50_ms: f64,
    /// 99th percentile of the same.
    pub admitted_p99_ms: f64,
    /// Longest of the same.
    pub admitted_max_ms: f64,
    /// Longest time to a refusal, in milliseconds.
    pub refusal_max_ms: f64,
    /// Server RSS at the start of the overload, in MiB.
    pub rss_start_mib: f64,
    /// Highest RSS in the first half of the overload, in MiB.
    pub rss_first_half_max_mib: f64,
    /// Highest RSS in the second half, in MiB.
    pub rss_second_half_max_mib: f64,
    /// Locks found held after the queue drained.
    pub held_after: usize,
    /// Refused acquires whose lock was held afterwards (must be 0).
    pub refused_but_applied: usize,
    /// Held locks whose acquire was neither granted nor of unknown outcome (must be 0).
    pub unexplained_held: usize,
    /// Latency of the first operation after the load stopped, in milliseconds.
    pub first_after_ms: f64,
    /// Operations right after the load that did not succeed (must be 0).
    pub failed_after: u64,
}

/// What one acquire's answer says about whether it was applied.
enum Acquired {
    Granted(u64),
    Refused,
    Unknown,
    Failed(String),
}

struct Shared {
    client: reqwest::Client,
    url: String,
    leases: Vec<String>,
    admitted_us: Mutex<hdrhistogram::Histogram<u64>>,
    refusal_max_us: AtomicU64,
    granted: Mutex<HashSet<String>>,
    refused: Mutex<HashSet<String>>,
    unknown: Mutex<HashSet<String>>,
    completed: AtomicU64,
    failures: Mutex<Vec<String>>,
}

impl Shared {
    async fn acquire(&self, name: &str, lease: &str) -> Acquired {
        let sent = Instant::now();
        let answer = self
            .client
            .post(format!("{}/v1/locks/{name}:acquire", self.url))
            .json(&json!({"lease_id": lease}))
            .send()
            .await;
        let elapsed_us = sent.elapsed().as_micros() as u64;
        let response = match answer {
            Ok(response) => response,
            Err(_) => return Acquired::Unknown,
        };
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        match status {
            200 => {
                if let Ok(mut histogram) = self.admitted_us.lock() {
                    let _ = histogram.record(elapsed_us.max(1));
                }
                Acquired::Granted(body["token"].as_u64().unwrap_or(0))
            }
            503 if body["code"] == "overloaded" => {
                self.refusal_max_us.fetch_max(elapsed_us, Ordering::Relaxed);
                Acquired::Refused
            }
            503 | 504 => Acquired::Unknown,
            _ => Acquired::Failed(format!("acquire {name}: {status} {body}")),
        }
    }

    async fn release(&self, name: &str, lease: &str, token: u64) -> bool {
        let answer = self
            .client
            .post(format!("{}/v1/locks/{name}:release", self.url))
            .json(&json!({"lease_id": lease, "token": token}))
            .send()
            .await;
        matches!(answer, Ok(response) if response.status().is_success())
    }

    /// One operation: acquire `name` on `lease`, release it when granted.
    async fn operation(&self, name: String, lease: &str) {
        match self.acquire(&name, lease).await {
            Acquired::Granted(token) => {
                if self.release(&name, lease, token).await {
                    self.completed.fetch_add(1, Ordering::Relaxed);
                }
                insert(&self.granted, name);
            }
            Acquired::Refused => insert(&self.refused, name),
            Acquired::Unknown => insert(&self.unknown, name),
            Acquired::Failed(why) => {
                if let Ok(mut failures) = self.failures.lock() {
                    failures.push(why);
                }
            }
        }
    }
}

fn insert(set: &Mutex<HashSet<String>>, name: String) {
    if let Ok(mut set) = set.lock() {
        set.insert(name);
    }
}

fn taken(set: &Mutex<HashSet<String>>) -> HashSet<String> {
    set.lock()
        .map(|mut s| std::mem::take(&mut *s))
        .unwrap_or_default()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Every lock held now under `prefix`, by paging through the list.
async fn held_locks(
    client: &reqwest::Client,
    url: &str,
    prefix: &str,
) -> anyhow::Result<HashSet<String>> {
    let mut held = HashSet::new();
    let mut page_token: Option<String> = None;
    loop {
        let mut request = client
            .get(format!("{url}/v1/locks"))
            .query(&[("prefix", prefix), ("limit", "1000")]);
        if let Some(token) = &page_token {
            request = request.query(&[("page_token", token.as_str())]);
        }
        let page: Value = request.send().await?.error_for_status()?.json().await?;
        for lock in page["items"].as_array().into_iter().flatten() {
            if let Some(name) = lock["name"].as_str() {
                held.insert(name.to_owned());
            }
        }
        match page["next_page_token"].as_str() {
            Some(token) if !token.is_empty() => page_token = Some(token.to_owned()),
            _ => return Ok(held),
        }
    }
}

/// Runs the overload and checks its promises; the report is written either way.
pub async fn overload(args: OverloadArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let extra = vec![
        "--max-queued-proposals".to_owned(),
        args.max_queued.to_string(),
        "--propose-timeout-ms".to_owned(),
        args.propose_timeout_ms.to_string(),
        "--max-batch".to_owned(),
        args.max_batch.to_string(),
        "--max-in-flight".to_owned(),
        args.max_in_flight.to_string(),
        // Rate limits would refuse before the queue does.
        "--rate-limit".to_owned(),
        "0".to_owned(),
    ];
    let mut server = Server::baton_with(
        &args.baton_bin,
        &dir.path().join("data"),
        &dir.path().join("baton.log"),
        (free_port()?, free_port()?),
        &extra,
    )?;
    server.wait_ready(Duration::from_secs(30)).await?;
    let client = pooled_http_client()
        .pool_max_idle_per_host(4096)
        .timeout(Duration::from_millis(args.propose_timeout_ms * 3))
        .build()?;
    let mut leases = Vec::new();
    for _ in 0..args.workers.max(1) {
        let lease: Value = client
            .post(format!("{}/v1/leases", server.url))
            .json(&json!({"ttl_ms": 600_000}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        leases.push(lease["lease_id"].as_str().context("lease_id")?.to_owned());
    }
    let shared = Arc::new(Shared {
        client: client.clone(),
        url: server.url.clone(),
        leases,
        admitted_us: Mutex::new(hdrhistogram::Histogram::new(3)?),
        refusal_max_us: AtomicU64::new(0),
        granted: Mutex::new(HashSet::new()),
        refused: Mutex::new(HashSet::new()),
        unknown: Mutex::new(HashSet::new()),
        completed: AtomicU64::new(0),
        failures: Mutex::new(Vec::new()),
    });

    // Capacity: closed loop, one worker per lease.
    let capacity_end = Instant::now() + Duration::from_secs_f64(args.capacity_s);
    let capacity_start = Instant::now();
    let mut workers = Vec::new();
    for w in 0..shared.leases.len() {
        let shared = shared.clone();
        workers.push(tokio::spawn(async move {
            let mut k = 0u64;
            while Instant::now() < capacity_end {
                let lease = shared.leases[w].clone();
                shared.operation(format!("cap/{w}/{k}"), &lease).await;
                k += 1;
            }
        }));
    }
    for worker in workers {
        worker.await?;
    }
    let mut report = OverloadReport {
        capacity_per_s: shared.completed.swap(0, Ordering::Relaxed) as f64
            / capacity_start.elapsed().as_secs_f64(),
        ..OverloadReport::default()
    };
    taken(&shared.granted);
    if let Ok(mut histogram) = shared.admitted_us.lock() {
        histogram.reset();
    }
    if report.capacity_per_s < 1.0 {
        bail!("the node completed no operation in the capacity run");
    }

    // Overload: open loop at `factor` times the capacity.
    let rate = report.capacity_per_s * args.factor;
    report.offered_per_s = rate;
    let rss = Arc::new(Mutex::new(Vec::<(f64, u64)>::new()));
    let pid = server.pid();
    let overload_start = Instant::now();
    let sampler = {
        let rss = rss.clone();
        let duration = args.duration_s;
        tokio::spawn(async move {
            while overload_start.elapsed().as_secs_f64() < duration {
                if let (Ok(bytes), Ok(mut samples)) = (crate::process::rss_bytes(pid), rss.lock()) {
                    samples.push((overload_start.elapsed().as_secs_f64(), bytes));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let total = (rate * args.duration_s) as u64;
    let mut operations = Vec::with_capacity(total as usize);
    for k in 0..total {
        let due = overload_start + Duration::from_secs_f64(k as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let shared = shared.clone();
        let lease = shared.leases[k as usize % shared.leases.len()].clone();
        operations.push(tokio::spawn(async move {
            shared.operation(format!("ov/{k}"), &lease).await;
        }));
    }
    report.started = total;
    for operation in operations {
        operation.await?;
    }
    let overload_s = overload_start.elapsed().as_secs_f64();
    sampler.await?;
    report.completed = shared.completed.load(Ordering::Relaxed);
    report.goodput_per_s = report.completed as f64 / overload_s;
    if let Ok(histogram) = shared.admitted_us.lock() {
        report.admitted_p50_ms = histogram.value_at_quantile(0.5) as f64 / 1000.0;
        report.admitted_p99_ms = histogram.value_at_quantile(0.99) as f64 / 1000.0;
        report.admitted_max_ms = histogram.max() as f64 / 1000.0;
    }
    report.refusal_max_ms = shared.refusal_max_us.load(Ordering::Relaxed) as f64 / 1000.0;
    if let Ok(samples) = rss.lock() {
        let half = args.duration_s / 2.0;
        let max_of = |keep: &dyn Fn(f64) -> bool| {
            samples
                .iter()
                .filter(|(t, _)| keep(*t))
                .map(|(_, b)| *b)
                .max()
                .unwrap_or(0)
        };
        report.rss_start_mib = mib(samples.first().map_or(0, |(_, b)| *b));
        report.rss_first_half_max_mib = mib(max_of(&|t| t < half));
        report.rss_second_half_max_mib = mib(max_of(&|t| t >= half));
    }

    // Let anything still queued drain (withdrawn at its deadline), then look.
    tokio::time::sleep(Duration::from_millis(args.propose_timeout_ms + 500)).await;
    let granted = taken(&shared.granted);
    let refused = taken(&shared.refused);
    let unknown = taken(&shared.unknown);
    report.refused = refused.len() as u64;
    report.unknown = unknown.len() as u64;
    let held = held_locks(&client, &server.url, "ov/").await?;
    report.held_after = held.len();
    report.refused_but_applied = held.intersection(&refused).count();
    report.unexplained_held = held
        .iter()
        .filter(|name| !granted.contains(*name) && !unknown.contains(*name))
        .count();

    // Recovery: the next operations, one at a time, must all succeed.
    for k in 0..50 {
        let started = Instant::now();
        let lease = shared.leases[0].clone();
        let name = format!("after/{k}");
        let ok = match shared.acquire(&name, &lease).await {
            Acquired::Granted(token) => shared.release(&name, &lease, token).await,
            _ => false,
        };
        if k == 0 {
            report.first_after_ms = started.elapsed().as_secs_f64() * 1000.0;
        }
        if !ok {
            report.failed_after += 1;
        }
    }

    let text = serde_json::to_string_pretty(&report)?;
    match &args.report {
        Some(path) => std::fs::write(path, &text)?,
        None => println!("{text}"),
    }
    let failures = shared
        .failures
        .lock()
        .map(|f| f.clone())
        .unwrap_or_default();
    let mut broken = Vec::new();
    if let Some(first) = failures.first() {
        broken.push(format!(
            "{} unexpected answers, first: {first}",
            failures.len()
        ));
    }
    if report.refused == 0 {
        broken.push("nothing was refused: the load never exceeded the queue".into());
    }
    if report.admitted_max_ms > args.propose_timeout_ms as f64 + 1_000.0 {
        broken.push(format!(
            "an admitted request waited {:.0} ms, beyond the {} ms propose timeout",
            report.admitted_max_ms, args.propose_timeout_ms
        ));
    }
    // Flat: the second half may not grow past the first by more than a quarter
    // plus 64 MiB (allocator and connection noise; an unbounded queue grows by
    // far more at these rates).
    if report.rss_second_half_max_mib > report.rss_first_half_max_mib * 1.25 + 64.0 {
        broken.push(format!(
            "memory grew: {:.0} MiB in the first half, {:.0} MiB in the second",
            report.rss_first_half_max_mib, report.rss_second_half_max_mib
        ));
    }
    if report.refused_but_applied > 0 {
        broken.push(format!(
            "{} refused acquires were applied",
            report.refused_but_applied
        ));
    }
    if report.unexplained_held > 0 {
        broken.push(format!(
            "{} held locks were never granted",
            report.unexplained_held
        ));
    }
    if report.failed_after > 0 {
        broken.push(format!(
            "{} of 50 operations failed after the load",
            report.failed_after
        ));
    }
    if !broken.is_empty() {
        bail!("overload: {}", broken.join("; "));
    }
    Ok(())
}
