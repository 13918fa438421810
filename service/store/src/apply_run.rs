//! How much the state machine applies before it lets the runtime's other tasks
//! run.

use std::iter::Peekable;
use std::time::{Duration, Instant};

use openraft::EntryPayload;

use crate::type_config::Entry;

/// Requests after which a run of the state machine's task ends: the entry
/// that reaches this many ends it (a batch is never split).
///
/// openraft applies entries on its state-machine task, on the runtime that
/// also runs the Raft core, the peer listener and the client API (one thread
/// on a node of two cores). A follower that installed a snapshot applies the
/// entries it logged while the snapshot was restored all at once afterwards:
/// about 20,000 entries in `make bench-snapshot-cluster`, in a few hundred
/// commands that tokio let run back to back. That held the thread for about a
/// second, the leader's appends timed out meanwhile (60 ms) and the follower
/// went that long without an accepted leader RPC (issue 19 allows 125 ms).
pub const APPLY_RUN_REQUESTS: usize = 256;

/// Time after which a run ends: the entry applied when the run's time
/// reaches it ends it. The time counted is apply's own, not the time the task
/// waited for entries.
///
/// The request count alone was not enough: in that backlog a request took
/// about 25 µs instead of baton-core's half a microsecond (lookups among a
/// million locks, and the first allocations on the runtime's thread after the
/// restore faulting in fresh pages), so 256 requests held the thread for
/// several milliseconds; an append crosses the thread several times before it
/// is answered, and some still timed out. A millisecond keeps each crossing
/// short.
pub const APPLY_RUN_TIME: Duration = Duration::from_millis(1);

/// What the state machine's task applied since `apply` last yielded.
///
/// A run is not reset while the task waits for the next entries: the first
/// apply after a pause may yield once before it starts if the run before the
/// pause was spent (a few microseconds when nothing else is ready). Resetting
/// on a pause would need a clock of its own to tell a pause from the task
/// being kept from the thread.
#[derive(Debug)]
pub(crate) struct ApplyRun {
    requests: usize,
    busy: Duration,
    time_limit: Duration,
}

impl Default for ApplyRun {
    fn default() -> Self {
        ApplyRun::with_time_limit(APPLY_RUN_TIME)
    }
}

impl ApplyRun {
    /// A run that ends after `time_limit` of applying (or
    /// `APPLY_RUN_REQUESTS`, whichever comes first).
    pub(crate) fn with_time_limit(time_limit: Duration) -> Self {
        ApplyRun {
            requests: 0,
            busy: Duration::ZERO,
            time_limit,
        }
    }

    /// Whether the task should yield before it applies more.
    pub(crate) fn spent(&self) -> bool {
        self.spent_with(Duration::ZERO)
    }

    /// Whether the run is spent once `running` more time is counted.
    fn spent_with(&self, running: Duration) -> bool {
        self.requests >= APPLY_RUN_REQUESTS || self.busy + running >= self.time_limit
    }

    /// The task yielded: a new run starts.
    pub(crate) fn yielded(&mut self) {
        self.requests = 0;
        self.busy = Duration::ZERO;
    }

    /// The next entries of `entries` that fit in this run, counted as they are
    /// taken: always the first, then more while the run's requests and its
    /// time (with this call's, which began at `started`) are within limits.
    pub(crate) fn take<'a, I>(
        &'a mut self,
        entries: &'a mut Peekable<I>,
        started: Instant,
    ) -> impl Iterator<Item = Entry> + 'a
    where
        I: Iterator<Item = Entry>,
    {
        let mut first = true;
        std::iter::from_fn(move || {
            // The first entry is taken without reading the clock.
            if !first && self.spent_with(started.elapsed()) {
                return None;
            }
            first = false;
            let entry = entries.next()?;
            self.requests += weight(&entry);
            Some(entry)
        })
    }

    /// A call that began with `take` took `took` in all.
    pub(crate) fn ran(&mut self, took: Duration) {
        self.busy += took;
    }
}

