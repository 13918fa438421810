//! When a node builds a snapshot.
//!
//! openraft's own policy counts entries only. At a million holdings a snapshot
//! is about 110 MiB and more than a CPU-second to build, while 20,000 entries
//! of lock cycles are a few MiB of log: counting entries alone, a busy node
//! rebuilt its whole state three times in 20 s (BENCHMARKS.md, "Cost as the
//! state grows") and wrote far more snapshot than log. So a snapshot also
//! waits until the log written since the last one is `log_ratio` times that
//! snapshot's size. Snapshot writing then stays within `1 / log_ratio` of the
//! log's, and a restart replays at most about `log_ratio` snapshots' worth of
//! log, which costs about what reading the snapshot does. A small state (most
//! deployments) still snapshots every `every` entries.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::node::Node;

/// How often the schedule looks at the log.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// When a snapshot is due.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SnapshotSchedule {
    /// Entries since the last snapshot, at least.
    pub every: u64,
    /// Log bytes written since the last snapshot, at least, as a multiple of
    /// that snapshot's size (0: entries only).
    pub log_ratio: f64,
}

impl SnapshotSchedule {
    /// Whether a snapshot is due after `entries_since` entries and
    /// `log_bytes_since` bytes of log since the last one, which was
    /// `last_snapshot_bytes` long (0 when there is none).
    pub fn due(&self, entries_since: u64, log_bytes_since: u64, last_snapshot_bytes: u64) -> bool {
        entries_since >= self.every
            && log_bytes_since as f64 >= self.log_ratio * last_snapshot_bytes as f64
    }
}

/// Asks openraft for a snapshot whenever the schedule says one is due (openraft
/// ignores the ask while a build is under way). Log bytes count from the last
/// snapshot this task saw built or installed; after a restart, from the start.
pub(crate) async fn run(node: Arc<Node>, schedule: SnapshotSchedule) {
    let store = Arc::clone(&node.metrics.store);
    let mut stop = node.stop.subscribe();
    let mut ticker = tokio::time::interval(LOOK_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = None;
    let mut bytes_at_seen = store.log_bytes_appended.get();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return,
        }
        let (applied, snapshot) = {
            let metrics = node.raft.metrics();
            let metrics = metrics.borrow();
            let index = |log_id: Option<openraft::LogId<u64>>| log_id.map(|id| id.index);
            (index(metrics.last_applied), index(metrics.snapshot))
        };
        if snapshot != seen {
            seen = snapshot;
            bytes_at_seen = store.log_bytes_appended.get();
        }
        let entries_since = applied.unwrap_or(0).saturating_sub(snapshot.unwrap_or(0));
        let bytes_since = store.log_bytes_appended.get().saturating_sub(bytes_at_seen);
        let last_size = store.snapshot_bytes.load(Ordering::Relaxed);
        if schedule.due(entries_since, bytes_since, last_size) {
            if let Err(error) = node.raft.trigger().snapshot().await {
                tracing::debug!(%error, "asking for a snapshot");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_alone_decide_for_a_first_snapshot_or_a_zero_ratio() {
        let schedule = SnapshotSchedule {
            every: 100,
            log_ratio: 1.0,
        };
        assert!(!schedule.due(99, 1 << 30, 0));
        assert!(schedule.due(100, 0, 0));
        let entries_only = SnapshotSchedule {
            every: 100,
            log_ratio: 0.0,
        };
        assert!(entries_only.due(100, 0, 1 << 30));
    }

    #[test]
    fn a_large_snapshot_waits_until_as_much_log_was_written() {
        let schedule = SnapshotSchedule {
            every: 100,
            log_ratio: 1.0,
        };
        let snapshot = 110 << 20;
        assert!(!schedule.due(20_000, 5 << 20, snapshot));
        assert!(!schedule.due(20_000, snapshot - 1, snapshot));
        assert!(schedule.due(20_000, snapshot, snapshot));
        let half = SnapshotSchedule {
            every: 100,
            log_ratio: 0.5,
        };
        assert!(half.due(20_000, snapshot / 2, snapshot));
        assert!(!half.due(99, snapshot, snapshot));
    }
}
