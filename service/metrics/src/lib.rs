//! # baton-metrics
//!
//! The few metric types Baton needs, and the Prometheus text exposition (format
//! 0.0.4) they are scraped in. Hand-written rather than a client crate because
//! the hot path must cost a few relaxed atomic adds and nothing else: no lock, no
//! allocation and no hashing of label sets per observation (ARCHITECTURE.md,
//! "Metrics", says what the crates on offer do instead).
//!
//! - [`Counter`]: one relaxed `AtomicU64`.
//! - [`Histogram`]: fixed bucket bounds chosen at compile time, one atomic per
//!   bucket and one for the sum; values are integers (microseconds for durations,
//!   rendered as seconds, or plain counts), so there is no float compare-and-swap.
//! - [`Family`]: series of one metric told apart by `&'static str` label values,
//!   created on first use into a fixed number of slots (a lock-free scan, no
//!   allocation once a series exists). Label values are always static strings,
//!   so an unbounded value (a lock's name) cannot become one.
//! - [`Exposition`]: writes the text format at scrape time (allocation is fine
//!   there).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero.
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What a histogram's integer observations measure, which decides how they are
/// rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Microseconds, rendered as seconds (the Prometheus base unit).
    Micros,
    /// A plain count (requests per batch), rendered as is.
    Count,
}

/// A histogram's bucket layout: upper bounds (inclusive, ascending) in the
/// observations' unit. A `+Inf` bucket is always added.
#[derive(Clone, Copy, Debug)]
pub struct Buckets {
    /// Upper bounds, ascending.
    pub bounds: &'static [u64],
    /// How the bounds and the sum are rendered.
    pub unit: Unit,
}

/// Request latency: 0.5 ms to 5 minutes (a waiting acquire may wait that long).
pub const REQUEST_SECONDS: Buckets = Buckets {
    bounds: &[
        500,
        1_000,
        2_500,
        5_000,
        10_000,
        25_000,
        50_000,
        100_000,
        250_000,
        500_000,
        1_000_000,
        2_500_000,
        5_000_000,
        10_000_000,
        30_000_000,
        60_000_000,
        300_000_000,
    ],
    unit: Unit::Micros,
};

/// Time spent waiting in a queue: 1 ms to 5 minutes (the largest `wait_ms`).
pub const WAIT_SECONDS: Buckets = Buckets {
    bounds: &[
        1_000,
        5_000,
        10_000,
        50_000,
        100_000,
        500_000,
        1_000_000,
        5_000_000,
        10_000_000,
        30_000_000,
        60_000_000,
        300_000_000,
    ],
    unit: Unit::Micros,
};

/// How long something is held: 10 ms to a day.
pub const HOLD_SECONDS: Buckets = Buckets {
    bounds: &[
        10_000,
        100_000,
        1_000_000,
        10_000_000,
        60_000_000,
        300_000_000,
        900_000_000,
        3_600_000_000,
        21_600_000_000,
        86_400_000_000,
    ],
    unit: Unit::Micros,
};

/// Disk and in-process latencies: 50 µs to 1 s (an fsync is ~0.3-1 ms here).
pub const DISK_SECONDS: Buckets = Buckets {
    bounds: &[
        50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
    ],
    unit: Unit::Micros,
};

/// A call to another node: 0.5 ms to 30 s (a proposal may take its timeout).
pub const CALL_SECONDS: Buckets = Buckets {
    bounds: &[
        500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
        2_500_000, 5_000_000, 10_000_000, 30_000_000,
    ],
    unit: Unit::Micros,
};

/// Requests per log entry: powers of two up to 4096.
pub const BATCH_SIZE: Buckets = Buckets {
    bounds: &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
    unit: Unit::Count,
};

/// A distribution over fixed buckets.
#[derive(Debug)]
pub struct Histogram {
    layout: Buckets,
    /// Non-cumulative counts, one per bound plus `+Inf`.
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

/// A histogram read at one moment: cumulative bucket counts (the last is
/// `+Inf`, which is also the count) and the sum, in the observations' unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Cumulative counts per bound, then `+Inf`.
    pub cumulative: Vec<u64>,
    /// Sum of the observations.
    pub sum: u64,
}

impl HistogramSnapshot {
    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }
}