/// What applying `entry` costs, in requests: its batch's, or one.
fn weight(entry: &Entry) -> usize {
    match &entry.payload {
        EntryPayload::Normal(batch) => batch.requests.len().max(1),
        EntryPayload::Blank | EntryPayload::Membership(_) => 1,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use baton_core::{Batch, Command, LeaseId, Limits, Request};
    use openraft::{CommittedLeaderId, LogId};

    fn entry(index: u64, requests: usize) -> Entry {
        let batch = Batch {
            now_ms: 1,
            limits: Limits::default(),
            requests: (0..requests)
                .map(|i| {
                    Request::plain(Command::CreateLease {
                        lease_id: LeaseId(i as u128),
                        ttl_ms: 10_000,
                        holder: "h".to_owned(),
                    })
                })
                .collect(),
        };
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(batch),
        }
    }

    fn indexes(taken: impl Iterator<Item = Entry>) -> Vec<u64> {
        taken.map(|entry| entry.log_id.index).collect()
    }

    /// A run whose time never ends it: only requests count.
    fn counted() -> ApplyRun {
        ApplyRun::with_time_limit(Duration::from_secs(3600))
    }

    #[test]
    fn a_run_ends_with_the_entry_that_reaches_the_request_limit() {
        let per_entry = APPLY_RUN_REQUESTS / 4;
        let mut entries = (1..=10).map(|i| entry(i, per_entry)).peekable();
        let mut run = counted();
        assert_eq!(
            indexes(run.take(&mut entries, Instant::now())),
            [1, 2, 3, 4]
        );
        assert!(run.spent());
        run.yielded();
        assert!(!run.spent());
        assert_eq!(
            indexes(run.take(&mut entries, Instant::now())),
            [5, 6, 7, 8]
        );
        run.yielded();
        assert_eq!(indexes(run.take(&mut entries, Instant::now())), [9, 10]);
        assert!(!run.spent(), "two entries are half a run");
    }

    #[test]
    fn a_run_goes_on_across_calls_until_it_is_spent() {
        let per_entry = APPLY_RUN_REQUESTS / 4;
        let mut run = counted();
        for index in 1..=3 {
            let mut one = [entry(index, per_entry)].into_iter().peekable();
            assert_eq!(indexes(run.take(&mut one, Instant::now())), [index]);
            assert!(!run.spent(), "after entry {index}");
        }
        let mut one = [entry(4, per_entry)].into_iter().peekable();
        assert_eq!(indexes(run.take(&mut one, Instant::now())), [4]);
        assert!(run.spent());
    }

    #[test]
    fn a_run_ends_when_its_time_is_spent_across_calls() {
        let limit = Duration::from_millis(500);
        let mut run = ApplyRun::with_time_limit(limit);
        let mut entries = (1..=3).map(|i| entry(i, 1)).peekable();
        // A call that began a run's time ago has spent it after its first entry.
        let long_ago = Instant::now() - limit;
        assert_eq!(indexes(run.take(&mut entries, long_ago)), [1]);
        run.ran(Duration::from_millis(300));
        assert!(!run.spent(), "300 ms of 500");
        run.ran(Duration::from_millis(200));
        assert!(run.spent());
        run.yielded();
        // Unless this thread stops for half a second, both fit in a new run.
        assert_eq!(indexes(run.take(&mut entries, Instant::now())), [2, 3]);
    }

    #[test]
    fn the_first_entry_is_taken_even_from_a_spent_run() {
        let mut run = ApplyRun::with_time_limit(Duration::ZERO);
        let mut entries = (1..=3).map(|i| entry(i, 1)).peekable();
        for index in 1..=3 {
            assert_eq!(indexes(run.take(&mut entries, Instant::now())), [index]);
        }
    }

    #[test]
    fn an_entry_larger_than_a_run_is_taken_whole() {
        let mut entries = [entry(1, APPLY_RUN_REQUESTS * 3), entry(2, 1)]
            .into_iter()
            .peekable();
        let mut run = counted();
        assert_eq!(indexes(run.take(&mut entries, Instant::now())), [1]);
        run.yielded();
        assert_eq!(indexes(run.take(&mut entries, Instant::now())), [2]);
    }

    #[test]
    fn an_empty_batch_counts_as_one_request() {
        let mut entries = (1..=APPLY_RUN_REQUESTS as u64 + 5)
            .map(|i| entry(i, 0))
            .peekable();
        let mut run = counted();
        assert_eq!(
            run.take(&mut entries, Instant::now()).count(),
            APPLY_RUN_REQUESTS
        );
    }

    /// The store's applies with a ticker task beside them on one thread
    /// (issue 19: a follower applying its backlog after an install held the
    /// runtime's one thread for a second, and the leader's appends timed out).
    mod in_the_store {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::{Arc, Mutex};

        use baton_core::{Outcome, StateMachine};
        use openraft::storage::RaftStateMachine;

        use super::*;
        use crate::shared::ApplyObserver;
        use crate::StateMachineStore;

        /// Records, for each applied entry, how often the ticker had run.
        struct TickObserver {
            ticks: Arc<AtomicU64>,
            seen: Mutex<Vec<u64>>,
        }

        impl ApplyObserver for TickObserver {
            fn applied(&self, _log_index: u64, _now_ms: u64, _outcomes: &[Outcome]) {
                let ticks = self.ticks.load(Ordering::SeqCst);
                self.seen.lock().unwrap().push(ticks);
            }

            fn snapshot_installed(&self, _revision: u64, _machine: &StateMachine) {}
        }

        /// A store cut into runs as `run` says, its observer, and a ticker
        /// task that counts each time it runs (abort it at the end).
        async fn store_with_ticker(
            dir: &tempfile::TempDir,
            run: ApplyRun,
        ) -> (
            StateMachineStore,
            Arc<TickObserver>,
            tokio::task::JoinHandle<()>,
        ) {
            let (_log, mut store) = crate::open(dir.path()).unwrap();
            store.set_apply_run(run);
            let ticks = Arc::new(AtomicU64::new(0));
            let observer = Arc::new(TickObserver {
                ticks: Arc::clone(&ticks),
                seen: Mutex::new(Vec::new()),
            });
            store.set_observer(Arc::clone(&observer) as Arc<dyn ApplyObserver>);
            let ticker = tokio::spawn(async move {
                loop {
                    ticks.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            });
            tokio::task::yield_now().await;
            (store, observer, ticker)
        }

        fn seen(observer: &TickObserver) -> Vec<u64> {
            observer.seen.lock().unwrap().clone()
        }

        #[tokio::test(flavor = "current_thread")]
        async fn other_tasks_run_between_runs_within_and_across_applies() {
            let dir = tempfile::TempDir::new().unwrap();
            let (mut store, observer, ticker) = store_with_ticker(&dir, counted()).await;
            let per_entry = APPLY_RUN_REQUESTS / 4;
            // One apply of three runs, then applies of one entry each (a
            // backlog of small commands: the run goes on across them).
            let replies = store
                .apply((1..=12).map(|i| entry(i, per_entry)).collect::<Vec<_>>())
                .await
                .unwrap();
            assert_eq!(replies.len(), 12);
            assert!(replies.iter().all(|reply| reply.len() == per_entry));
            for index in 13..=20 {
                store.apply([entry(index, per_entry)]).await.unwrap();
            }
            let seen = seen(&observer);
            assert_eq!(seen.len(), 20);
            // The ticker ran before entries 5, 9, 13 and 17, and only then.
            for (i, pair) in seen.windows(2).enumerate() {
                let next_entry = i + 2;
                assert_eq!(
                    pair[1] > pair[0],
                    next_entry % 4 == 1,
                    "before entry {next_entry}: {seen:?}"
                );
            }
            ticker.abort();
        }

        #[tokio::test(flavor = "current_thread")]
        async fn the_time_of_one_apply_counts_toward_the_next() {
            let dir = tempfile::TempDir::new().unwrap();
            // Any time spent applying spends the run; one request never does.
            let run = ApplyRun::with_time_limit(Duration::from_nanos(1));
            let (mut store, observer, ticker) = store_with_ticker(&dir, run).await;
            for index in 1..=5 {
                store.apply([entry(index, 1)]).await.unwrap();
            }
            let seen = seen(&observer);
            assert!(seen.windows(2).all(|pair| pair[1] > pair[0]), "{seen:?}");
            ticker.abort();
        }

        #[tokio::test(flavor = "current_thread")]
        async fn replies_keep_the_order_of_entries_split_into_runs() {
            let dir = tempfile::TempDir::new().unwrap();
            let (mut store, _observer, ticker) = store_with_ticker(&dir, counted()).await;
            let sizes = [200, 100, 50, 300, 1, 255];
            let entries: Vec<Entry> = sizes
                .iter()
                .zip(1..)
                .map(|(size, index)| entry(index, *size))
                .collect();
            let replies = store.apply(entries).await.unwrap();
            let lens: Vec<usize> = replies.iter().map(Vec::len).collect();
            assert_eq!(lens, sizes);
            ticker.abort();
        }
    }
}
