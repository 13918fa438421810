//! Runs workers in closed loop (each client starts its next operation when the last
//! one ends) or open loop (operations start on a fixed schedule, whatever the
//! server's speed), and records every outcome.

use std::future::Future;
use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::time::Instant;

use crate::error::OpError;
use crate::recorder::SharedRecorder;

/// How much load, for how long.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Concurrent workers.
    pub clients: usize,
    /// Open loop: total operations started per second. `None`: closed loop.
    pub rate: Option<f64>,
    /// Stop starting operations after this long.
    pub duration: Option<Duration>,
    /// Stop after this many operations (whichever comes first).
    pub operations: Option<u64>,
    /// Timeline bucket width.
    pub interval: Duration,
    /// Show a progress bar (only drawn when stderr is a terminal).
    pub progress: bool,
}

/// One client of a scenario: its state (lease, names) and its operation.
pub trait Worker: Send + 'static {
    /// Runs operation number `k` (unique across workers, counting from 0).
    fn op(&mut self, k: u64) -> impl Future<Output = Result<(), OpError>> + Send;
}

/// What [`drive`] hands back.
pub struct Driven<W> {
    /// The workers (tests look at what they did).
    #[cfg_attr(not(test), allow(dead_code))]
    pub workers: Vec<W>,
    /// Every outcome.
    pub recorder: SharedRecorder,
    /// From the first start to the last completion.
    pub elapsed: Duration,
}

/// Runs `workers` under `spec`.
///
/// Open loop: operation `k` is due at `start + k / rate`; its latency is measured
/// from that intended time, so a slow server that delays later starts is charged for
/// the delay (no coordinated omission). When every worker is busy the schedule
/// keeps its times and the backlog shows up as latency.
pub async fn drive<W: Worker>(spec: &LoadSpec, workers: Vec<W>) -> Driven<W> {
    let start = Instant::now();
    let recorder = SharedRecorder::new(start.into_std(), spec.interval);
    let counter = Arc::new(AtomicU64::new(0));
    // Far enough to never be reached when only an operation count bounds the run.
    let until = start
        + spec
            .duration
            .unwrap_or(Duration::from_secs(10 * 365 * 86_400));
    let progress = progress_bar(spec, recorder.clone(), start);
    let mut tasks = Vec::new();
    for mut worker in workers {
        let (recorder, counter, rate, max) = (
            recorder.clone(),
            counter.clone(),
            spec.rate,
            spec.operations,
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let k = counter.fetch_add(1, Ordering::Relaxed);
                if max.is_some_and(|max| k >= max) {
                    break;
                }
                let begin = match rate {
                    Some(rate) => {
                        let due = start + Duration::from_secs_f64(k as f64 / rate);
                        if due >= until {
                            break;
                        }
                        tokio::time::sleep_until(due).await;
                        due
                    }
                    None => {
                        let now = Instant::now();
                        if now >= until {
                            break;
                        }
                        now
                    }
                };
                let result = worker.op(k).await;
                recorder.record(begin.into_std(), &result);
            }
            worker
        }));
    }
    let mut workers = Vec::new();
    for task in tasks {
        match task.await {
            Ok(worker) => workers.push(worker),
            Err(e) => eprintln!("baton-loadtest: a worker panicked: {e}"),
        }
    }
    let elapsed = start.elapsed();
    if let Some((bar, ticker)) = progress {
        ticker.abort();
        bar.finish_and_clear();
    }
    Driven {
        workers,
        recorder,
        elapsed,
    }
}

fn progress_bar(
    spec: &LoadSpec,
    recorder: SharedRecorder,
    start: Instant,
) -> Option<(ProgressBar, tokio::task::JoinHandle<()>)> {
    let long = spec.duration.is_none_or(|d| d >= Duration::from_secs(3));
    if !spec.progress || !long || !std::io::stderr().is_terminal() {
        return None;
    }
    let (len, by_time) = match (spec.duration, spec.operations) {
        (Some(d), _) => (d.as_millis() as u64, true),
        (None, Some(n)) => (n, false),
        (None, None) => (0, false),
    };
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {percent:>3}% {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let ticker_bar = bar.clone();
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let done = recorder.done();
            let secs = start.elapsed().as_secs_f64();
            ticker_bar.set_position(if by_time {
                (secs * 1000.0) as u64
            } else {
                done
            });
            ticker_bar.set_message(format!("{done} ops, {:.0}/s", done as f64 / secs.max(1e-3)));
        }
    });
    Some((bar, ticker))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counting {
        ran: Vec<u64>,
        fail_odd: bool,
    }

    impl Worker for Counting {
        async fn op(&mut self, k: u64) -> Result<(), OpError> {
            self.ran.push(k);
            tokio::task::yield_now().await;
            if self.fail_odd && k % 2 == 1 {
                Err(OpError::Timeout("odd".into()))
            } else {
                Ok(())
            }
        }
    }

    fn spec(operations: u64, rate: Option<f64>) -> LoadSpec {
        LoadSpec {
            clients: 3,
            rate,
            duration: None,
            operations: Some(operations),
            interval: Duration::from_millis(100),
            progress: false,
        }
    }

    #[tokio::test]
    async fn closed_loop_runs_each_operation_once() {
        let workers = (0..3)
            .map(|_| Counting {
                ran: vec![],
                fail_odd: true,
            })
            .collect();
        let driven = drive(&spec(50, None), workers).await;
        let mut all: Vec<u64> = driven.workers.iter().flat_map(|w| w.ran.clone()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..50).collect::<Vec<_>>());
        let (ok, errors) = driven
            .recorder
            .with(|r| (r.operations(), r.errors().get("timeout").copied()));
        assert_eq!((ok, errors), (25, Some(25)));
    }

    #[tokio::test]
    async fn open_loop_never_starts_an_operation_before_it_is_due() {
        // 20 operations at 200/s: the last is due 95 ms after the start. A lower
        // bound only (sleep_until never wakes early), so a busy machine cannot fail it.
        let workers = (0..3)
            .map(|_| Counting {
                ran: vec![],
                fail_odd: false,
            })
            .collect();
        let driven = drive(&spec(20, Some(200.0)), workers).await;
        assert_eq!(driven.recorder.with(|r| r.operations()), 20);
        assert!(
            driven.elapsed >= Duration::from_millis(95),
            "{:?}",
            driven.elapsed
        );
    }
}
