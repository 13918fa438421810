//! `baton-loadtest memory`: server RSS per held lock and the time to restart with that
//! state (issue 6: "RSS per held lock (1,000,000 held locks) under 1 KiB; restart of
//! that state (kill -9, then ready) under 10 s").
//!
//! A fresh Baton on a temporary data dir; a few long-TTL leases (kept alive) each hold
//! many locks; RSS before and after acquiring N locks; then SIGKILL, a restart on the
//! same data dir, and the time until `/readyz` answers 200 and until
//! `baton_locks_held` is N again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use baton_chaos::ports::free_port;
use clap::Args;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use serde::Serialize;

use crate::exposition::{count, scrape};
use crate::output::OutputArgs;
use crate::process::Server;
use crate::target::{Lease, Target, TargetKind};

/// `memory` options.
#[derive(Debug, Clone, Args)]
pub struct MemoryArgs {
    /// The Baton server binary.
    #[arg(long)]
    pub baton_bin: PathBuf,
    /// Locks to acquire and hold.
    #[arg(long, default_value_t = 1_000_000)]
    pub locks: usize,
    /// Concurrent acquires.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Locks per lease (the server is started with `--max-holdings-per-lease` at this).
    #[arg(long, default_value_t = 100_000)]
    pub locks_per_lease: usize,
    /// Lease TTL (leases are kept alive every TTL/3 while the locks are held).
    #[arg(long, default_value_t = 3_600_000)]
    pub ttl_ms: u64,
    /// Longest wait for the restarted server to be ready with every lock back.
    #[arg(long, default_value_t = 300.0)]
    pub restart_timeout_s: f64,
    /// Data root, JSON report and Markdown section.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What `memory` measured.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    /// Locks held.
    pub locks: usize,
    /// Leases holding them.
    pub leases: usize,
    /// Locks per lease at most.
    pub locks_per_lease: usize,
    /// Lease TTL, ms.
    pub ttl_ms: u64,
    /// Concurrent acquires.
    pub clients: usize,
    /// Server RSS once ready with the leases granted, before any lock, bytes.
    pub rss_before_bytes: u64,
    /// Server RSS with every lock held, bytes.
    pub rss_after_bytes: u64,
    /// (after - before) / locks.
    pub rss_per_lock_bytes: f64,
    /// Seconds to acquire them all.
    pub acquire_s: f64,
    /// Acquires per second.
    pub acquires_per_s: f64,
    /// Data dir size before the kill, bytes.
    pub data_dir_bytes: u64,
    /// From the restart (spawn) to `/readyz` 200, seconds.
    pub restart_ready_s: f64,
    /// From the restart to `baton_locks_held` = locks, seconds.
    pub restart_locks_s: f64,
    /// `baton_locks_held` once restored.
    pub locks_held_after_restart: u64,
    /// Server RSS once restored, bytes.
    pub rss_after_restart_bytes: u64,
}

/// Runs the measurement; fails when a lock is refused or the restart loses locks.
pub async fn memory(args: MemoryArgs) -> anyhow::Result<()> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = measure(&args).await?;
    args.output
        .write(&report, SECTION, || render(&report, &command))?;
    Ok(())
}

