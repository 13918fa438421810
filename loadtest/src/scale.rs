//! `baton-loadtest scale`: lock-cycle throughput and latency as the held state grows
//! (issue 19: "lock-cycle throughput and p99 with 1,000, 100,000 and 1,000,000 other
//! locks held (and as many leases) stay within 15 % of the empty-state figure,
//! including the runs during which a snapshot is built").
//!
//! For each level a fresh single node (fsync on) on a temporary data dir: `held`
//! leases with a one-hour TTL are granted, each acquiring one lock, then lock-cycle
//! runs with `--clients` clients for `--duration-s` seconds. The node builds a snapshot
//! every `--snapshot-every` log entries, so the measured phase at a large level
//! includes snapshots of the whole state; how many it built is read from `/metrics`.
//! With `--rounds` above one the levels take turns (every level once, then again),
//! so the machine's drift reaches them all alike, and the section gives medians.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use baton_chaos::ports::free_port;
use clap::Args;
use serde::Serialize;

use crate::exposition::{metric_sum, scrape};
use crate::fill::{fill, Fill};
use crate::output::OutputArgs;
use crate::process::Server;
use crate::report::Report;
use crate::scenario::{self, RunArgs, Scenario};
use crate::target::{Target, TargetKind};

/// `scale` options.
#[derive(Debug, Clone, Args)]
pub struct ScaleArgs {
    /// The Baton server binary.
    #[arg(long)]
    pub baton_bin: PathBuf,
    /// Held locks (each on its own lease) of each level, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,1000,100000,1000000")]
    pub held: Vec<usize>,
    /// Lock-cycle clients of the measured phase.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Length of each measured phase, seconds.
    #[arg(long, default_value_t = 20.0)]
    pub duration_s: f64,
    /// The node's `--snapshot-every` (log entries between snapshots).
    #[arg(long, default_value_t = 20_000)]
    pub snapshot_every: u64,
    /// The node's `--snapshot-log-ratio` (default: the server's own default).
    #[arg(long)]
    pub snapshot_log_ratio: Option<f64>,
    /// Concurrent requests while filling a level.
    #[arg(long, default_value_t = 64)]
    pub fill_clients: usize,
    /// How many times each level is measured, the levels taking turns; the
    /// section reports each level's medians. One run of a level moves by about
    /// 10 % (p99) from one to the next on a shared machine.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub rounds: u64,
    /// Data root, JSON report and Markdown section.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Write the plot (throughput and p99 against held locks) here as SVG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// One level: its rounds, in the order they ran.
#[derive(Debug, Clone, Serialize)]
pub struct Level {
    /// Locks held (and leases holding them) besides the clients' own.
    pub held: usize,
    /// One entry per round.
    pub rounds: Vec<Round>,
}

/// One measurement of a level, on a fresh node.
#[derive(Debug, Clone, Serialize)]
pub struct Round {
    /// Seconds to grant the leases and acquire the locks.
    pub fill_s: f64,
    /// Snapshots the node built during the measured phase (`None`: the build does
    /// not count them).
    pub snapshots_during_run: Option<u64>,
    /// Mean duration of the snapshot builds that finished during the measured
    /// phase, seconds (`None`: none finished, or the build does not say).
    pub snapshot_build_s: Option<f64>,
    /// Size of the last snapshot built, bytes (`None`: the build does not say).
    pub snapshot_bytes: Option<u64>,
    /// Server RSS after the measured phase, bytes.
    pub rss_bytes: u64,
    /// The lock-cycle run.
    pub run: Report,
}

/// What `scale` measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    /// The Baton version measured.
    pub baton_version: String,
    /// `--snapshot-every` of the servers.
    pub snapshot_every: u64,
    /// `--snapshot-log-ratio` of the servers (`None`: their default).
    pub snapshot_log_ratio: Option<f64>,
    /// How many times each level was measured.
    pub rounds: u64,
    /// One entry per level, in the order asked.
    pub levels: Vec<Level>,
}

/// Runs every level `--rounds` times, the levels taking turns; fails when a
/// fill request is refused or a run has errors.
pub async fn scale(args: ScaleArgs) -> anyhow::Result<()> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut levels: Vec<Level> = args
        .held
        .iter()
        .map(|&held| Level {
            held,
            rounds: Vec::new(),
        })
        .collect();
    for round in 1..=args.rounds {
        for level in &mut levels {
            let held = level.held;
            level.rounds.push(
                measure(&args, held)
                    .await
                    .with_context(|| format!("level {held}, round {round}"))?,
            );
        }
    }
    let report = ScaleReport {
        baton_version: Server::version(TargetKind::Baton, &args.baton_bin),
        snapshot_every: args.snapshot_every,
        snapshot_log_ratio: args.snapshot_log_ratio,
        rounds: args.rounds,
        levels,
    };
    if let Some(path) = &args.plot {
        std::fs::write(path, plot(&report))?;
    }
    args.output.write(&report, SECTION, || {
        render(&report, &command, args.plot.as_ref())
    })?;
    Ok(())
}

