//! Collects latencies (HDR histogram), a timeline and errors by code during a run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency recorded exactly (µs); slower samples are clamped to it.
const MAX_US: u64 = 600_000_000;

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest sample.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

impl Latency {
    /// The percentiles of `h`.
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

/// Every interval's latency histogram, to pool the samples of a stretch of the
/// run (a phase's p99 is the p99 of its operations, not the worst interval's).
#[derive(Debug, Clone, Default)]
pub struct IntervalHistograms {
    step_s: f64,
    histograms: Vec<Histogram<u64>>,
}

impl IntervalHistograms {
    /// Percentiles of the operations finished in the intervals that start
    /// within `from_s..to_s` (seconds since the measured phase began).
    pub fn latency_between(&self, from_s: f64, to_s: f64) -> Latency {
        let mut pooled = new_histogram(2);
        for (i, h) in self.histograms.iter().enumerate() {
            let t = i as f64 * self.step_s;
            if t >= from_s && t < to_s {
                pooled
                    .add(h)
                    .expect("histograms of one recorder share bounds");
            }
        }
        Latency::of(&pooled)
    }
}

/// One interval of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Interval start, seconds since the measured phase began.
    pub t_s: f64,
    /// Operations completed in the interval.
    pub ops: u64,
    /// Operations failed in the interval.
    pub errors: u64,
    /// Median latency of the interval (µs).
    pub p50_us: u64,
    /// 99th percentile of the interval (µs).
    pub p99_us: u64,
    /// Slowest operation of the interval (µs).
    pub max_us: u64,
}

/// One point of the latency distribution (for the chart).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DistributionPoint {
    /// Percentile (0..100).
    pub percentile: f64,
    /// Latency at that percentile (µs).
    pub latency_us: u64,
}

struct Bucket {
    hist: Histogram<u64>,
    errors: u64,
}

/// The recording state; shared through [`SharedRecorder`].
pub struct Recorder {
    start: Instant,
    interval: Duration,
    total: Histogram<u64>,
    timeline: Vec<Bucket>,
    errors: BTreeMap<String, u64>,
    ok: u64,
}

impl Recorder {
    /// A recorder whose timeline starts at `start` with `interval` buckets.
    pub fn new(start: Instant, interval: Duration) -> Self {
        Self {
            start,
            interval: interval.max(Duration::from_millis(10)),
            total: new_histogram(3),
            timeline: Vec::new(),
            errors: BTreeMap::new(),
            ok: 0,
        }
    }

    fn bucket(&mut self, at: Instant) -> &mut Bucket {
        let i = (at.saturating_duration_since(self.start).as_nanos()
            / self.interval.as_nanos().max(1)) as usize;
        while self.timeline.len() <= i {
            self.timeline.push(Bucket {
                hist: new_histogram(2),
                errors: 0,
            });
        }
        &mut self.timeline[i]
    }

    /// A successful operation finished at `at` after `latency`.
    pub fn ok(&mut self, at: Instant, latency: Duration) {
        let us = (latency.as_micros() as u64).clamp(1, MAX_US);
        self.total.saturating_record(us);
        self.bucket(at).hist.saturating_record(us);
        self.ok += 1;
    }

    /// An operation failed at `at` with `code`.
    pub fn error(&mut self, at: Instant, code: String) {
        *self.errors.entry(code).or_default() += 1;
        self.bucket(at).errors += 1;
    }

    /// Successful operations.
    pub fn operations(&self) -> u64 {
        self.ok
    }

    /// Errors by code.
    pub fn errors(&self) -> &BTreeMap<String, u64> {
        &self.errors
    }

    /// Percentiles over the whole run.
    pub fn latency(&self) -> Latency {
        Latency::of(&self.total)
    }

    /// The per-interval view.
    pub fn timeline(&self) -> Vec<TimelinePoint> {
        let step = self.interval.as_secs_f64();
        self.timeline
            .iter()
            .enumerate()
            .map(|(i, b)| TimelinePoint {
                t_s: i as f64 * step,
                ops: b.hist.len(),
                errors: b.errors,
                p50_us: if b.hist.is_empty() {
                    0
                } else {
                    b.hist.value_at_quantile(0.5)
                },
                p99_us: if b.hist.is_empty() {
                    0
                } else {
                    b.hist.value_at_quantile(0.99)
                },
                max_us: b.hist.max(),
            })
            .collect()
    }

    /// Every interval's histogram, for [`IntervalHistograms::latency_between`].
    pub fn interval_histograms(&self) -> IntervalHistograms {
        IntervalHistograms {
            step_s: self.interval.as_secs_f64(),
            histograms: self.timeline.iter().map(|b| b.hist.clone()).collect(),
        }
    }

