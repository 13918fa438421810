//! `watch_fanout`: many concurrent watch streams on one node while a writer
//! acquires and releases a lock; reports the node's memory per watcher and the
//! event delivery latency.
//!
//! Latency is measured end to end: the writer puts the time it sent each
//! acquire into the `holder` field; every watcher parses it out of the
//! `lock.acquired` event and records "received - sent" (commit, apply and
//! fan-out together). Memory is the server's resident set (`VmRSS` of
//! `--server-pid`) before the watchers connect and once they all have.
//!
//! Needs file descriptors: `ulimit -n 65536` for both this and the server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{Mutex, Semaphore};

/// Watch fan-out load test.
#[derive(Debug, Parser)]
#[command(name = "watch_fanout", about)]
struct Args {
    /// Baton base URL.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    target: String,
    /// Concurrent watch streams.
    #[arg(long, default_value_t = 10_000)]
    watchers: usize,
    /// Streams being opened at a time.
    #[arg(long, default_value_t = 200)]
    connect_concurrency: usize,
    /// Writer cycles (acquire + release) per second.
    #[arg(long, default_value_t = 5.0)]
    rate: f64,
    /// Writer run time in seconds (after every watcher is connected).
    #[arg(long, default_value_t = 20.0)]
    duration_s: f64,
    /// The server's process id, to read its memory from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Write the JSON report here (default: stdout).
    #[arg(long)]
    report: Option<std::path::PathBuf>,
}

#[derive(Debug, Serialize)]
struct Report {
    watchers: usize,
    connected: usize,
    writer_cycles: u64,
    events_expected_per_watcher: u64,
    events_received: u64,
    resyncs: u64,
    server_rss_kib_before: Option<u64>,
    server_rss_kib_connected: Option<u64>,
    server_rss_kib_after: Option<u64>,
    server_kib_per_watcher: Option<f64>,
    delivery_latency_us: Latency,
}

#[derive(Debug, Serialize)]
struct Latency {
    samples: u64,
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    max: u64,
}

fn rss_kib(pid: Option<u32>) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
    status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// What one watcher saw.
struct Seen {
    histogram: Histogram<u64>,
    events: u64,
    resyncs: u64,
}

/// Opens one stream, signals once it is connected (first bookmark), then reads
/// until `stop`.
async fn watcher(
    client: reqwest::Client,
    url: String,
    epoch: Instant,
    connected: tokio::sync::oneshot::Sender<()>,
    stop: Arc<tokio::sync::Notify>,
) -> anyhow::Result<Seen> {
    let mut response = client.get(&url).send().await?;
    if !response.status().is_success() {
        bail!("{}", response.status());
    }
    let mut seen = Seen {
        histogram: Histogram::new(3)?,
        events: 0,
        resyncs: 0,
    };
    let mut buffer: Vec<u8> = Vec::new();
    let mut connected = Some(connected);
    let stopped = stop.notified();
    tokio::pin!(stopped);
    loop {
        let chunk = tokio::select! {
            chunk = response.chunk() => chunk?,
            _ = &mut stopped => return Ok(seen),
        };
        let Some(chunk) = chunk else {
            return Ok(seen);
        };
        let received = epoch.elapsed().as_micros() as u64;
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = buffer.drain(..end + 2).collect();
            let frame = String::from_utf8_lossy(&frame);
            if frame.contains("event: bookmark") {
                if let Some(signal) = connected.take() {
                    let _ = signal.send(());
                }
            } else if frame.contains("event: resync") {
                seen.resyncs += 1;
            } else if frame.contains("event: lock.acquired") {
                seen.events += 1;
                let sent = frame
                    .split("\"holder\":\"t=")
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
                    .and_then(|digits| digits.parse::<u64>().ok());
                if let Some(sent) = sent {
                    seen.histogram
                        .record(received.saturating_sub(sent).max(1))?;
                }
            }
        }
    }
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let base = args.target.trim_end_matches('/').to_owned();
    let epoch = Instant::now();
    let rss_before = rss_kib(args.server_pid);

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let permits = Arc::new(Semaphore::new(args.connect_concurrency));
    let url = format!("{base}/v1/watch?kinds=lock&prefix=fanout/");
    let mut tasks = Vec::with_capacity(args.watchers);
    let mut ready = Vec::with_capacity(args.watchers);
    for _ in 0..args.watchers {
        let permit = permits.clone().acquire_owned().await?;
        let (signal, connected) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(watcher(
            client.clone(),
            url.clone(),
            epoch,
            signal,
            stop.clone(),
        ));
        tasks.push(task);
        ready.push(tokio::spawn(async move {
            let ok = connected.await.is_ok();
            drop(permit);
            ok
        }));
    }
    let mut connected = 0;
    for signal in ready {
        if signal.await.unwrap_or(false) {
            connected += 1;
        }
    }
    // Let the server settle before reading its memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_connected = rss_kib(args.server_pid);

    let writer = reqwest::Client::new();
    let mut cycles = 0u64;
    let until = Instant::now() + Duration::from_secs_f64(args.duration_s);
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    while Instant::now() < until {
        ticker.tick().await;
        let sent = epoch.elapsed().as_micros() as u64;
        let grant = post(
            &writer,
            &format!("{base}/v1/locks/fanout/lock:acquire"),
            &json!({"ttl_ms": 10000, "holder": format!("t={sent}")}),
        )
        .await?;
        post(
            &writer,
            &format!("{base}/v1/locks/fanout/lock:release"),
            &json!({"lease_id": grant["lease_id"], "token": grant["token"]}),
        )
        .await?;
        cycles += 1;
    }
    // Give the last events time to reach every watcher.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_after = rss_kib(args.server_pid);
    stop.notify_waiters();

    let histogram = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let (mut events, mut resyncs) = (0, 0);
    for task in tasks {
        match task.await.context("watcher task")? {
            Ok(seen) => {
                histogram.lock().await.add(&seen.histogram)?;
                events += seen.events;
                resyncs += seen.resyncs;
            }
            Err(error) => eprintln!("watcher failed: {error}"),
        }
    }
    let h = histogram.lock().await;
    let report = Report {
        watchers: args.watchers,
        connected,
        writer_cycles: cycles,
        events_expected_per_watcher: cycles,
        events_received: events,
        resyncs,
        server_rss_kib_before: rss_before,
        server_rss_kib_connected: rss_connected,
        server_rss_kib_after: rss_after,
        server_kib_per_watcher: rss_before
            .zip(rss_connected)
            .map(|(before, after)| (after as f64 - before as f64) / connected.max(1) as f64),
        delivery_latency_us: Latency {
            samples: h.len(),
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
