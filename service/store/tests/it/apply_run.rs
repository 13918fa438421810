//! The state machine lets the runtime's other tasks run between runs of
//! applied requests (`APPLY_RUN_REQUESTS`, `APPLY_RUN_TIME`), within one apply
//! call and across calls (issue 19: a follower applying its backlog after a snapshot install
//! held the runtime's one thread for a second, and the leader's appends timed
//! out meanwhile).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use baton_core::{Outcome, StateMachine};
use baton_store::{ApplyObserver, APPLY_RUN_REQUESTS};
use openraft::storage::RaftStateMachine;
use tempfile::TempDir;

use crate::common::{lease_batch, normal};

/// Records, for each applied entry, how often the other task had run by then.
struct TickObserver {
    ticks: Arc<AtomicU64>,
    seen: Mutex<Vec<(u64, u64)>>,
}

impl ApplyObserver for TickObserver {
    fn applied(&self, log_index: u64, _now_ms: u64, _outcomes: &[Outcome]) {
        let ticks = self.ticks.load(Ordering::SeqCst);
        self.seen.lock().unwrap().push((log_index, ticks));
    }

    fn snapshot_installed(&self, _revision: u64, _machine: &StateMachine) {}
}

/// Entries `first..=last`, each creating a quarter of a run's leases.
fn quarter_run_entries(first: u64, last: u64) -> Vec<baton_store::Entry> {
    let per_entry = (APPLY_RUN_REQUESTS / 4) as u128;
    (first..=last)
        .map(|index| {
            let ids: Vec<u128> = (0..per_entry)
                .map(|i| u128::from(index) * 10_000 + i)
                .collect();
            normal(1, index, lease_batch(5, &ids))
        })
        .collect()
}

/// The tick count each entry saw, in log order.
fn ticks_by_entry(observer: &TickObserver) -> Vec<u64> {
    observer
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, t)| *t)
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn other_tasks_run_between_runs_of_applied_requests() {
    let dir = TempDir::new().unwrap();
    let (_log, mut store) = baton_store::open(dir.path()).unwrap();
    let ticks = Arc::new(AtomicU64::new(0));
    let observer = Arc::new(TickObserver {
        ticks: Arc::clone(&ticks),
        seen: Mutex::new(Vec::new()),
    });
    store.set_observer(Arc::clone(&observer) as Arc<dyn ApplyObserver>);
    // Another task on the same (one) thread: it counts each time it runs.
    let ticker = tokio::spawn({
        let ticks = Arc::clone(&ticks);
        async move {
            loop {
                ticks.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        }
    });
    tokio::task::yield_now().await;

    // One call of three runs, then calls of one entry each (a backlog of
    // small commands: the run goes on across calls). A run holds four of
    // these entries at most (fewer when `APPLY_RUN_TIME` ends it first), and
    // the other task runs between runs: among any five entries in a row, it
    // ran at least once.
    store.apply(quarter_run_entries(1, 12)).await.unwrap();
    for index in 13..=20 {
        store
            .apply(quarter_run_entries(index, index))
            .await
            .unwrap();
    }
    let seen = ticks_by_entry(&observer);
    assert_eq!(seen.len(), 20);
    for i in 4..seen.len() {
        assert!(seen[i] > seen[i - 4], "entry {}: {seen:?}", i + 1);
    }
    ticker.abort();
}
