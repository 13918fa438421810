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
//! Every stream is one descriptor on each side. A process's open-file limit
//! (20,000 on some machines, not raisable without privileges) caps the streams
//! one client process can hold, so `--processes N` spreads the watchers over N
//! child processes of this program (`--child`: open the streams, say
//! `connected <n>` on stdout, wait for a line on stdin, then print what they
//! saw as one JSON line), while this process writes and merges the results.

// The load generator's CPU probe, shared as a source file: this binary does not
// link the `baton-loadtest` crate.
#[allow(dead_code)]
#[path = "../probe.rs"]
mod probe;

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Semaphore;

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
    /// Child processes that hold the streams (0: this process holds them).
    #[arg(long, default_value_t = 0)]
    processes: usize,
    /// Run as one of those children (internal).
    #[arg(long, hide = true)]
    child: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    watchers: usize,
    connected: usize,
    writer_cycles: u64,
    events_expected_per_watcher: u64,
    events_received: u64,
    resyncs: u64,
    failed_watchers: u64,
    server_rss_kib_before: Option<u64>,
    server_rss_kib_connected: Option<u64>,
    server_rss_kib_after: Option<u64>,
    server_kib_per_watcher: Option<f64>,
    /// The server's CPU while the writer ran, in cores.
    server_cpu_cores: Option<f64>,
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

/// Microseconds of the system clock: the writer and watchers in other
/// processes on the same machine read the same clock.
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

/// What one watcher saw.
struct Seen {
    histogram: Histogram<u64>,
    events: u64,
    resyncs: u64,
}

/// What a group of watchers saw, as a child process reports it: the latency
/// histogram as `(value, count)` pairs.
#[derive(Debug, Default, Serialize, Deserialize)]
struct GroupReport {
    events: u64,
    resyncs: u64,
    failed: u64,
    latency_us: Vec<(u64, u64)>,
}

/// Watchers opened by this process: their tasks and the signal that stops them.
struct Watchers {
    connected: usize,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<Seen>>>,
    stop: Arc<tokio::sync::Notify>,
}

impl Watchers {
    /// Opens `count` streams, at most `concurrency` at a time, and returns once
    /// each has sent its first bookmark (or failed).
    async fn open(url: &str, count: usize, concurrency: usize) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()?;
        let stop = Arc::new(tokio::sync::Notify::new());
        let permits = Arc::new(Semaphore::new(concurrency));
        let mut tasks = Vec::with_capacity(count);
        let mut ready = Vec::with_capacity(count);
        for _ in 0..count {
            let permit = permits.clone().acquire_owned().await?;
            let (signal, connected) = tokio::sync::oneshot::channel();
            tasks.push(tokio::spawn(watcher(
                client.clone(),
                url.to_owned(),
                signal,
                stop.clone(),
            )));
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
        Ok(Watchers {
            connected,
            tasks,
            stop,
        })
    }

    /// Stops every watcher and adds up what they saw.
    async fn finish(self) -> anyhow::Result<GroupReport> {
        self.stop.notify_waiters();
        let mut histogram = Histogram::<u64>::new(3)?;
        let mut report = GroupReport::default();
        for task in self.tasks {
            match task.await.context("watcher task")? {
                Ok(seen) => {
                    histogram.add(&seen.histogram)?;
                    report.events += seen.events;
                    report.resyncs += seen.resyncs;
                }
                Err(error) => {
                    report.failed += 1;
                    eprintln!("watcher failed: {error}");
                }
            }
        }
        report.latency_us = histogram
            .iter_recorded()
            .map(|value| (value.value_iterated_to(), value.count_at_value()))
            .collect();
        Ok(report)
    }
}

/// Who holds the streams: this process or its children.
enum Holders {
    Here(Watchers),
    Children(Children),
}

impl Holders {
    fn connected(&self) -> usize {
        match self {
            Holders::Here(watchers) => watchers.connected,
            Holders::Children(children) => children.connected,
        }
    }

    /// Stops the watchers; what they saw, with the merged latency histogram.
    async fn finish(self) -> anyhow::Result<(GroupReport, Histogram<u64>)> {
        match self {
            Holders::Here(watchers) => {
                let seen = watchers.finish().await?;
                let mut histogram = Histogram::<u64>::new(3)?;
                for &(value, count) in &seen.latency_us {
                    histogram.record_n(value, count)?;
                }
                Ok((seen, histogram))
            }
            Holders::Children(children) => children.finish().await,
        }
    }
}

