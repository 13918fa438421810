//! How much the state machine applies before it lets the runtime's other tasks
//! run.

use std::iter::Peekable;
use std::time::{Duration, Instant};

use openraft::EntryPayload;

use crate::type_config::Entry;

/// Requests applied between two yields of the state machine's task at most.
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

/// Time spent applying between two yields at most (apply's own time, not the
/// time the task waited for entries).
///
/// The request count alone was not enough: in that backlog a request took
/// about 25 µs instead of baton-core's half a microsecond (lookups among a
/// million locks, and the first allocations on the runtime's thread after the
/// restore faulting in fresh pages), so 256 requests held the thread for
/// several milliseconds; an append crosses the thread several times before it
/// is answered, and some still timed out. A millisecond keeps each crossing
/// short.
pub const APPLY_RUN_TIME: Duration = Duration::from_millis(1);

/// What the state machine's task applied since it last yielded.
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
        self.requests >= APPLY_RUN_REQUESTS || self.busy >= self.time_limit
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
            let over = self.requests >= APPLY_RUN_REQUESTS
                || self.busy + started.elapsed() >= self.time_limit;
            if over && !first {
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
        let mut run = ApplyRun::with_time_limit(Duration::from_millis(5));
        let mut entries = (1..=3).map(|i| entry(i, 1)).peekable();
        // A call that began 5 ms ago has spent the run after its first entry.
        let long_ago = Instant::now() - Duration::from_millis(5);
        assert_eq!(indexes(run.take(&mut entries, long_ago)), [1]);
        run.ran(Duration::from_millis(3));
        assert!(!run.spent(), "3 ms of 5");
        run.ran(Duration::from_millis(2));
        assert!(run.spent());
        run.yielded();
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
}
