//! What the storage measures: appends and their fsync, log entries written,
//! snapshots built, and how long a committed entry waits to be applied.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use baton_metrics::{Counter, Histogram, CALL_SECONDS, DISK_SECONDS};

/// Commit points remembered for the commit-to-apply lag; openraft applies
/// right behind each commit, so a handful is all that is ever outstanding.
const COMMITS_KEPT: usize = 1024;

/// The storage's counters and histograms, shared by the log store, the state
/// machine store and the snapshot builder of one node.
#[derive(Debug)]
pub struct StoreMetrics {
    /// Duration of each append, from openraft's call to the entries being on
    /// disk: the wait behind writes queued before it on the log writer thread,
    /// then its synced RocksDB write batch (fsync included, shared with the
    /// writes queued beside it) for however many entries it carries.
    pub append: Histogram,
    /// Log entries appended (and synced) on this node: proposed here as leader
    /// or replicated from the leader.
    pub entries_appended: Counter,
    /// Bytes of those entries as written (encoded, before RocksDB's own
    /// framing): what the snapshot schedule weighs against a snapshot's size.
    pub log_bytes_appended: Counter,
    /// Log entries openraft read back (to apply or replicate them) that were
    /// still in memory, right behind their append.
    pub log_entries_read_from_memory: Counter,
    /// Log entries openraft read back from RocksDB: older than the in-memory tail
    /// (a lagging follower, the log re-applied at start).
    pub log_entries_read_from_disk: Counter,
    /// Snapshots this node built from its own state.
    pub snapshots_built: Counter,
    /// Duration of each snapshot build: encoding the state, writing and
    /// syncing its file (off the runtime's workers; applying goes on).
    pub snapshot_build: Histogram,
    /// Size in bytes of the last snapshot this node built or installed.
    pub snapshot_bytes: AtomicU64,
    /// From the moment openraft recorded an entry as committed
    /// (`save_committed`, right before it hands the entry to the state machine)
    /// to the moment it was applied, per applied entry.
    pub commit_to_apply: Histogram,
    /// `(highest committed index, when)`, oldest first.
    commits: Mutex<VecDeque<(u64, Instant)>>,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics {
            append: Histogram::new(DISK_SECONDS),
            entries_appended: Counter::new(),
            log_bytes_appended: Counter::new(),
            log_entries_read_from_memory: Counter::new(),
            log_entries_read_from_disk: Counter::new(),
            snapshots_built: Counter::new(),
            snapshot_build: Histogram::new(CALL_SECONDS),
            snapshot_bytes: AtomicU64::new(0),
            commit_to_apply: Histogram::new(DISK_SECONDS),
            commits: Mutex::new(VecDeque::new()),
        }
    }
}

impl StoreMetrics {
    /// Entries up to `index` are committed as of now.
    pub(crate) fn committed(&self, index: u64) {
        let mut commits = self.commits.lock().unwrap_or_else(PoisonError::into_inner);
        if commits.len() == COMMITS_KEPT {
            commits.pop_front();
        }
        commits.push_back((index, Instant::now()));
    }

    /// Entries `indexes` were applied now: each one's lag runs from the first
    /// commit point that covered it. Entries applied without a commit seen in
    /// this process (the log re-applied at start) are not measured.
    pub(crate) fn applied(&self, indexes: std::ops::RangeInclusive<u64>) {
        let mut commits = self.commits.lock().unwrap_or_else(PoisonError::into_inner);
        for index in indexes {
            // Commit points below this entry covered only entries already applied.
            while commits.front().is_some_and(|(upto, _)| *upto < index) {
                commits.pop_front();
            }
            if let Some((_, at)) = commits.front() {
                self.commit_to_apply.observe_duration(at.elapsed());
            }
        }
    }
}