impl Histogram {
    /// An empty histogram with `layout`.
    pub fn new(layout: Buckets) -> Self {
        Histogram {
            layout,
            buckets: (0..=layout.bounds.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Records one value (in the layout's unit).
    pub fn observe(&self, value: u64) {
        // First bound >= value: the `le` bucket it belongs to (the last is +Inf).
        let bucket = self.layout.bounds.partition_point(|&bound| bound < value);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// Records a duration, in microseconds.
    pub fn observe_duration(&self, elapsed: Duration) {
        self.observe(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    /// The counts now. The count is the sum of the buckets read, so a scrape
    /// never shows a `+Inf` bucket that disagrees with `_count`.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|bucket| {
                total += bucket.load(Ordering::Relaxed);
                total
            })
            .collect();
        HistogramSnapshot {
            cumulative,
            sum: self.sum.load(Ordering::Relaxed),
        }
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.snapshot().count()
    }

    /// The bucket layout.
    pub fn layout(&self) -> Buckets {
        self.layout
    }
}

/// Label values of one series: static strings, or an HTTP status.
pub trait LabelValues: Copy + PartialEq + Send + Sync + 'static {
    /// The values, in the order of the family's label names.
    fn values(&self) -> Vec<String>;
}

impl LabelValues for &'static str {
    fn values(&self) -> Vec<String> {
        vec![(*self).to_owned()]
    }
}

impl LabelValues for (&'static str, &'static str) {
    fn values(&self) -> Vec<String> {
        vec![self.0.to_owned(), self.1.to_owned()]
    }
}

impl LabelValues for (u16, &'static str) {
    fn values(&self) -> Vec<String> {
        vec![self.0.to_string(), self.1.to_owned()]
    }
}

/// Series of one metric by label values, in a fixed number of slots.
///
/// A lookup scans the slots in order: each is an `OnceLock`, decided once, so a
/// read is an acquire load and a compare, and a key can hold only one slot (a
/// thread that claims a later slot has seen every earlier one decided
/// otherwise). Past `capacity` distinct keys, observations go to the `spill`
/// series; the label sets used are small and known, so that only happens
/// through a bug, and the spill series makes it visible.
pub struct Family<K: LabelValues, T> {
    slots: Box<[OnceLock<(K, T)>]>,
    spill: (K, T),
    make: fn() -> T,
}

impl<K: LabelValues, T> std::fmt::Debug for Family<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Family")
            .field("series", &self.series().count())
            .finish_non_exhaustive()
    }
}

impl<K: LabelValues, T> Family<K, T> {
    /// A family with room for `capacity` series, made by `make`; `spill` is the
    /// key of the series that takes what does not fit.
    pub fn new(capacity: usize, spill: K, make: fn() -> T) -> Self {
        Family {
            slots: (0..capacity).map(|_| OnceLock::new()).collect(),
            spill: (spill, make()),
            make,
        }
    }

    /// The series of `key`, created on first use.
    pub fn get(&self, key: K) -> &T {
        for slot in self.slots.iter() {
            let (found, series) = match slot.get() {
                Some(entry) => entry,
                None => slot.get_or_init(|| (key, (self.make)())),
            };
            if *found == key {
                return series;
            }
        }
        &self.spill.1
    }

    /// Creates the series of `keys` now, so a scrape shows them at zero.
    pub fn register(&self, keys: &[K]) {
        for key in keys {
            self.get(*key);
        }
    }

    /// Every series, in creation order (the spill series last, once used).
    pub fn series(&self) -> impl Iterator<Item = (&K, &T)> {
        self.slots
            .iter()
            .map_while(|slot| slot.get().map(|(key, series)| (key, series)))
            .chain(std::iter::once((&self.spill.0, &self.spill.1)))
    }
}

impl<K: LabelValues> Family<K, Counter> {
    /// A family of counters.
    pub fn counters(capacity: usize, spill: K) -> Self {
        Family::new(capacity, spill, Counter::new)
    }
}

/// Renders `value` (an integer in millionths when `unit` is micros) as a
/// decimal without float rounding: 2500 µs is `0.0025`, never `0.0025000000000000001`.
fn decimal(value: u64, unit: Unit) -> String {
    match unit {
        Unit::Count => value.to_string(),
        Unit::Micros => {
            let whole = value / 1_000_000;
            let fraction = value % 1_000_000;
            if fraction == 0 {
                whole.to_string()
            } else {
                let digits = format!("{fraction:06}");
                format!("{whole}.{}", digits.trim_end_matches('0'))
            }
        }
    }
}

/// Escapes a label value for the text format.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('"', "\\\"")
}

