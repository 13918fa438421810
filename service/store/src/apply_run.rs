//! How much the state machine applies before it lets the runtime's other tasks
//! run.

use std::iter::Peekable;

use openraft::EntryPayload;

use crate::type_config::Entry;

/// Requests applied between two yields of the state machine's task.
///
/// openraft applies entries on its state-machine task, on the runtime that
/// also runs the Raft core, the peer listener and the client API (one thread
/// on a node of two cores). A follower that installed a snapshot applies the
/// entries it logged while the snapshot was restored all at once afterwards:
/// about 20,000 entries in `make bench-snapshot-cluster`, in a few hundred
/// commands that tokio let run back to back. That held the thread for about a
/// second, the leader's appends timed out meanwhile (60 ms) and the follower
/// went that long without an accepted leader RPC (issue 19 allows 125 ms).
/// baton-core applies a request in about half a microsecond (its criterion
/// bench `batch64`), and that backlog took about 50 µs per entry of a few
/// requests with everything else the thread did, so a run of 256 requests is
/// a few milliseconds at most; a steady load yields a few dozen times a
/// second, which costs nothing measurable.
pub const APPLY_RUN_REQUESTS: usize = 256;

/// The requests applied since the state machine's task last yielded.
#[derive(Debug, Default)]
pub(crate) struct ApplyRun {
    since_yield: usize,
}

impl ApplyRun {
    /// Whether the task should yield before it applies more.
    pub(crate) fn spent(&self) -> bool {
        self.since_yield >= APPLY_RUN_REQUESTS
    }

    /// The task yielded: a new run starts.
    pub(crate) fn yielded(&mut self) {
        self.since_yield = 0;
    }

    /// The next entries of `entries` that fit in this run, counted as they are
    /// taken; at least one when the run is not spent.
    pub(crate) fn take<'a, I>(
        &'a mut self,
        entries: &'a mut Peekable<I>,
    ) -> impl Iterator<Item = Entry> + 'a
    where
        I: Iterator<Item = Entry>,
    {
        std::iter::from_fn(move || {
            if self.spent() {
                return None;
            }
            let entry = entries.next()?;
            self.since_yield += weight(&entry);
            Some(entry)
        })
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

    #[test]
    fn a_run_ends_with_the_entry_that_reaches_the_limit() {
        let per_entry = APPLY_RUN_REQUESTS / 4;
        let mut entries = (1..=10).map(|i| entry(i, per_entry)).peekable();
        let mut run = ApplyRun::default();
        assert_eq!(indexes(run.take(&mut entries)), [1, 2, 3, 4]);
        assert!(run.spent());
        assert!(indexes(run.take(&mut entries)).is_empty());
        run.yielded();
        assert_eq!(indexes(run.take(&mut entries)), [5, 6, 7, 8]);
        run.yielded();
        assert_eq!(indexes(run.take(&mut entries)), [9, 10]);
        assert!(!run.spent(), "two entries are half a run");
    }

    #[test]
    fn an_entry_larger_than_a_run_is_taken_whole() {
        let mut entries = [entry(1, APPLY_RUN_REQUESTS * 3), entry(2, 1)]
            .into_iter()
            .peekable();
        let mut run = ApplyRun::default();
        assert_eq!(indexes(run.take(&mut entries)), [1]);
        run.yielded();
        assert_eq!(indexes(run.take(&mut entries)), [2]);
    }

    #[test]
    fn an_empty_batch_counts_as_one_request() {
        let mut entries = (1..=APPLY_RUN_REQUESTS as u64 + 5)
            .map(|i| entry(i, 0))
            .peekable();
        let mut run = ApplyRun::default();
        assert_eq!(run.take(&mut entries).count(), APPLY_RUN_REQUESTS);
    }
}
