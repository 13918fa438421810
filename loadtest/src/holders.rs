//! readers-writers and semaphore (issue 17): the workers, and the holder count
//! that checks, while the load runs, that the server never lets incompatible
//! holders overlap.
//!
//! Each client counts itself in once its grant has arrived and out before it sends
//! its release, so the interval it counts lies inside the one in which the server
//! had it as a holder: an overlap seen here is an overlap on the server (the
//! leases live 60 s, far beyond a run's operations, so none expires meanwhile).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::driver::Worker;
use crate::error::OpError;
use crate::recorder::Latency;
use crate::target::{Lease, Target};

/// What the clients hold right now, and what they saw over the run.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct HoldState {
    readers: u64,
    writers: u64,
    permits: u64,
    /// Most readers holding together.
    pub max_readers: u64,
    /// Most permits out together (semaphore) or holders together (lock).
    pub max_holders: u64,
    /// Sum of every holding's length (divided by the run's length: mean holders).
    pub held: Duration,
    /// Overlaps the server should never have allowed.
    pub violations: u64,
    /// The first of them, in words.
    pub first_violation: Option<String>,
}

impl HoldState {
    fn violation(&mut self, why: String) {
        self.violations += 1;
        if self.first_violation.is_none() {
            self.first_violation = Some(why);
        }
    }

    /// A reader (`writer` false) or a writer got the lock with `token`.
    pub fn enter_lock(&mut self, writer: bool, token: u64) {
        let (r, w) = (self.readers, self.writers);
        if writer && (r > 0 || w > 0) {
            self.violation(format!(
                "writer granted (token {token}) while {r} reader(s) and {w} writer(s) held"
            ));
        } else if !writer && w > 0 {
            self.violation(format!(
                "reader granted (token {token}) while {w} writer(s) held"
            ));
        }
        if writer {
            self.writers += 1;
        } else {
            self.readers += 1;
        }
        self.max_readers = self.max_readers.max(self.readers);
        self.max_holders = self.max_holders.max(self.readers + self.writers);
    }

    /// The holder that [`HoldState::enter_lock`] counted is about to release.
    pub fn exit_lock(&mut self, writer: bool, held: Duration) {
        if writer {
            self.writers = self.writers.saturating_sub(1);
        } else {
            self.readers = self.readers.saturating_sub(1);
        }
        self.held += held;
    }

    /// `permits` of a semaphore of `limit` were granted with `token`.
    pub fn enter_permits(&mut self, permits: u64, limit: u64, token: u64) {
        self.permits += permits;
        if self.permits > limit {
            self.violation(format!(
                "{} permits out of {limit} once token {token} was granted",
                self.permits
            ));
        }
        self.max_holders = self.max_holders.max(self.permits);
    }

    /// The permits that [`HoldState::enter_permits`] counted are about to go back.
    pub fn exit_permits(&mut self, permits: u64, held: Duration) {
        self.permits = self.permits.saturating_sub(permits);
        self.held += held;
    }
}

/// [`HoldState`] shared by the workers of a run.
#[derive(Debug, Default, Clone)]
pub struct Holders(Arc<Mutex<HoldState>>);

impl Holders {
    fn with<T>(&self, f: impl FnOnce(&mut HoldState) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A copy of the state.
    pub fn state(&self) -> HoldState {
        self.with(|s| s.clone())
    }

    /// Adds the holders' numbers to a report's `extra`; `elapsed` is the run's length.
    pub fn report(&self, elapsed: Duration, extra: &mut std::collections::BTreeMap<String, Value>) {
        let s = self.state();
        extra.insert("max_holders".into(), json!(s.max_holders));
        extra.insert("max_readers".into(), json!(s.max_readers));
        extra.insert(
            "mean_holders".into(),
            json!(s.held.as_secs_f64() / elapsed.as_secs_f64().max(1e-9)),
        );
        extra.insert("violations".into(), json!(s.violations));
        if let Some(why) = s.first_violation {
            extra.insert("first_violation".into(), json!(why));
        }
    }
}

/// Latencies of readers and writers apart.
#[derive(Clone)]
pub struct SplitLatency(Arc<Mutex<[Histogram<u64>; 2]>>);

impl SplitLatency {
    /// Empty histograms.
    pub fn new() -> Self {
        let h = || {
            Histogram::new_with_bounds(1, 600_000_000, 3)
                .expect("static histogram bounds are valid")
        };
        Self(Arc::new(Mutex::new([h(), h()])))
    }

    fn record(&self, writer: bool, latency: Duration) {
        let us = (latency.as_micros() as u64).clamp(1, 600_000_000);
        self.0.lock().unwrap_or_else(PoisonError::into_inner)[usize::from(writer)]
            .saturating_record(us);
    }