/// The measurement itself (also used by `smoke` with a small N).
pub async fn measure(args: &MemoryArgs) -> anyhow::Result<MemoryReport> {
    let dir = args.output.temp_dir("baton-memory-")?;
    let data = dir.path().join("baton-data");
    let log = dir.path().join("baton.log");
    let (port, raft_port) = (free_port()?, free_port()?);
    let per_lease = args.locks_per_lease.max(1);
    let extra = vec![
        "--max-holdings-per-lease".to_owned(),
        per_lease.to_string(),
        "--max-ttl-ms".to_owned(),
        args.ttl_ms.max(3_600_000).to_string(),
    ];
    let mut server = Server::baton_with(&args.baton_bin, &data, &log, (port, raft_port), &extra)?;
    server
        .wait_ready(Duration::from_secs(60))
        .await
        .context("baton")?;
    let target = Target::new(TargetKind::Baton, &server.url, args.clients)?;
    let n_leases = args.locks.div_ceil(per_lease).max(1);
    let mut leases = Vec::with_capacity(n_leases);
    for i in 0..n_leases {
        leases.push(target.grant(args.ttl_ms, &format!("memory-{i}")).await?);
    }
    let leases = Arc::new(leases);
    let keepalive = tokio::spawn(keep_alive(
        target.clone(),
        leases.clone(),
        Duration::from_millis(args.ttl_ms / 3),
    ));
    // Let the allocator settle after startup before the baseline.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = server.rss_bytes()?;
    eprintln!(
        "memory: {} leases, RSS before {:.1} MiB; acquiring {} locks with {} clients",
        n_leases,
        mib(rss_before),
        args.locks,
        args.clients
    );

    let started = Instant::now();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let acquired = stream::iter(0..args.locks)
        .map(|i| {
            let (target, leases, done) = (target.clone(), leases.clone(), done.clone());
            async move {
                // Fixed-width names: every lock costs the same, whatever N.
                let name = format!("mem/{i:08}");
                target
                    .acquire(&name, &leases[i / per_lease])
                    .await
                    .with_context(|| format!("acquiring {name}"))?;
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if n % 100_000 == 0 {
                    eprintln!(
                        "memory:   {n} locks held after {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.clients.max(1))
        .try_collect::<Vec<()>>()
        .await;
    let acquire_s = started.elapsed().as_secs_f64();
    acquired?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = server.rss_bytes()?;
    let held_before = locks_held(&target, &server.url).await?;
    if held_before != args.locks as u64 {
        bail!(
            "baton_locks_held is {held_before} after acquiring {} locks",
            args.locks
        );
    }
    let data_dir_bytes = dir_size(&data);
    eprintln!(
        "memory: {} locks in {acquire_s:.1} s; RSS after {:.1} MiB ({:.0} B per lock); data dir {:.1} MiB",
        args.locks,
        mib(rss_after),
        rss_after.saturating_sub(rss_before) as f64 / args.locks.max(1) as f64,
        mib(data_dir_bytes)
    );

    server.kill9()?;
    keepalive.abort();
    let restarted = Instant::now();
    let server = Server::baton_with(&args.baton_bin, &data, &log, (port, raft_port), &extra)?;
    let timeout = Duration::from_secs_f64(args.restart_timeout_s);
    let (mut ready_s, mut locks_s, mut held) = (None, None, 0);
    let probe = baton_chaos::client::pooled_http_client()
        .timeout(Duration::from_secs(5))
        .build()?;
    while locks_s.is_none() {
        if restarted.elapsed() > timeout {
            bail!(
                "restart: not ready with {} locks within {timeout:?} (ready after {ready_s:?} s, {held} locks held)",
                args.locks
            );
        }
        if ready_s.is_none() {
            let ok = probe
                .get(format!("{}/readyz", server.url))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                ready_s = Some(restarted.elapsed().as_secs_f64());
            }
        }
        if ready_s.is_some() {
            held = locks_held(&target, &server.url).await.unwrap_or(0);
            if held == args.locks as u64 {
                locks_s = Some(restarted.elapsed().as_secs_f64());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rss_after_restart = server.rss_bytes().unwrap_or(0);
    let report = MemoryReport {
        locks: args.locks,
        leases: n_leases,
        locks_per_lease: per_lease,
        ttl_ms: args.ttl_ms,
        clients: args.clients,
        rss_before_bytes: rss_before,
        rss_after_bytes: rss_after,
        rss_per_lock_bytes: rss_after.saturating_sub(rss_before) as f64 / args.locks.max(1) as f64,
        acquire_s,
        acquires_per_s: args.locks as f64 / acquire_s.max(1e-9),
        data_dir_bytes,
        restart_ready_s: ready_s.unwrap_or(f64::NAN),
        restart_locks_s: locks_s.unwrap_or(f64::NAN),
        locks_held_after_restart: held,
        rss_after_restart_bytes: rss_after_restart,
    };
    eprintln!(
        "memory: restart: ready after {:.2} s, {} locks back after {:.2} s",
        report.restart_ready_s, report.locks_held_after_restart, report.restart_locks_s
    );
    drop(server);
    Ok(report)
}

/// Keeps every lease alive every `every` until aborted.
async fn keep_alive(target: Target, leases: Arc<Vec<Lease>>, every: Duration) {
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(100)));
    tick.tick().await;
    loop {
        tick.tick().await;
        for lease in leases.iter() {
            if let Err(e) = target.keepalive(lease).await {
                eprintln!("memory: keepalive of {} failed: {e}", lease.id);
            }
        }
    }
}

/// `baton_locks_held` from the node's `/metrics`.
async fn locks_held(target: &Target, base: &str) -> anyhow::Result<u64> {
    let http = match target {
        Target::Baton(c) => c.http().clone(),
        Target::Etcd(_) => bail!("locks_held is a Baton metric"),
    };
    let text = scrape(&http, base)
        .await
        .context("no answer from /metrics")?;
    count(&text, "baton_locks_held").context("no baton_locks_held in /metrics")
}

/// Total size of the files under `path`, bytes.
fn dir_size(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The marker name of this section in BENCHMARKS.md.
pub const SECTION: &str = "memory";

/// The Markdown section.
fn render(r: &MemoryReport, command: &str) -> String {
    let per_lock_ok = r.rss_per_lock_bytes < 1024.0;
    let restart_ok = r.restart_locks_s < 10.0;
    let verdict = |ok: bool| if ok { "**met**" } else { "**not met**" };
    format!(
        "## Memory and restart (1 Baton node)\n\n\
Generated by `baton-loadtest memory`: a fresh single-node Baton (fsync on) on a temporary \
data dir; {leases} lease(s) with a {ttl} s TTL, kept alive, each holding up to \
{per_lease} locks (`--max-holdings-per-lease`); RSS (`VmRSS`) read once the leases are \
granted and again with every lock held; then `kill -9`, a restart on the same data dir, \
and `/readyz` and `/metrics` polled every 20 ms.\n\n\
Command:\n\n```\n{command}\n```\n\n\
| measure | value | target (issue 6) | |\n|---|---:|---|---|\n\
| locks held | {locks} | | |\n\
| acquire ({clients} concurrent) | {acq:.1} s ({aps:.0} locks/s) | | |\n\
| RSS before | {before:.1} MiB | | |\n\
| RSS with the locks held | {after:.1} MiB | | |\n\
| **RSS per held lock** | **{per:.0} B** | < 1 KiB | {v1} |\n\
| data dir before the kill | {disk:.1} MiB ({disk_per:.0} B per lock) | | |\n\
| restart: spawn to `/readyz` 200 | {ready:.2} s | | |\n\
| **restart: spawn to `baton_locks_held` = {locks}** | **{back:.2} s** | < 10 s | {v2} |\n\
| RSS after the restart | {rss_re:.1} MiB | | |\n\n\
RSS per held lock is (RSS with the locks held - RSS before) / locks, so it includes \
what the server keeps around while writing them (allocator slack, Raft log and snapshot \
buffers): the same state rebuilt by a restart takes less (last row). The restart time \
counts from spawning the process (the kill is not in it) to the gauge showing every \
lock, so it includes loading the last snapshot and replaying the log after it.\n",
        leases = r.leases,
        ttl = r.ttl_ms / 1000,
        per_lease = r.locks_per_lease,
        locks = r.locks,
        clients = r.clients,
        acq = r.acquire_s,
        aps = r.acquires_per_s,
        before = mib(r.rss_before_bytes),
        after = mib(r.rss_after_bytes),
        per = r.rss_per_lock_bytes,
        v1 = verdict(per_lock_ok),
        disk = mib(r.data_dir_bytes),
        disk_per = r.data_dir_bytes as f64 / r.locks.max(1) as f64,
        ready = r.restart_ready_s,
        back = r.restart_locks_s,
        v2 = verdict(restart_ok),
        rss_re = mib(r.rss_after_restart_bytes),
    )
}

/// `old` with the section between `<!-- name:begin -->` and `<!-- name:end -->`
/// replaced by `body` (appended at the end when there is none yet).
pub fn upsert_section(old: &str, name: &str, body: &str) -> String {
    let (begin, end) = (
        format!("<!-- {name}:begin -->"),
        format!("<!-- {name}:end -->"),
    );
    let block = format!("{begin}\n{}\n{end}\n", body.trim_end());
    match (old.find(&begin), old.find(&end)) {
        (Some(b), Some(e)) if e > b => {
            let after = old[e + end.len()..].trim_start_matches('\n');
            let gap = if after.is_empty() { "" } else { "\n" };
            format!("{}{block}{gap}{after}", &old[..b])
        }
        _ if old.is_empty() => block,
        _ => format!("{}\n\n{block}", old.trim_end()),
    }
}

/// Every marked section of `text`, in order, as `(name, whole block)`; `bench`
/// carries them over when it rewrites BENCHMARKS.md.
pub fn marked_sections(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(b) = rest.find("<!-- ") {
        let tail = &rest[b + 5..];
        let Some(colon) = tail.find(":begin -->") else {
            break;
        };
        let name = &tail[..colon];
        let end = format!("<!-- {name}:end -->");
        let Some(e) = rest[b..].find(&end) else {
            break;
        };
        let stop = b + e + end.len();
        out.push(rest[b..stop].to_owned());
        rest = &rest[stop..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_replaced_or_appended() {
        let doc = upsert_section("# T\n\ntext\n", "memory", "## M\n\none");
        assert!(doc.starts_with("# T\n\ntext\n\n<!-- memory:begin -->\n## M"));
        let doc2 = upsert_section(&doc, "memory", "## M\n\ntwo");
        assert!(doc2.contains("two") && !doc2.contains("one"));
        assert_eq!(doc2.matches("memory:begin").count(), 1);
        let both = upsert_section(&upsert_section(&doc2, "cluster", "## C"), "memory", "## M2");
        assert!(both.contains("<!-- memory:end -->\n\n<!-- cluster:begin -->"));
        let doc3 = upsert_section(&doc2, "cluster", "## C");
        assert_eq!(marked_sections(&doc3).len(), 2);
        assert!(marked_sections(&doc3)[1].contains("## C"));
    }

    /// A tool rewrites its whole block: a section written by hand inside one is
    /// lost at the next run. Sessions 49-59 wrote theirs inside the
    /// snapshot-cluster block, and session 62's `make bench-snapshot-cluster`
    /// deleted them (restored from git). Hand-written sections are headed with
    /// their session; generated blocks say how they were generated.
    #[test]
    fn no_section_written_by_hand_sits_in_a_generated_block_of_benchmarks_md() {
        // Read at run time, not `env!`: a test binary cargo reuses from a
        // clone elsewhere (one shared target directory) would name that
        // clone's file, perhaps deleted since.
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo");
        let path = std::path::Path::new(&dir).join("../BENCHMARKS.md");
        let text = std::fs::read_to_string(&path).expect("BENCHMARKS.md");
        let blocks = marked_sections(&text);
        assert!(blocks.len() >= 8, "{} marked blocks", blocks.len());
        for block in blocks.iter().filter(|block| block.contains("Generated by")) {
            let name = block.lines().next().unwrap_or_default();
            let by_hand: Vec<_> = block
                .lines()
                .filter(|line| line.starts_with('#') && line.contains("(session"))
                .collect();
            assert!(by_hand.is_empty(), "{name} holds {by_hand:?}");
        }
    }
}