/// One round of a level on a fresh node.
async fn measure(args: &ScaleArgs, held: usize) -> anyhow::Result<Round> {
    let dir = args.output.temp_dir("baton-scale-")?;
    let data = dir.path().join("baton-data");
    let log = dir.path().join("baton.log");
    let ttl_ms = 3_600_000;
    let mut extra = vec![
        "--max-leases".to_owned(),
        (held + args.clients + 1_000).to_string(),
        "--max-ttl-ms".to_owned(),
        ttl_ms.to_string(),
        "--snapshot-every".to_owned(),
        args.snapshot_every.to_string(),
    ];
    if let Some(ratio) = args.snapshot_log_ratio {
        extra.extend(["--snapshot-log-ratio".to_owned(), ratio.to_string()]);
    }
    let mut server = Server::baton_with(
        &args.baton_bin,
        &data,
        &log,
        (free_port()?, free_port()?),
        &extra,
    )?;
    server
        .wait_ready(Duration::from_secs(60))
        .await
        .context("baton")?;
    let target = Target::new(TargetKind::Baton, &server.url, args.fill_clients)?;
    let started = Instant::now();
    let plan = Fill {
        leases: held,
        locks_per_lease: 1,
        ttl_ms,
        clients: args.fill_clients,
        label: "scale",
    };
    // Fixed-width names: every lock costs the same, whatever the level.
    fill(&target, plan, |i, _| format!("scale/{i:08}")).await?;
    let fill_s = started.elapsed().as_secs_f64();
    let http = baton_chaos::client::pooled_http_client().build()?;
    let before = scrape(&http, &server.url).await;
    let mut run = RunArgs::new(Scenario::LockCycle, TargetKind::Baton, &server.url);
    run.clients = args.clients;
    run.duration_s = Some(args.duration_s);
    run.ttl_ms = 60_000;
    run.server_pid = Some(server.pid());
    run.no_progress = true;
    let report = scenario::run(&run).await?;
    let after = scrape(&http, &server.url).await;
    let delta = |name: &str| {
        let sum = |text: &Option<String>| text.as_deref().and_then(|t| metric_sum(t, name));
        sum(&after).zip(sum(&before)).map(|(a, b)| a - b)
    };
    let built = delta(SNAPSHOTS_BUILT).map(|n| n as u64);
    let snapshot_build_s = delta(SNAPSHOT_BUILD_SUM)
        .zip(delta(SNAPSHOT_BUILD_COUNT))
        .filter(|(_, count)| *count > 0.0)
        .map(|(sum, count)| sum / count);
    let snapshot_bytes = after
        .as_deref()
        .and_then(|t| metric_sum(t, SNAPSHOT_BYTES))
        .map(|b| b as u64);
    if report.errors > 0 {
        anyhow::bail!(
            "lock-cycle at {held} held: {} errors ({:?})",
            report.errors,
            report.errors_by_code
        );
    }
    let rss_bytes = server.rss_bytes().unwrap_or(0);
    eprintln!(
        "scale: {held} held (filled in {fill_s:.1} s): {:.0} cycles/s, p99 {} µs, {} snapshots during the run ({:?} s each, {:?} bytes)",
        report.throughput_per_s,
        report.latency_us.p99,
        built.map_or("?".to_owned(), |n| n.to_string()),
        snapshot_build_s,
        snapshot_bytes,
    );
    drop(server);
    Ok(Round {
        fill_s,
        snapshots_during_run: built,
        snapshot_build_s,
        snapshot_bytes,
        rss_bytes,
        run: report,
    })
}

/// The counter of snapshots this node built.
const SNAPSHOTS_BUILT: &str = "baton_snapshots_built_total";
/// Sum and count of the snapshot build histogram.
const SNAPSHOT_BUILD_SUM: &str = "baton_snapshot_build_seconds_sum";
const SNAPSHOT_BUILD_COUNT: &str = "baton_snapshot_build_seconds_count";
/// The size of the last snapshot.
const SNAPSHOT_BYTES: &str = "baton_snapshot_bytes";

/// The marker name of this section in BENCHMARKS.md.
pub const SECTION: &str = "scale";

/// The median of `values` (the mean of the middle two for an even count; NaN
/// for none).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

impl Level {
    /// `figure` of each round.
    fn each(&self, figure: impl Fn(&Round) -> f64) -> Vec<f64> {
        self.rounds.iter().map(figure).collect()
    }

