//! Writes BENCHMARKS.md from the bench results: ratios first, then absolute
//! numbers, where the time goes, the machine and the method.

use std::fmt::Write as _;

use crate::bench::{Results, Runs};
use crate::report::Report;
use crate::scenario::Scenario;

/// Medians over the rounds of one scenario on one target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Rounds summarised.
    pub rounds: usize,
    /// Operations per second.
    pub throughput: f64,
    /// Latency percentiles, µs.
    pub p50: f64,
    /// 90th percentile, µs.
    pub p90: f64,
    /// 99th percentile, µs.
    pub p99: f64,
    /// 99.9th percentile, µs.
    pub p999: f64,
    /// Largest, µs.
    pub max: f64,
    /// Errors over all rounds.
    pub errors: u64,
    /// Server CPU, cores.
    pub server_cpu: Option<f64>,
    /// Client CPU, cores.
    pub client_cpu: Option<f64>,
    /// Server fsyncs per second.
    pub fsyncs_per_s: Option<f64>,
}

impl Summary {
    /// Server CPU time per operation, µs.
    pub fn cpu_us_per_op(&self) -> Option<f64> {
        self.server_cpu
            .filter(|_| self.throughput > 0.0)
            .map(|c| c * 1e6 / self.throughput)
    }

    /// Operations per fsync.
    pub fn ops_per_fsync(&self) -> Option<f64> {
        self.fsyncs_per_s
            .filter(|f| *f > 0.0)
            .map(|f| self.throughput / f)
    }
}

/// The median of `values` (mean of the middle two for an even count).
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

/// Medians of `reports`.
pub fn summarize(reports: &[Report]) -> Option<Summary> {
    if reports.is_empty() {
        return None;
    }
    let m = |f: &dyn Fn(&Report) -> f64| median(reports.iter().map(f).collect()).unwrap_or(0.0);
    let opt = |f: &dyn Fn(&Report) -> Option<f64>| median(reports.iter().filter_map(f).collect());
    Some(Summary {
        rounds: reports.len(),
        throughput: m(&|r| r.throughput_per_s),
        p50: m(&|r| r.latency_us.p50 as f64),
        p90: m(&|r| r.latency_us.p90 as f64),
        p99: m(&|r| r.latency_us.p99 as f64),
        p999: m(&|r| r.latency_us.p999 as f64),
        max: m(&|r| r.latency_us.max as f64),
        errors: reports.iter().map(|r| r.errors).sum(),
        server_cpu: opt(&|r| r.server_cpu_cores),
        client_cpu: opt(&|r| r.client_cpu_cores),
        fsyncs_per_s: opt(&|r| r.server_fsyncs.map(|f| f as f64 / r.duration_s.max(1e-9))),
    })
}

fn ms(us: f64) -> String {
    format!("{:.2}", us / 1000.0)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "n/a".into())
}

fn yes(met: bool) -> &'static str {
    if met {
        "**met**"
    } else {
        "not met"
    }
}

/// The target of issue 6 for a scenario and whether the numbers meet it.
fn target(runs: &Runs, baton: &Summary, etcd: Option<&Summary>) -> (String, Option<bool>) {
    let ratio = etcd.map(|e| baton.throughput / e.throughput.max(1e-9));
    let p99 = etcd.map(|e| baton.p99 / e.p99.max(1e-9));
    match runs.scenario {
        Scenario::LockCycle => (
            "throughput ≥ 3x etcd and p99 ≤ etcd".into(),
            ratio.zip(p99).map(|(r, p)| r >= 3.0 && p <= 1.0),
        ),
        Scenario::LockContended => ("handoffs/s ≥ 3x etcd".into(), ratio.map(|r| r >= 3.0)),
        Scenario::Keepalive => {
            let expired = expired(&runs.baton);
            let leases = runs
                .baton
                .first()
                .and_then(|r| r.extra.get("leases"))
                .and_then(|v| v.as_u64())
                .unwrap_or(0);
            (
                "100,000 leases kept alive with < 1 core and no expiry".into(),
                baton
                    .server_cpu
                    .map(|c| c < 1.0 && expired == 0 && leases >= 100_000),
            )
        }
        _ => ("none".into(), None),
    }
}

fn expired(reports: &[Report]) -> u64 {
    reports
        .iter()
        .filter_map(|r| {
            r.extra
                .get("expired_while_kept_alive")
                .and_then(|v| v.as_u64())
        })
        .sum()
}

/// The whole document.
pub fn render(results: &Results) -> String {
    let mut out = String::new();
    header(&mut out, results);
    ratios(&mut out, results);
    absolute(&mut out, results);
    where_the_time_goes(&mut out, results);
    client_sweep(&mut out, results);
    keepalive(&mut out, results);
    watch_fanout(&mut out, results);
    shared_locks(&mut out, results, "##");
    machine_and_method(&mut out, results);
    out
}