/// The `{name="value",...}` part of a sample (empty without labels).
fn label_set(names: &[&str], values: &[String], extra: Option<(&str, &str)>) -> String {
    let mut pairs: Vec<String> = names
        .iter()
        .zip(values)
        .map(|(name, value)| format!("{name}=\"{}\"", escape(value)))
        .collect();
    if let Some((name, value)) = extra {
        pairs.push(format!("{name}=\"{}\"", escape(value)));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

/// The Prometheus text exposition (version 0.0.4) of one scrape, written
/// family by family: each family's `# HELP` and `# TYPE` once, then its samples.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Exposition::default()
    }

    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = write!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
    }

    /// An unlabelled gauge.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, help, "gauge");
        let _ = writeln!(self.text, "{name} {value}");
    }

    /// A gauge with one label, one sample per `(value, gauge)`.
    pub fn gauges(&mut self, name: &str, help: &str, label: &str, samples: &[(String, f64)]) {
        self.header(name, help, "gauge");
        for (value, gauge) in samples {
            let labels = label_set(&[label], std::slice::from_ref(value), None);
            let _ = writeln!(self.text, "{name}{labels} {gauge}");
        }
    }

    /// An unlabelled counter (`name` ends in `_total`).
    pub fn counter(&mut self, name: &str, help: &str, counter: &Counter) {
        self.header(name, help, "counter");
        let _ = writeln!(self.text, "{name} {}", counter.get());
    }

    /// An unlabelled counter read elsewhere (`name` ends in `_total`).
    pub fn counter_value(&mut self, name: &str, help: &str, value: u64) {
        self.header(name, help, "counter");
        let _ = writeln!(self.text, "{name} {value}");
    }

    /// A counter family kept outside a [`Family`] (fixed arrays indexed by a
    /// known label set): one sample per `(label values, count)`.
    pub fn counter_series(
        &mut self,
        name: &str,
        help: &str,
        labels: &[&str],
        series: &[(Vec<String>, u64)],
    ) {
        self.header(name, help, "counter");
        for (values, count) in series {
            let set = label_set(labels, values, None);
            let _ = writeln!(self.text, "{name}{set} {count}");
        }
    }

    /// A counter family (`name` ends in `_total`), one sample per series.
    pub fn counters<K: LabelValues>(
        &mut self,
        name: &str,
        help: &str,
        labels: &[&str],
        family: &Family<K, Counter>,
    ) {
        self.header(name, help, "counter");
        for (key, counter) in family.series() {
            // The spill series appears only once something went to it.
            if std::ptr::eq(key, &family.spill.0) && counter.get() == 0 {
                continue;
            }
            let set = label_set(labels, &key.values(), None);
            let _ = writeln!(self.text, "{name}{set} {}", counter.get());
        }
    }

    /// An unlabelled histogram.
    pub fn histogram(&mut self, name: &str, help: &str, histogram: &Histogram) {
        self.header(name, help, "histogram");
        self.histogram_samples(name, &[], &[], histogram);
    }

    /// A histogram family, one set of samples per series.
    pub fn histograms<K: LabelValues>(
        &mut self,
        name: &str,
        help: &str,
        labels: &[&str],
        family: &Family<K, Histogram>,
    ) {
        self.header(name, help, "histogram");
        for (key, histogram) in family.series() {
            if std::ptr::eq(key, &family.spill.0) && histogram.count() == 0 {
                continue;
            }
            self.histogram_samples(name, labels, &key.values(), histogram);
        }
    }

    /// The samples of histogram series given by label names and values.
    pub fn histogram_series(
        &mut self,
        name: &str,
        help: &str,
        labels: &[&str],
        series: &[(Vec<String>, &Histogram)],
    ) {
        self.header(name, help, "histogram");
        for (values, histogram) in series {
            self.histogram_samples(name, labels, values, histogram);
        }
    }

    fn histogram_samples(
        &mut self,
        name: &str,
        labels: &[&str],
        values: &[String],
        histogram: &Histogram,
    ) {
        let layout = histogram.layout();
        let snapshot = histogram.snapshot();
        for (index, count) in snapshot.cumulative.iter().enumerate() {
            let le = match layout.bounds.get(index) {
                Some(bound) => decimal(*bound, layout.unit),
                None => "+Inf".to_owned(),
            };
            let set = label_set(labels, values, Some(("le", &le)));
            let _ = writeln!(self.text, "{name}_bucket{set} {count}");
        }
        let set = label_set(labels, values, None);
        let sum = decimal(snapshot.sum, layout.unit);
        let _ = writeln!(self.text, "{name}_sum{set} {sum}");
        let _ = writeln!(self.text, "{name}_count{set} {}", snapshot.count());
    }

    /// The text.
    pub fn finish(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_whose_bound_it_does_not_exceed() {
        let histogram = Histogram::new(BATCH_SIZE);
        for value in [1, 2, 3, 4096, 5000] {
            histogram.observe(value);
        }
        let snapshot = histogram.snapshot();
        // le=1: {1}; le=2: {1,2}; le=4: {1,2,3}; ... le=4096: all but 5000; +Inf: all.
        assert_eq!(&snapshot.cumulative[..3], &[1, 2, 3]);
        assert_eq!(snapshot.cumulative[BATCH_SIZE.bounds.len() - 1], 4);
        assert_eq!(snapshot.count(), 5);
        assert_eq!(snapshot.sum, 1 + 2 + 3 + 4096 + 5000);
    }

    #[test]
    fn micros_render_as_exact_decimal_seconds() {
        assert_eq!(decimal(2_500, Unit::Micros), "0.0025");
        assert_eq!(decimal(50, Unit::Micros), "0.00005");
        assert_eq!(decimal(300_000_000, Unit::Micros), "300");
        assert_eq!(decimal(1_500_000, Unit::Micros), "1.5");
        assert_eq!(decimal(0, Unit::Micros), "0");
        assert_eq!(decimal(7, Unit::Count), "7");
    }

    #[test]
    fn a_family_keeps_one_series_per_key_and_spills_past_its_capacity() {
        let family: Family<&'static str, Counter> = Family::counters(2, "other");
        family.get("a").inc();
        family.get("b").add(2);
        family.get("a").inc();
        family.get("c").inc();
        family.get("d").inc();
        let series: Vec<(&str, u64)> = family.series().map(|(k, c)| (*k, c.get())).collect();
        assert_eq!(series, [("a", 2), ("b", 2), ("other", 2)]);
    }

    #[test]
    fn concurrent_first_uses_of_one_key_share_one_series() {
        let family: std::sync::Arc<Family<(u16, &'static str), Counter>> =
            std::sync::Arc::new(Family::counters(8, (0, "other")));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let family = family.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u16 {
                        family.get((200 + i % 3, "ok")).inc();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        let series: Vec<_> = family.series().filter(|(_, c)| c.get() > 0).collect();
        assert_eq!(series.len(), 3, "one series per key");
        assert_eq!(series.iter().map(|(_, c)| c.get()).sum::<u64>(), 4000);
    }

    #[test]
    fn the_exposition_has_one_header_per_family_and_cumulative_buckets() {
        let family: Family<&'static str, Histogram> =
            Family::new(4, "other", || Histogram::new(DISK_SECONDS));
        family.get("append").observe(300);
        family.get("append").observe(2_000_000);
        let requests: Family<(u16, &'static str), Counter> = Family::counters(4, (0, "other"));
        requests.get((409, "lock_held")).inc();
        let mut out = Exposition::new();
        out.gauge("baton_leases", "Live leases.", 3.0);
        out.histograms("baton_x_seconds", "X.", &["op"], &family);
        out.counters("baton_y_total", "Y.", &["status", "code"], &requests);
        let text = out.finish();
        assert!(text.starts_with(
            "# HELP baton_leases Live leases.\n# TYPE baton_leases gauge\nbaton_leases 3\n"
        ));
        assert!(text.contains("baton_x_seconds_bucket{op=\"append\",le=\"0.00025\"} 0\n"));
        assert!(text.contains("baton_x_seconds_bucket{op=\"append\",le=\"0.0005\"} 1\n"));
        assert!(text.contains("baton_x_seconds_bucket{op=\"append\",le=\"1\"} 1\n"));
        assert!(text.contains("baton_x_seconds_bucket{op=\"append\",le=\"+Inf\"} 2\n"));
        assert!(text.contains("baton_x_seconds_sum{op=\"append\"} 2.0003\n"));
        assert!(text.contains("baton_x_seconds_count{op=\"append\"} 2\n"));
        assert!(text.contains("baton_y_total{status=\"409\",code=\"lock_held\"} 1\n"));
        assert!(
            !text.contains("other"),
            "an unused spill series is not shown"
        );
        assert_eq!(text.matches("# TYPE baton_x_seconds histogram").count(), 1);
    }
}