    /// Median lock cycles per second over the rounds.
    fn throughput(&self) -> f64 {
        median(self.each(|r| r.run.throughput_per_s))
    }

    /// Median p99 over the rounds, µs.
    fn p99_us(&self) -> f64 {
        median(self.each(|r| r.run.latency_us.p99 as f64))
    }
}

/// Throughput and p99 of a level relative to the first (empty-state) level,
/// median against median.
fn relative(report: &ScaleReport, level: &Level) -> (f64, f64) {
    let Some(base) = report.levels.first() else {
        return (f64::NAN, f64::NAN);
    };
    (
        level.throughput() / base.throughput().max(1e-9),
        level.p99_us() / base.p99_us().max(1.0),
    )
}

/// `median` alone for one round; with more, the median and then each round's
/// figure in brackets.
fn with_rounds(level: &Level, figure: impl Fn(&Round) -> f64) -> String {
    let values = level.each(figure);
    let middle = median(values.clone());
    if values.len() < 2 {
        return format!("{middle:.0}");
    }
    let each: Vec<String> = values.iter().map(|v| format!("{v:.0}")).collect();
    format!("{middle:.0} ({})", each.join(", "))
}

/// The Markdown section.
fn render(report: &ScaleReport, command: &str, plot: Option<&PathBuf>) -> String {
    let mut rows = String::new();
    for level in &report.levels {
        let (throughput, p99) = relative(report, level);
        let listed = |text: &dyn Fn(&Round) -> String| {
            let texts: Vec<String> = level.rounds.iter().map(text).collect();
            texts.join(", ")
        };
        let built: Vec<f64> = level
            .rounds
            .iter()
            .filter_map(|r| r.snapshot_build_s)
            .collect();
        rows.push_str(&format!(
            "| {held} | {fill:.1} s | {tput} | {p50:.0} | {p99_us} | {max:.0} | {rt:.2} | {rp:.2} | {snaps} | {build} | {size} | {rss:.0} MiB |\n",
            held = level.held,
            fill = median(level.each(|r| r.fill_s)),
            tput = with_rounds(level, |r| r.run.throughput_per_s),
            p50 = median(level.each(|r| r.run.latency_us.p50 as f64)),
            p99_us = with_rounds(level, |r| r.run.latency_us.p99 as f64),
            max = level.each(|r| r.run.latency_us.max as f64).into_iter().fold(0.0, f64::max),
            rt = throughput,
            rp = p99,
            snaps = listed(&|r| r
                .snapshots_during_run
                .map_or("n/a".to_owned(), |n| n.to_string())),
            build = if built.is_empty() {
                "n/a".to_owned()
            } else {
                format!("{:.2} s", built.iter().sum::<f64>() / built.len() as f64)
            },
            size = level
                .rounds
                .last()
                .and_then(|r| r.snapshot_bytes)
                .map_or("n/a".to_owned(), |b| {
                    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
                }),
            rss = level.each(|r| r.rss_bytes as f64).into_iter().fold(0.0, f64::max)
                / (1024.0 * 1024.0),
        ));
    }
    let plot = plot
        .and_then(|path| path.file_name())
        .map(|name| {
            format!(
                "![throughput and p99 against held locks](loadtest/results/{})\n\n",
                name.to_string_lossy()
            )
        })
        .unwrap_or_default();
    format!(
        "## Cost as the state grows (1 Baton node)\n\n\
Generated by `baton-loadtest scale` ({version}): for each level a fresh single node (fsync on), \
`held` leases with a one-hour TTL each holding one lock, then lock-cycle ({clients} clients, \
own lease and lock each) for the measured phase. The node builds a snapshot after \
{every} log entries once the log written since the last one is {ratio} times its size \
(`--snapshot-log-ratio`), so at the larger levels the measured phase may include snapshots \
of the whole state: how many finished during the run, their mean build time (encoding the state, \
writing and syncing its file, beside applying) and the last one's size. {rounds_text}Ratios are against the first level. The target \
(issue 19) is throughput and p99 within 15 % of the empty state.\n\n\
Command:\n\n```\n{command}\n```\n\n\
| held | fill | cycles/s | p50 µs | p99 µs | max µs | throughput vs empty | p99 vs empty | snapshots in run | snapshot build | snapshot size | RSS |\n\
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n{rows}\n{plot}",
        version = report.baton_version,
        clients = report
            .levels
            .first()
            .and_then(|l| l.rounds.first())
            .map_or(0, |r| r.run.clients),
        rounds_text = match report.rounds {
            1 => String::new(),
            n => format!(
                "Each level was measured {n} times, the levels taking turns (every level once, then \
again), so that the machine's drift reaches them all alike: fill, cycles/s, p50 and p99 are \
medians over the rounds (each round's figure in brackets), max and RSS the largest, the \
snapshot columns per round, the mean build and the last size. "
            ),
        },
        every = report.snapshot_every,
        ratio = report
            .snapshot_log_ratio
            .map_or("the default 1".to_owned(), |ratio| ratio.to_string()),
    )
}