/// A section of BENCHMARKS.md (`bench --section NAME`) for a run of some of the
/// scenarios: the command, the ratios, the absolute numbers, the details of the
/// issue-17 scenarios and the machine, under one `##` heading.
pub fn render_section(results: &Results) -> String {
    let a = &results.args;
    let m = &results.machine;
    let mut out = String::new();
    let names: Vec<&str> = results.runs.iter().map(|r| r.scenario.name()).collect();
    let _ = writeln!(
        out,
        "## Shared locks and semaphores (issue 17): Baton / etcd's recipes\n"
    );
    let _ = writeln!(
        out,
        "Generated by `make bench-shared` (`baton-loadtest bench --section ...`) on {} (do not edit by hand; rerun it; \
         `make bench` keeps this section). Scenarios {}; both servers single-node on loopback, fsync on, \
         {} round(s) of {} s per scenario and target, alternating Baton and etcd; medians over the rounds. \
         `lock-cycle` is there for reference, measured in the same run. Machine: {} (`nproc` = {}), \
         synced 4 KiB write p50 {} µs before the runs and {} µs after, load average {} before and {} after.\n",
        results.date,
        names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "),
        a.rounds,
        a.duration_s,
        m.cpu_model,
        m.nproc,
        m.fsync.p50_us,
        results.fsync_end.p50_us,
        m.loadavg,
        results.loadavg_end
    );
    let _ = writeln!(out, "Command:\n\n```\n{}\n```\n", results.command);
    let mut body = String::new();
    ratios(&mut body, results);
    absolute(&mut body, results);
    // One level down: these are subsections of this section.
    let body = body
        .replace("## Baton / etcd\n", "### Baton / etcd\n")
        .replace(
            "## Absolute numbers (medians)\n",
            "### Absolute numbers (medians)\n",
        );
    out.push_str(&body);
    shared_locks(&mut out, results, "###");
    out
}

/// The median over `reports` of a number inside `extra` (`path` of keys).
fn extra_median(reports: &[Report], path: &[&str]) -> Option<f64> {
    median(
        reports
            .iter()
            .filter_map(|r| {
                let mut v = r.extra.get(path[0])?;
                for k in &path[1..] {
                    v = v.get(k)?;
                }
                v.as_f64()
            })
            .collect(),
    )
}