    /// `readers` and `writers`: operations, per second over `elapsed`, latency.
    pub fn report(&self, elapsed: Duration, extra: &mut std::collections::BTreeMap<String, Value>) {
        let h = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, h) in [("readers", &h[0]), ("writers", &h[1])] {
            extra.insert(
                name.into(),
                json!({
                    "operations": h.len(),
                    "throughput_per_s": h.len() as f64 / elapsed.as_secs_f64().max(1e-9),
                    "latency_us": Latency::of(h),
                }),
            );
        }
    }
}

/// Whether operation `k` is a writer: exactly `percent` of every 100 operations.
pub fn is_writer(k: u64, percent: u64) -> bool {
    k % 100 < percent
}

/// readers-writers: acquire the one lock shared or exclusive (waiting), release.
pub struct RwWorker {
    /// The server.
    pub target: Target,
    /// This client's lease.
    pub lease: Lease,
    /// The lock.
    pub name: String,
    /// Percentage of writers.
    pub writers_percent: u64,
    /// Hold this long before releasing.
    pub hold: Duration,
    /// The shared holder count.
    pub holders: Holders,
    /// Reader and writer latencies.
    pub split: SplitLatency,
}

impl Worker for RwWorker {
    async fn op(&mut self, k: u64) -> Result<(), OpError> {
        // Spread the writers over time: operation numbers are handed out in turn,
        // so k % 100 alone would make ten writers in a row.
        let writer = is_writer(k.wrapping_mul(37), self.writers_percent);
        let start = Instant::now();
        let held = self
            .target
            .acquire_rw(&self.name, &self.lease, !writer, k)
            .await?;
        let since = Instant::now();
        self.holders.with(|s| s.enter_lock(writer, held.token));
        if !self.hold.is_zero() {
            tokio::time::sleep(self.hold).await;
        }
        self.holders.with(|s| s.exit_lock(writer, since.elapsed()));
        self.target.release_rw(&self.lease, &held).await?;
        self.split.record(writer, start.elapsed());
        Ok(())
    }
}

/// semaphore: take one permit of the one semaphore (waiting), hold, release.
pub struct SemaphoreWorker {
    /// The server.
    pub target: Target,
    /// This client's lease.
    pub lease: Lease,
    /// The semaphore.
    pub name: String,
    /// Its limit.
    pub limit: u32,
    /// Hold this long before releasing.
    pub hold: Duration,
    /// The shared permit count.
    pub holders: Holders,
}

impl Worker for SemaphoreWorker {
    async fn op(&mut self, k: u64) -> Result<(), OpError> {
        let held = self
            .target
            .acquire_permits(&self.name, &self.lease, self.limit, k)
            .await?;
        let since = Instant::now();
        self.holders
            .with(|s| s.enter_permits(1, u64::from(self.limit), held.token));
        if !self.hold.is_zero() {
            tokio::time::sleep(self.hold).await;
        }
        self.holders.with(|s| s.exit_permits(1, since.elapsed()));
        self.target.release_permits(&self.lease, &held).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_share_and_a_writer_overlaps_nobody() {
        let mut s = HoldState::default();
        s.enter_lock(false, 1);
        s.enter_lock(false, 2);
        assert_eq!((s.violations, s.max_readers), (0, 2));
        s.exit_lock(false, Duration::from_millis(1));
        s.exit_lock(false, Duration::from_millis(1));
        s.enter_lock(true, 3);
        assert_eq!(s.violations, 0);
        s.enter_lock(false, 4);
        assert_eq!(s.violations, 1, "a reader beside a writer");
        s.exit_lock(false, Duration::ZERO);
        s.enter_lock(true, 5);
        assert_eq!(s.violations, 2, "two writers");
        assert!(s
            .first_violation
            .as_deref()
            .is_some_and(|w| w.contains("token 4")));
        assert_eq!(s.held, Duration::from_millis(2));
    }

    #[test]
    fn at_most_limit_permits() {
        let mut s = HoldState::default();
        for t in 0..8 {
            s.enter_permits(1, 8, t);
        }
        assert_eq!((s.violations, s.max_holders), (0, 8));
        s.enter_permits(1, 8, 9);
        assert_eq!(s.violations, 1);
        s.exit_permits(1, Duration::ZERO);
        s.exit_permits(1, Duration::ZERO);
        s.enter_permits(1, 8, 10);
        assert_eq!(s.violations, 1);
    }

    #[test]
    fn writers_are_the_given_share_of_operations() {
        let writers = (0..1000).filter(|k| is_writer(k * 37, 10)).count();
        assert_eq!(writers, 100);
        // The first 64 operations (one per client at the start) include writers.
        assert!((0..64).any(|k| is_writer(k * 37, 10)));
        assert_eq!((0..1000).filter(|k| is_writer(*k, 0)).count(), 0);
    }
}