/// An SVG of throughput (left axis) and p99 (right axis) against held locks on a
/// logarithmic axis (the empty level drawn at the left edge).
fn plot(report: &ScaleReport) -> String {
    let (width, height, margin) = (640.0_f64, 320.0_f64, 56.0_f64);
    let x_of = |held: usize| {
        let max = report
            .levels
            .iter()
            .map(|l| l.held)
            .max()
            .unwrap_or(1)
            .max(10) as f64;
        let t = ((held as f64).max(1.0)).log10() / max.log10();
        margin + t * (width - 2.0 * margin)
    };
    let series = |value: &dyn Fn(&Level) -> f64| {
        let top = report
            .levels
            .iter()
            .map(value)
            .fold(0.0_f64, f64::max)
            .max(1e-9)
            * 1.15;
        let points: Vec<String> = report
            .levels
            .iter()
            .map(|l| {
                let y = height - margin - value(l) / top * (height - 2.0 * margin);
                format!("{:.1},{:.1}", x_of(l.held), y)
            })
            .collect();
        (points.join(" "), top)
    };
    let (throughput, top_t) = series(&|l: &Level| l.throughput());
    let (p99, top_p) = series(&|l: &Level| l.p99_us());
    let labels: String = report
        .levels
        .iter()
        .map(|l| {
            format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
                x_of(l.held),
                height - margin + 16.0,
                l.held
            )
        })
        .collect();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\">\
<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\
<text x=\"{cx}\" y=\"20\" font-size=\"14\" text-anchor=\"middle\">lock-cycle against held locks ({version})</text>\
<line x1=\"{margin}\" y1=\"{base}\" x2=\"{right}\" y2=\"{base}\" stroke=\"black\"/>\
<text x=\"{cx}\" y=\"{xlabel}\" font-size=\"12\" text-anchor=\"middle\">held locks (log scale)</text>\
<text x=\"8\" y=\"40\" font-size=\"12\" fill=\"#1f77b4\">cycles/s (top {top_t:.0})</text>\
<text x=\"{right}\" y=\"40\" font-size=\"12\" fill=\"#d62728\" text-anchor=\"end\">p99 µs (top {top_p:.0})</text>\
<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{throughput}\"/>\
<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"6 3\" points=\"{p99}\"/>\
{labels}</svg>\n",
        cx = width / 2.0,
        base = height - margin,
        right = width - margin,
        xlabel = height - 12.0,
        version = report.baton_version,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
        assert!(median(Vec::new()).is_nan());
    }

    /// A round whose run did `throughput` cycles/s with p99 `p99_us`.
    fn round(throughput: f64, p99_us: u64) -> Round {
        let mut run: Report =
            serde_json::from_str(include_str!("../results/lock-cycle-baton-r1.json")).unwrap();
        run.throughput_per_s = throughput;
        run.latency_us.p99 = p99_us;
        Round {
            fill_s: 1.0,
            snapshots_during_run: Some(1),
            snapshot_build_s: Some(2.0),
            snapshot_bytes: Some(1 << 20),
            rss_bytes: 1 << 20,
            run,
        }
    }

    #[test]
    fn the_section_compares_each_levels_medians_with_the_empty_states() {
        let report = ScaleReport {
            baton_version: "baton test".to_owned(),
            snapshot_every: 20_000,
            snapshot_log_ratio: None,
            rounds: 3,
            levels: vec![
                Level {
                    held: 0,
                    rounds: vec![round(100.0, 10), round(120.0, 12), round(110.0, 50)],
                },
                Level {
                    held: 1000,
                    rounds: vec![round(99.0, 11), round(10.0, 99), round(88.0, 13)],
                },
            ],
        };
        let section = render(&report, "baton-loadtest scale", None);
        assert!(section.contains("measured 3 times"), "{section}");
        // Medians: 110 cycles/s and p99 12 µs empty; 88 and 13 at 1,000 held.
        assert!(
            section.contains("| 0 | 1.0 s | 110 (100, 120, 110) |"),
            "{section}"
        );
        assert!(section.contains("| 13 (11, 99, 13) |"), "{section}");
        assert!(section.contains(&format!("| {:.2} | {:.2} |", 88.0 / 110.0, 13.0 / 12.0)));
        assert!(section.contains("| 1, 1, 1 | 2.00 s |"), "{section}");
    }
}