/// readers-writers and semaphore: readers and writers apart, the holders the
/// clients counted, and how each target implements them.
fn shared_locks(out: &mut String, results: &Results, h: &str) {
    let rw = results
        .runs
        .iter()
        .find(|r| r.scenario == Scenario::ReadersWriters);
    let sem = results
        .runs
        .iter()
        .find(|r| r.scenario == Scenario::Semaphore);
    if rw.is_none() && sem.is_none() {
        return;
    }
    let _ = writeln!(out, "{h} readers-writers and semaphore in detail\n");
    let _ = writeln!(
        out,
        "The clients count the holders themselves: each counts itself in when its grant \
         arrives and out before it sends its release, so what they count lies inside what \
         the server granted. A writer beside anyone, or more holders than the limit, fails \
         the run. *mean holders* is the sum of the holding times over the run's length \
         (how much of the lock or the semaphore was in use).\n"
    );
    if let Some(runs) = rw {
        let _ = writeln!(out, "| readers-writers | rounds | hold ms | reader ops/s | reader p50 ms | reader p99 ms | writer ops/s | writer p50 ms | writer p99 ms | most readers together | mean holders | overlaps |");
        let _ = writeln!(
            out,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (kind, reports) in [
            ("Baton", &runs.baton),
            ("etcd (RWMutex recipe)", &runs.etcd),
        ] {
            if reports.is_empty() {
                continue;
            }
            let x = |p: &[&str]| extra_median(reports, p);
            let lat = |who: &str, q: &str| opt(x(&[who, "latency_us", q]).map(|us| us / 1000.0), 2);
            let _ = writeln!(
                out,
                "| {kind} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                reports.len(),
                opt(x(&["hold_ms"]), 0),
                opt(x(&["readers", "throughput_per_s"]), 0),
                lat("readers", "p50"),
                lat("readers", "p99"),
                opt(x(&["writers", "throughput_per_s"]), 0),
                lat("writers", "p50"),
                lat("writers", "p99"),
                opt(x(&["max_readers"]), 0),
                opt(x(&["mean_holders"]), 1),
                reports
                    .iter()
                    .filter_map(|r| r.extra.get("violations").and_then(|v| v.as_u64()))
                    .sum::<u64>()
            );
        }
        let _ = writeln!(out);
    }
    if let Some(runs) = sem {
        let _ = writeln!(out, "| semaphore | rounds | limit | hold ms | ops/s | p50 ms | p99 ms | most permits out together | mean permits out | over the limit |");
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (kind, reports) in [
            ("Baton", &runs.baton),
            ("etcd (semaphore recipe)", &runs.etcd),
        ] {
            let Some(s) = summarize(reports) else {
                continue;
            };
            let x = |p: &[&str]| extra_median(reports, p);
            let _ = writeln!(
                out,
                "| {kind} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} |",
                s.rounds,
                opt(x(&["limit"]), 0),
                opt(x(&["hold_ms"]), 0),
                s.throughput,
                ms(s.p50),
                ms(s.p99),
                opt(x(&["max_holders"]), 0),
                opt(x(&["mean_holders"]), 1),
                reports
                    .iter()
                    .filter_map(|r| r.extra.get("violations").and_then(|v| v.as_u64()))
                    .sum::<u64>()
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "How each target does it (same client pool, same closed loop, each client on its own \
         lease):\n\n\
         - **Baton**: one request per acquire, `POST /v1/locks/{{name}}:acquire` with `mode` \
         `shared` or `exclusive`, or `POST /v1/semaphores/{{name}}:acquire` with `limit` and \
         `permits: 1`, both with `wait_ms`: the server queues the request (FIFO, a queued \
         writer blocks later readers) and answers when it is granted. One release request.\n\
         - **etcd, readers-writers**: the RWMutex of `clientv3/experimental/recipes` over the \
         HTTP/JSON gateway. A `/v3/kv/txn` creates `<prefix>/read/<id>` or \
         `<prefix>/write/<id>` on the lease (put if absent); then a `/v3/kv/range` finds the \
         last key with a lower revision that blocks it (a reader: under `write/`; a writer: \
         under either), and a `/v3/watch` stream from the own revision waits for that key's \
         deletion, then the range again, until nothing blocks. Release = `/v3/kv/deleterange` \
         of the own key.\n\
         - **etcd, semaphore**: etcd has no semaphore recipe; this one is the same pattern: a \
         key under `<prefix>/` on the lease, a range of the keys up to the own one sorted by \
         create revision; the client holds a permit once its key is among the first `limit`, \
         otherwise it watches the deletion of the key just before its own and looks again. \
         The wait is on one key, as the lock recipes do, so a waiter whose predecessor still \
         holds does not notice a permit freed further ahead until that predecessor releases: \
         waiters move up one after the other, and *mean permits out* shows what that costs. \
         The ratio is that of this recipe, not of the best an etcd client could do (a watch \
         on the whole prefix would wake every waiter at every release instead, a herd of \
         ranges; not measured).\n\
         - Each etcd wait opens its own watch stream (an HTTP/1.1 request whose answer is the \
         stream), closed once the deletion arrives: the gateway has no way to share one \
         stream between waits of independent requests without a streaming request body.\n"
    );
}

/// The title, what generated the document, and the command.
fn header(out: &mut String, results: &Results) {
    let a = &results.args;
    let _ = writeln!(out, "# Benchmarks: Baton side by side with etcd\n");
    let _ = writeln!(
        out,
        "Generated by `make bench` (`baton-loadtest bench`) on {} (do not edit by hand; rerun it). Same machine, same \
         run, same client (`baton-loadtest`), both servers single-node on loopback with \
         durable writes (fsync on). Each shared scenario ran {} round(s) of {} s per target, \
         alternating Baton and etcd; the numbers are the medians over the rounds.\n",
        results.date, a.rounds, a.duration_s
    );
    let _ = writeln!(out, "Command:\n\n```\n{}\n```\n", results.command);
    let _ = writeln!(
        out,
        "**Baton binary:** {}. **etcd:** the Debian package (Go release build).\n",
        a.baton_build()
    );
}

/// The ratio table: Baton over etcd per scenario, and the runs that failed.
fn ratios(out: &mut String, results: &Results) {
    let _ = writeln!(out, "## Baton / etcd\n");
    let _ = writeln!(out, "| scenario | clients | Baton ops/s | etcd ops/s | throughput ratio | Baton p99 ms | etcd p99 ms | p99 ratio | server CPU per op ratio | target (issue 6) | |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
    for runs in &results.runs {
        let (Some(b), e) = (summarize(&runs.baton), summarize(&runs.etcd)) else {
            continue;
        };
        let (goal, met) = target(runs, &b, e.as_ref());
        let met = met.map(yes).unwrap_or("");
        match e {
            Some(e) => {
                // keepalive runs at a fixed rate on both: its throughput ratio says nothing.
                let ratio = if runs.scenario == Scenario::Keepalive {
                    "(fixed rate)".to_owned()
                } else {
                    format!("**{:.2}x**", b.throughput / e.throughput.max(1e-9))
                };
                let cpu = b
                    .cpu_us_per_op()
                    .zip(e.cpu_us_per_op())
                    .map(|(b, e)| format!("{:.2}", b / e.max(1e-9)))
                    .unwrap_or_else(|| "n/a".into());
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.0} | {:.0} | {ratio} | {} | {} | {:.2} | {cpu} | {goal} | {met} |",
                    runs.scenario.name(),
                    runs.clients,
                    b.throughput,
                    e.throughput,
                    ms(b.p99),
                    ms(e.p99),
                    b.p99 / e.p99.max(1e-9)
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.0} | (Baton only) | | {} | | | | {goal} | {met} |",
                    runs.scenario.name(),
                    runs.clients,
                    b.throughput,
                    ms(b.p99)
                );
            }
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "One operation is: {}.\n",
        results
            .runs
            .iter()
            .map(|r| format!("`{}` = {}", r.scenario.name(), r.scenario.operation()))
            .collect::<Vec<_>>()
            .join("; ")
    );
    if results
        .runs
        .iter()
        .any(|r| r.scenario == Scenario::LockContended)
    {
        let _ = writeln!(
            out,
            "Reading `lock-contended`: a handoff is a release that must be durable before the \
             next waiter is told, and that waiter's release can only be sent once it has \
             heard. One fsync plus one client round trip is on the critical path of every \
             handoff, on both servers; a ratio above 1x comes only from the rest of the path \
             (CPU per request, the waiters' re-enqueues sharing the release's fsync).\n"
        );
    }
    let failures = failed_runs(results);
    if !failures.is_empty() {
        let _ = writeln!(out, "Runs that failed:\n");
        for f in failures {
            let _ = writeln!(out, "- {}", f.replace('\n', " "));
        }
        let _ = writeln!(out);
    }
}

/// Every target's medians, with the per-round figures.
fn absolute(out: &mut String, results: &Results) {
    let _ = writeln!(out, "## Absolute numbers (medians)\n");
    let _ = writeln!(
        out,
        "The machine is shared (see the load average and the synced-write latency before \
         and after the runs under Machine): a round that disagrees with the others in \
         *ops/s per round* was most likely slowed by other work, which is why each \
         scenario alternates targets and reports the median.\n"
    );
    let _ = writeln!(out, "| scenario | target | rounds | ops/s | ops/s per round | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | errors | server CPU (cores) | server CPU µs/op | fsyncs/s | ops/fsync | client CPU (cores) |");
    let _ = writeln!(
        out,
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for runs in &results.runs {
        for (kind, reports) in [("baton", &runs.baton), ("etcd", &runs.etcd)] {
            let Some(s) = summarize(reports) else {
                continue;
            };
            let _ = writeln!(
                out,
                "| {} | {kind} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                runs.scenario.name(), s.rounds, s.throughput,
                reports.iter().map(|r| format!("{:.0}", r.throughput_per_s)).collect::<Vec<_>>().join(", "),
                ms(s.p50), ms(s.p90), ms(s.p99), ms(s.p999), ms(s.max),
                s.errors, opt(s.server_cpu, 2), opt(s.cpu_us_per_op(), 0), opt(s.fsyncs_per_s, 0),
                opt(s.ops_per_fsync(), 1), opt(s.client_cpu, 2)
            );
        }
    }
    let _ = writeln!(out);
}

/// The fsync floor and the fsyncs each server made.
fn where_the_time_goes(out: &mut String, results: &Results) {
    let f = &results.machine.fsync;
    let _ = writeln!(out, "## Where the time goes\n");
    let _ = writeln!(
        out,
        "One synced 4 KiB append (`write` + `fdatasync`, {} samples in the servers' data \
         directory, appending without preallocation) takes p50 {} µs, mean {:.0} µs, p99 {} µs: \
         one writer syncing back to back gets at most **{:.0} synced writes/s**. A server \
         goes beyond that only by putting many operations in one fsync (and by overlapping \
         fsyncs, which the counts below show both servers do: a preallocated WAL syncs \
         faster than this probe, and the disk serves concurrent flushes).\n",
        f.samples,
        f.p50_us,
        f.mean_us,
        f.p99_us,
        f.limit_per_s()
    );
    if results.fsyncs_counted {
        let _ = writeln!(out, "fsyncs are `fsync` + `fdatasync` calls of the server process counted with `perf stat` on the syscall tracepoints during the measured phase (etcd also syncs its bbolt backend, Baton only its RocksDB WAL).\n");
        for runs in &results.runs {
            for (kind, reports) in [("Baton", &runs.baton), ("etcd", &runs.etcd)] {
                let Some(s) = summarize(reports) else {
                    continue;
                };
                if let Some(fps) = s.fsyncs_per_s {
                    let _ = writeln!(
                        out,
                        "- `{}` on {kind}: {:.0} ops/s, {:.0} fsyncs/s, {} operations per fsync, {} µs of server CPU per operation ({} cores).",
                        runs.scenario.name(), s.throughput, fps, opt(s.ops_per_fsync(), 1),
                        opt(s.cpu_us_per_op(), 0), opt(s.server_cpu, 2)
                    );
                }
            }
        }
        let _ = writeln!(out);
    } else {
        let _ = writeln!(out, "fsyncs were not counted: `perf stat` could not count syscall tracepoints on this machine.\n");
    }
}

/// Why runs failed: the shared scenarios', the sweep's and the latency
/// configuration's.
fn failed_runs(results: &Results) -> Vec<&String> {
    results
        .runs
        .iter()
        .chain(&results.sweep)
        .chain(&results.lone_latency)
        .filter_map(|r| r.failure.as_ref())
        .collect()
}

/// lock-cycle by number of clients.
fn client_sweep(out: &mut String, results: &Results) {
    let a = &results.args;
    if !results.sweep.is_empty() {
        let _ = writeln!(out, "## lock-cycle by number of clients\n");
        let _ = writeln!(out, "One round each (the {}-client row above is the median of {} rounds, the 1-client row of {}). More clients put more requests in each fsync: where throughput keeps growing with clients the server is bound by latency (fsync + request path), not by CPU.\n", a.lock_cycle_clients, a.rounds, a.lone_client_rounds.max(1));
        let _ = writeln!(out, "| clients | Baton ops/s | etcd ops/s | ratio | Baton p50 ms | etcd p50 ms | Baton p99 ms | etcd p99 ms | Baton fsyncs/s | Baton ops/fsync | etcd ops/fsync | Baton CPU (cores) | etcd CPU (cores) |");
        let _ = writeln!(
            out,
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        let mut rows: Vec<&Runs> = results.sweep.iter().collect();
        rows.extend(
            results
                .runs
                .iter()
                .filter(|r| r.scenario == Scenario::LockCycle),
        );
        rows.sort_by_key(|r| r.clients);
        let lone = rows.iter().find(|r| r.clients == 1).copied();
        for runs in rows {
            let (Some(b), Some(e)) = (summarize(&runs.baton), summarize(&runs.etcd)) else {
                continue;
            };
            let _ = writeln!(
                out,
                "| {} | {:.0} | {:.0} | **{:.2}x** | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                runs.clients,
                b.throughput,
                e.throughput,
                b.throughput / e.throughput.max(1e-9),
                ms(b.p50),
                ms(e.p50),
                ms(b.p99),
                ms(e.p99),
                opt(b.fsyncs_per_s, 0),
                opt(b.ops_per_fsync(), 1),
                opt(e.ops_per_fsync(), 1),
                opt(b.server_cpu, 2),
                opt(e.server_cpu, 2)
            );
        }
        let _ = writeln!(out);
        if let Some(lone) = lone {
            one_client(out, results, lone);
        }
    }
}

/// Issue 19's single-client target, judged for Baton's defaults and for the
/// configuration measured with `--latency-args`, with etcd beside them. A
/// configuration whose runs all failed has no row (its reason is under "Runs that
/// failed").
fn one_client(out: &mut String, results: &Results, lone: &Runs) {
    // A probe that failed reads 0; the other one stands alone then.
    let probes = [results.machine.fsync.p50_us, results.fsync_end.p50_us];
    let fsync_us = probes.into_iter().filter(|us| *us > 0).min().unwrap_or(0) as f64;
    let floor_us = OneClient::floor_us(fsync_us);
    let latency_args = results.args.latency_args.trim();
    let latency = results
        .lone_latency
        .as_ref()
        .and_then(|r| summarize(&r.baton));
    let rows = [
        ("Baton, defaults".to_owned(), summarize(&lone.baton), true),
        (format!("Baton, `{latency_args}`"), latency.clone(), true),
        ("etcd".to_owned(), summarize(&lone.etcd), false),
    ];
    let _ = writeln!(out, "### One client (issue 19)\n");
    let _ = writeln!(
        out,
        "A lock cycle is two synced writes, so its floor is 2 x the synced-write p50 (the lower of the probes before and after the runs, {fsync_us} µs) = {} ms. Target: p50 within 0.3 ms of that ({} ms) and p99 <= 3 ms. Medians over the rounds, the servers in turn; each Baton configuration on a fresh node of its own.\n",
        ms(floor_us),
        ms(floor_us + OneClient::SLACK_US),
    );
    let _ = writeln!(
        out,
        "| server | rounds | p50 ms | p99 ms | cycles/s | server CPU (cores) | target |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---|");
    for (name, summary, judged) in rows {
        let Some(s) = summary else { continue };
        let verdict = if judged {
            let met = OneClient::judge(s.p50, s.p99, fsync_us).met;
            format!("**{}**", if met { "met" } else { "not met" })
        } else {
            "(reference)".to_owned()
        };
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {:.0} | {} | {verdict} |",
            s.rounds,
            ms(s.p50),
            ms(s.p99),
            s.throughput,
            opt(s.server_cpu, 2)
        );
    }
    let _ = writeln!(out);
    // Said only of what was measured, and only of the flag it is about.
    let workers = latency.is_some()
        && results
            .args
            .latency_flags()
            .iter()
            .any(|f| f.starts_with("--http-workers"));
    let threads = if workers {
        format!(
            "Baton's defaults serve the client API on the runtime's one thread (the fewest CPU cycles per request: about half the workers' for a lone client, four fifths with many); `{latency_args}` gives it threads of its own, which spin between a lone request's steps: a lower lone-client p50 for more CPU (ARCHITECTURE.md, \"Threads\"). "
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{threads}Idle CPUs: {}.{}\n",
        results.machine.cpu_idle,
        if results.machine.cpu_idle.never_polls() {
            " This virtual machine halts an idle vCPU without polling first, so each of a lone request's waits ends with a wake-up through the host (Baton's BENCHMARKS.md, \"The lone client and the guest's halt polling\")."
        } else {
            ""
        }
    );
}

/// The single-client target of issue 19: a lock cycle's p50 within 0.3 ms of
/// two synced writes, and its p99 at most 3 ms.
#[derive(Debug, PartialEq)]
struct OneClient {
    /// Two synced writes, in µs.
    floor_us: f64,
    /// Both halves of the target hold.
    met: bool,
}

impl OneClient {
    /// What the p50 may exceed the floor by.
    const SLACK_US: f64 = 300.0;
    /// The highest p99 allowed.
    const P99_US: f64 = 3_000.0;

    /// Two synced writes of `fsync_p50_us` each.
    fn floor_us(fsync_p50_us: f64) -> f64 {
        2.0 * fsync_p50_us
    }

    fn judge(p50_us: f64, p99_us: f64, fsync_p50_us: f64) -> OneClient {
        let floor_us = Self::floor_us(fsync_p50_us);
        OneClient {
            floor_us,
            met: p50_us <= floor_us + Self::SLACK_US && p99_us <= Self::P99_US,
        }
    }
}

/// The keepalive scenario in words.
fn keepalive(out: &mut String, results: &Results) {
    if let Some(runs) = results
        .runs
        .iter()
        .find(|r| r.scenario == Scenario::Keepalive)
    {
        let _ = writeln!(out, "## keepalive\n");
        for (kind, reports) in [("Baton", &runs.baton), ("etcd", &runs.etcd)] {
            for r in reports {
                let x = |k: &str| extra_text(r, k);
                let _ = writeln!(
                    out,
                    "- {kind}: {} leases, TTL {} ms, each kept alive every {} ms by {} clients ({:.0} keepalives/s intended, {:.0}/s done) for {:.0} s after granting them in {:.1} s; **{} expired while kept alive**; keepalive p99 {} ms (from the intended time); server CPU {} cores.",
                    x("leases"), x("ttl_ms"), x("keepalive_every_ms"), r.clients, r.rate_per_s.unwrap_or(0.0),
                    r.throughput_per_s, r.duration_s,
                    r.extra.get("setup_s").and_then(|v| v.as_f64()).unwrap_or(0.0),
                    x("expired_while_kept_alive"), ms(r.latency_us.p99 as f64), opt(r.server_cpu_cores, 2)
                );
            }
        }
        let _ = writeln!(out);
    }
}

/// The watch fan-out scenario in words.
fn watch_fanout(out: &mut String, results: &Results) {
    if let Some(runs) = results
        .runs
        .iter()
        .find(|r| r.scenario == Scenario::WatchFanout)
    {
        let _ = writeln!(out, "## watch-fanout (Baton only)\n");
        match (runs.baton.first(), &runs.failure) {
            (Some(r), _) => {
                let x = |k: &str| extra_text(r, k);
                let _ = writeln!(
                    out,
                    "{} watchers, {} writers: {} events written, {} deliveries, {} missed; delivery latency (write sent -> event received) p50 {} ms, p99 {} ms, max {} ms.\n",
                    x("watchers"), r.clients, x("events_written"), x("deliveries"), x("missed_deliveries"),
                    ms(r.latency_us.p50 as f64), ms(r.latency_us.p99 as f64), ms(r.latency_us.max as f64)
                );
            }
            (None, Some(why)) => {
                let _ = writeln!(out, "Not measured: {}\n", why.replace('\n', " "));
            }
            (None, None) => {}
        }
    }
}

/// The machine, the versions and how the runs were made.
fn machine_and_method(out: &mut String, results: &Results) {
    let a = &results.args;
    let f = &results.machine.fsync;
    let m = &results.machine;
    let _ = writeln!(out, "## Machine\n");
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| CPU | {} (`nproc` = {}) |", m.cpu_model, m.nproc);
    let _ = writeln!(out, "| kernel | {} |", m.kernel);
    let _ = writeln!(out, "| memory | {} |", m.memory);
    let _ = writeln!(out, "| idle CPUs | {} |", m.cpu_idle);
    let _ = writeln!(out, "| data directory filesystem | {} |", m.filesystem);
    let _ = writeln!(
        out,
        "| synced 4 KiB write | before the runs: p50 {} µs, mean {:.0} µs, p99 {} µs; after: p50 {} µs, mean {:.0} µs, p99 {} µs |",
        f.p50_us, f.mean_us, f.p99_us, results.fsync_end.p50_us, results.fsync_end.mean_us, results.fsync_end.p99_us
    );
    let _ = writeln!(
        out,
        "| load average (1, 5, 15 min) | before the runs: {}; after: {} (other work on the machine, e.g. builds, shares its cores and disk) |",
        m.loadavg, results.loadavg_end
    );
    for (name, version) in &results.versions {
        let _ = writeln!(out, "| {name} | {version} |");
    }
    let _ = writeln!(out);

    let _ = writeln!(out, "## Method\n");
    let _ = writeln!(
        out,
        "- Closed loop: each client sends its next operation when the previous one is \
         answered; latency is per operation (all its requests). One pool of HTTP/1.1 \
         keep-alive connections per run (hyper, driven by the tool: \
         `loadtest/src/http.rs`), with an idle connection per client.\n\
         - keepalive is open loop: lease *i* is due every TTL/3 on a fixed schedule, and \
         latency counts from the intended time, so a late keepalive shows as latency \
         (no coordinated omission).\n\
         - The load generator runs on the same {}-core machine as the server it measures \
         and competes with it for CPU (its own CPU is in the table): on a 2-core machine \
         this caps both servers, so the ratios matter more than the absolute numbers.\n\
         - Baton: `baton serve` with defaults (max batch 1024); the 1-client lock cycle \
         on two fresh nodes, one with the defaults and one with `--latency-args`. etcd: `etcd` with defaults \
         (fsync on, `--quota-backend-bytes` 8 GiB), its v3 HTTP/JSON gateway (`/v3/lock/lock`, \
         `/v3/lease/*`, `/v3/election/*`, `/v3/kv/txn`). On etcd a lock acquire waits without \
         bound; on Baton with `wait_ms` = 60000.\n\
         - Charts (latency over time, throughput, distribution; last round of each target): {}.\n\
         - Raw reports: `{}/<scenario>-<target>-r<round>.json` (other client counts \
         `-c<clients>`, one client `-c1-r<round>-<configuration>`).",
        m.nproc,
        results
            .runs
            .iter()
            .filter(|r| r.scenario != Scenario::WatchFanout || !r.baton.is_empty())
            .map(|r| format!(
                "[{0}]({1}/{0}.svg)",
                r.scenario.name(),
                a.results_dir.display()
            ))
            .collect::<Vec<_>>()
            .join(", "),
        a.results_dir.display()
    );
}

/// A report's extra value `key` as text, `?` when it is missing.
fn extra_text(report: &Report, key: &str) -> String {
    report
        .extra
        .get(key)
        .map(|v| v.to_string())
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![f64::NAN, 1.0]), Some(1.0));
    }

    #[test]
    fn one_client_is_judged_against_two_synced_writes() {
        // Floor 2 x 150 = 300 µs: a p50 up to 600 µs passes, with a p99 up to 3 ms.
        assert_eq!(
            OneClient::judge(600.0, 3_000.0, 150.0),
            OneClient {
                floor_us: 300.0,
                met: true
            }
        );
        assert!(
            !OneClient::judge(601.0, 900.0, 150.0).met,
            "p50 too far above"
        );
        assert!(!OneClient::judge(450.0, 3_001.0, 150.0).met, "p99 too high");
    }

    /// A 1-client lock-cycle report: p50 and p99 (µs), cycles/s, server cores.
    fn lone_report(kind: &str, (p50, p99): (u64, u64), throughput: f64, cores: f64) -> Report {
        serde_json::from_value(serde_json::json!({
            "scenario": "lock-cycle", "target_kind": kind, "target": "http://x",
            "mode": "closed", "clients": 1, "rate_per_s": null, "duration_s": 10.0,
            "operations": 10_000, "errors": 0, "errors_by_code": {},
            "throughput_per_s": throughput,
            "latency_us": {"p50": p50, "p90": p50, "p99": p99, "p999": p99, "max": p99,
                           "mean": p50 as f64},
            "operation": "x", "server_cpu_cores": cores, "client_cpu_cores": null,
            "server_fsyncs": null, "extra": {}, "timeline": [], "distribution": []
        }))
        .expect("a report")
    }

    fn lone_runs(baton: Vec<Report>, etcd: Vec<Report>, failure: Option<&str>) -> Runs {
        Runs {
            scenario: Scenario::LockCycle,
            clients: 1,
            baton,
            etcd,
            failure: failure.map(str::to_owned),
        }
    }

    /// Three rounds of the defaults (median p50 900 µs) and of etcd, a synced write
    /// of 150 µs (target 0.60 ms).
    fn lone_results(latency_args: &str, defaults: Vec<Report>, latency: Option<Runs>) -> Results {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: crate::bench::BenchArgs,
        }
        let args =
            Cli::try_parse_from(["bench", "--baton-bin", "b", "--latency-args", latency_args])
                .expect("bench arguments")
                .args;
        let fsync = crate::machine::FsyncLatency {
            p50_us: 150,
            ..Default::default()
        };
        let machine = crate::machine::Machine {
            nproc: "2".into(),
            cpu_model: "x".into(),
            kernel: "x".into(),
            memory: "x".into(),
            cpu_idle: crate::cpu_idle::CpuIdle::default(),
            filesystem: "x".into(),
            fsync: fsync.clone(),
            loadavg: "0".into(),
        };
        let etcd = [1_500, 1_600, 1_400].map(|p50| lone_report("etcd", (p50, 4_000), 600.0, 1.0));
        Results {
            command: "bench".into(),
            date: "today".into(),
            machine,
            versions: vec![],
            args,
            runs: vec![],
            sweep: vec![lone_runs(defaults, etcd.to_vec(), None)],
            lone_latency: latency,
            fsyncs_counted: false,
            fsync_end: fsync,
            loadavg_end: "0".into(),
        }
    }

    fn defaults() -> Vec<Report> {
        [950, 900, 700]
            .map(|p50| lone_report("baton", (p50, 1_500), 1_100.0, 0.52))
            .to_vec()
    }

    /// The latency configuration's runs: these reports, no failure.
    fn latency_runs(reports: &[Report]) -> Option<Runs> {
        Some(lone_runs(reports.to_vec(), vec![], None))
    }

    /// The "lock-cycle by number of clients" section of `results`.
    fn sweep_text(results: &Results) -> String {
        let mut out = String::new();
        client_sweep(&mut out, results);
        out
    }

    #[test]
    fn one_client_is_judged_for_the_defaults_and_the_latency_configuration() {
        // Target 2 x 150 + 300 = 600 µs: the defaults' median 0.90 ms misses it, the
        // latency configuration's 0.55 ms (two rounds) meets it, etcd is not judged.
        let latency = [550, 500].map(|p50| lone_report("baton", (p50, 1_000), 1_700.0, 1.45));
        let results = lone_results("--http-workers 2", defaults(), latency_runs(&latency));
        let out = sweep_text(&results);
        assert!(
            out.contains("= 0.30 ms. Target: p50 within 0.3 ms of that (0.60 ms)"),
            "{out}"
        );
        assert!(
            out.contains("| Baton, defaults | 3 | 0.90 | 1.50 | 1100 | 0.52 | **not met** |"),
            "{out}"
        );
        assert!(
            out.contains("| Baton, `--http-workers 2` | 2 | 0.53 | 1.00 | 1700 | 1.45 | **met** |"),
            "{out}"
        );
        assert!(
            out.contains("| etcd | 3 | 1.50 | 4.00 | 600 | 1.00 | (reference) |"),
            "{out}"
        );
        assert!(
            out.contains("`--http-workers 2` gives it threads of its own"),
            "{out}"
        );
        assert!(failed_runs(&results).is_empty());
    }

    #[test]
    fn without_a_latency_configuration_only_the_defaults_are_judged() {
        let out = sweep_text(&lone_results("", defaults(), None));
        assert!(out.contains("| Baton, defaults | 3 | 0.90 |"), "{out}");
        assert!(!out.contains("Baton, `"), "{out}");
        assert!(!out.contains("threads of its own"), "{out}");
    }

    #[test]
    fn a_configuration_that_failed_leaves_the_others_and_its_reason() {
        // The defaults' node never started; the latency configuration lost a round.
        let latency = lone_runs(
            vec![lone_report("baton", (500, 900), 1_800.0, 1.4)],
            vec![],
            Some("lock-cycle c1-r2-latency on baton: refused"),
        );
        let mut results = lone_results("--http-workers 2", vec![], Some(latency));
        results.sweep[0].failure =
            Some("starting Baton for the 1-client runs (defaults: []): no binary".into());
        let out = sweep_text(&results);
        assert!(!out.contains("Baton, defaults"), "{out}");
        assert!(
            out.contains("| Baton, `--http-workers 2` | 1 | 0.50 | 0.90 | 1800 | 1.40 | **met** |"),
            "{out}"
        );
        assert!(out.contains("| etcd | 3 |"), "{out}");
        let failures = failed_runs(&results);
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(failures[0].contains("no binary") && failures[1].contains("refused"));
    }

    #[test]
    fn flags_other_than_the_workers_are_not_explained_as_threads() {
        let latency = [550].map(|p50| lone_report("baton", (p50, 1_000), 1_700.0, 0.6));
        let results = lone_results("--idle-poll-us 0", defaults(), latency_runs(&latency));
        let out = sweep_text(&results);
        assert!(out.contains("| Baton, `--idle-poll-us 0` | 1 |"), "{out}");
        assert!(!out.contains("threads of its own"), "{out}");
    }

    #[test]
    fn per_op_numbers() {
        let s = Summary {
            throughput: 1000.0,
            server_cpu: Some(0.5),
            fsyncs_per_s: Some(100.0),
            ..Summary::default()
        };
        assert_eq!(s.cpu_us_per_op(), Some(500.0));
        assert_eq!(s.ops_per_fsync(), Some(10.0));
        assert_eq!(Summary::default().ops_per_fsync(), None);
    }
}