/// `--child`: holds `--watchers` streams until a line arrives on stdin.
async fn child(args: &Args, url: &str) -> anyhow::Result<()> {
    let watchers = Watchers::open(url, args.watchers, args.connect_concurrency).await?;
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("connected {}\n", watchers.connected).as_bytes())
        .await?;
    stdout.flush().await?;
    let mut line = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut line)
        .await?;
    let report = watchers.finish().await?;
    let mut text = serde_json::to_string(&report)?;
    text.push('\n');
    stdout.write_all(text.as_bytes()).await?;
    stdout.flush().await?;
    Ok(())
}

/// The child processes holding the streams, with their pipes.
struct Children {
    children: Vec<(
        tokio::process::Child,
        BufReader<tokio::process::ChildStdout>,
    )>,
    connected: usize,
}

impl Children {
    /// Starts `processes` children sharing `watchers` streams; returns once
    /// each has opened its own.
    async fn start(args: &Args) -> anyhow::Result<Self> {
        let program = std::env::current_exe()?;
        let mut children = Vec::with_capacity(args.processes);
        let mut connected = 0;
        for index in 0..args.processes {
            let share = args.watchers / args.processes
                + usize::from(index < args.watchers % args.processes);
            let mut child = tokio::process::Command::new(&program)
                .args(["--child", "--target", &args.target])
                .args(["--watchers", &share.to_string()])
                .args([
                    "--connect-concurrency",
                    &args.connect_concurrency.to_string(),
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            let stdout = child.stdout.take().context("child stdout")?;
            children.push((child, BufReader::new(stdout)));
        }
        for (_, stdout) in &mut children {
            let mut line = String::new();
            stdout.read_line(&mut line).await?;
            let count = line
                .strip_prefix("connected ")
                .and_then(|rest| rest.trim().parse::<usize>().ok())
                .with_context(|| format!("a child said {line:?}"))?;
            connected += count;
        }
        Ok(Children {
            children,
            connected,
        })
    }

    /// Stops every child and merges their reports.
    async fn finish(self) -> anyhow::Result<(GroupReport, Histogram<u64>)> {
        let mut histogram = Histogram::<u64>::new(3)?;
        let mut total = GroupReport::default();
        for (mut child, mut stdout) in self.children {
            child
                .stdin
                .take()
                .context("child stdin")?
                .write_all(b"stop\n")
                .await?;
            let mut line = String::new();
            stdout.read_line(&mut line).await?;
            let report: GroupReport =
                serde_json::from_str(&line).with_context(|| format!("a child said {line:?}"))?;
            child.wait().await?;
            total.events += report.events;
            total.resyncs += report.resyncs;
            total.failed += report.failed;
            for (value, count) in report.latency_us {
                histogram.record_n(value, count)?;
            }
        }
        Ok((total, histogram))
    }
}

/// Opens one stream, signals once it is connected (first bookmark), then reads
/// until `stop`.
async fn watcher(
    client: reqwest::Client,
    url: String,
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
        let received = now_us();
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
    let url = format!("{base}/v1/watch?kinds=lock&prefix=fanout/");
    if args.child {
        return child(&args, &url).await;
    }
    let rss_before = rss_kib(args.server_pid);
    let holders = if args.processes == 0 {
        Holders::Here(Watchers::open(&url, args.watchers, args.connect_concurrency).await?)
    } else {
        Holders::Children(Children::start(&args).await?)
    };
    let connected = holders.connected();
    // Let the server settle before reading its memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_connected = rss_kib(args.server_pid);

    let server_cpu = args
        .server_pid
        .and_then(|pid| probe::CpuProbe::start(&pid.to_string()));
    let writer = baton_chaos::client::pooled_http_client().build()?;
    let mut cycles = 0u64;
    let until = Instant::now() + Duration::from_secs_f64(args.duration_s);
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    while Instant::now() < until {
        ticker.tick().await;
        let sent = now_us();
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
    let server_cpu_cores = server_cpu.and_then(|cpu| cpu.cores());
    // Give the last events time to reach every watcher.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_after = rss_kib(args.server_pid);
    let (seen, h) = holders.finish().await?;
    let report = Report {
        watchers: args.watchers,
        connected,
        writer_cycles: cycles,
        events_expected_per_watcher: cycles,
        events_received: seen.events,
        resyncs: seen.resyncs,
        failed_watchers: seen.failed,
        server_rss_kib_before: rss_before,
        server_rss_kib_connected: rss_connected,
        server_rss_kib_after: rss_after,
        server_kib_per_watcher: rss_before
            .zip(rss_connected)
            .map(|(before, after)| (after as f64 - before as f64) / connected.max(1) as f64),
        server_cpu_cores,
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