    /// The latency distribution at log-spaced percentiles (50, 75, 90, 95, 99, ...).
    pub fn distribution(&self) -> Vec<DistributionPoint> {
        if self.total.is_empty() {
            return Vec::new();
        }
        let mut points = Vec::new();
        // Percentiles 0, 50, 75, 87.5, ... up to 1 - 1/2^17, then the max.
        let mut q: f64 = 0.0;
        for _ in 0..18 {
            points.push(DistributionPoint {
                percentile: q * 100.0,
                latency_us: self.total.value_at_quantile(q),
            });
            q = 1.0 - (1.0 - q) / 2.0;
        }
        points.push(DistributionPoint {
            percentile: 100.0,
            latency_us: self.total.max(),
        });
        points
    }
}

fn new_histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, sigfig).expect("static histogram bounds are valid")
}

/// A [`Recorder`] shared by the workers of a run, with lock-free counters for the
/// progress bar.
#[derive(Clone)]
pub struct SharedRecorder {
    inner: Arc<Mutex<Recorder>>,
    done: Arc<AtomicU64>,
}

impl SharedRecorder {
    /// A recorder starting at `start`.
    pub fn new(start: Instant, interval: Duration) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Recorder::new(start, interval))),
            done: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records one operation's outcome.
    pub fn record<E: AsCode>(&self, started: Instant, result: &Result<(), E>) {
        let now = Instant::now();
        let mut r = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(()) => r.ok(now, now.saturating_duration_since(started)),
            Err(e) => r.error(now, e.as_code()),
        }
        drop(r);
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// Operations finished (ok or not) so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Runs `f` on the recorder.
    pub fn with<T>(&self, f: impl FnOnce(&Recorder) -> T) -> T {
        f(&self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Something with a stable error code.
pub trait AsCode {
    /// The code errors are counted under.
    fn as_code(&self) -> String;
}

impl AsCode for crate::error::OpError {
    fn as_code(&self) -> String {
        self.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_percentiles_timeline_and_errors() {
        let start = Instant::now();
        let mut r = Recorder::new(start, Duration::from_secs(1));
        for i in 1..=100u64 {
            r.ok(
                start + Duration::from_millis(i * 15),
                Duration::from_micros(i * 10),
            );
        }
        r.error(start, "lock_held".into());
        r.error(start, "lock_held".into());
        assert_eq!(r.operations(), 100);
        assert_eq!(r.errors().get("lock_held"), Some(&2));
        let l = r.latency();
        assert!(l.p50 >= 495 && l.p50 <= 505, "{l:?}");
        assert!(l.p99 >= 985 && l.p99 <= 1000, "{l:?}");
        assert!(l.max >= 999);
        let t = r.timeline();
        assert_eq!(t.len(), 2);
        assert_eq!(t.iter().map(|p| p.ops).sum::<u64>(), 100);
        assert_eq!(t[0].errors, 2);
        let d = r.distribution();
        assert!(d.windows(2).all(|w| w[0].percentile < w[1].percentile));
        assert!(d.windows(2).all(|w| w[0].latency_us <= w[1].latency_us));
        assert_eq!(d.last().map(|p| p.percentile), Some(100.0));
    }

    /// A phase's p99 pools its intervals' samples: one slow interval among many
    /// fast ones moves the pooled p99 only as far as its share of samples goes.
    #[test]
    fn a_stretch_pools_the_samples_of_its_intervals() {
        let start = Instant::now();
        let mut r = Recorder::new(start, Duration::from_secs(1));
        // Seconds 0-9: 100 operations of 1 ms each; second 10: 100 of 50 ms.
        for second in 0..=10u64 {
            let latency = if second == 10 { 50_000 } else { 1_000 };
            for i in 0..100u64 {
                r.ok(
                    start + Duration::from_millis(second * 1_000 + i),
                    Duration::from_micros(latency),
                );
            }
        }
        let intervals = r.interval_histograms();
        let calm = intervals.latency_between(0.0, 10.0);
        assert_eq!((calm.p99 / 10, calm.max / 10), (100, 100), "{calm:?}");
        let all = intervals.latency_between(0.0, 11.0);
        assert!(all.p99 >= 49_000, "1 in 11 is slow: {all:?}");
        assert!(all.p50 <= 1_010, "{all:?}");
        let slow = intervals.latency_between(10.0, 11.0);
        assert!(slow.p50 >= 49_000, "{slow:?}");
        assert_eq!(intervals.latency_between(20.0, 30.0), Latency::default());
    }

    #[test]
    fn empty_recorder_has_zero_latency() {
        let r = Recorder::new(Instant::now(), Duration::from_secs(1));
        assert_eq!(r.latency(), Latency::default());
        assert!(r.distribution().is_empty());
    }
}
