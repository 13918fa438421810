//! The newest log entries, kept in memory as they are appended, so that reading
//! them back does not go to RocksDB.
//!
//! openraft 0.9 applies committed entries by reading them from the log store
//! (in its core task, right after they were appended), and its replication tasks
//! read each new entry once per follower. Those reads all ask for entries written
//! a moment earlier: a RocksDB iterator (a seek through the memtable and every
//! level) and a postcard decode per entry, where a clone of the entry just written
//! does. Older entries (a follower catching up, a restart) still come from disk.

use std::collections::VecDeque;

use crate::type_config::Entry;

/// At most this many entries are kept: apply and replication read entries a few
/// appends old; a follower further behind reads from disk.
pub(crate) const TAIL_ENTRIES: usize = 1024;

/// At most this many encoded bytes are kept (one large batch does not pin
/// a thousand more).
pub(crate) const TAIL_BYTES: usize = 8 << 20;

/// A contiguous run of the log's newest entries, with each one's encoded size.
///
/// It mirrors every write of the log store it belongs to (append, truncate,
/// purge) as the write is submitted, before the log writer carries it out, so
/// whenever it holds an entry that entry is the one on disk at that index or
/// the one queued to be written there (and a failed write stops the Raft core,
/// so nothing is read from a tail ahead of a disk that will never catch up).
#[derive(Debug)]
pub(crate) struct LogTail {
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl LogTail {
    /// An empty tail holding at most `max_entries` entries and `max_bytes` bytes.
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        LogTail {
            entries: VecDeque::new(),
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(entry, _)| entry.log_id.index)
    }

    /// One past the last entry's index.
    fn end_index(&self) -> Option<u64> {
        self.entries.back().map(|(entry, _)| entry.log_id.index + 1)
    }

    /// `entry` (of `size` encoded bytes) is now in the log. An entry that does not
    /// follow the last one kept replaces what it conflicts with, or, after a gap,
    /// starts the tail afresh.
    pub(crate) fn appended(&mut self, entry: Entry, size: usize) {
        let index = entry.log_id.index;
        match (self.first_index(), self.end_index()) {
            (Some(_), Some(end)) if index == end => {}
            (Some(first), Some(end)) if first <= index && index < end => self.truncated(index),
            _ => self.clear(),
        }
        self.entries.push_back((entry, size));
        self.bytes += size;
        while self.entries.len() > self.max_entries
            || (self.bytes > self.max_bytes && self.entries.len() > 1)
        {
            self.pop_front();
        }
    }

    /// [`appended`](Self::appended) for each `(entry, size)`, in order.
    pub(crate) fn appended_all(&mut self, entries: impl IntoIterator<Item = (Entry, usize)>) {
        for (entry, size) in entries {
            self.appended(entry, size);
        }
    }

    /// Entries from `index` on were deleted from the log.
    pub(crate) fn truncated(&mut self, index: u64) {
        while self
            .entries
            .back()
            .is_some_and(|(entry, _)| entry.log_id.index >= index)
        {
            if let Some((_, size)) = self.entries.pop_back() {
                self.bytes -= size;
            }
        }
    }

    /// Entries up to and including `index` were deleted from the log.
    pub(crate) fn purged(&mut self, index: u64) {
        while self
            .entries
            .front()
            .is_some_and(|(entry, _)| entry.log_id.index <= index)
        {
            self.pop_front();
        }
    }

    /// Forgets everything (a write whose effect on the log is not known here).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn pop_front(&mut self) {
        if let Some((_, size)) = self.entries.pop_front() {
            self.bytes -= size;
        }
    }

    /// Copies of the entries with `start <= index < end`, when every one of them
    /// is kept here; `None` when any is not (the caller reads the disk). An empty
    /// range is not asked for.
    pub(crate) fn get(&self, start: u64, end: u64) -> Option<Vec<Entry>> {
        let (first, stop) = (self.first_index()?, self.end_index()?);
        if start < first || end > stop || start >= end {
            return None;
        }
        let from = usize::try_from(start - first).ok()?;
        let count = usize::try_from(end - start).ok()?;
        Some(
            self.entries
                .range(from..from + count)
                .map(|(entry, _)| entry.clone())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::*;

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    fn ids(entries: Option<Vec<Entry>>) -> Option<Vec<(u64, u64)>> {
        entries.map(|entries| {
            entries
                .iter()
                .map(|e| (e.log_id.leader_id.term, e.log_id.index))
                .collect()
        })
    }

    fn tail_of(range: std::ops::Range<u64>) -> LogTail {
        let mut tail = LogTail::new(TAIL_ENTRIES, TAIL_BYTES);
        for index in range {
            tail.appended(entry(1, index), 10);
        }
        tail
    }

    #[test]
    fn serves_only_ranges_it_holds_entirely() {
        let tail = tail_of(5..10);
        assert_eq!(
            ids(tail.get(5, 10)),
            Some(vec![(1, 5), (1, 6), (1, 7), (1, 8), (1, 9)])
        );
        assert_eq!(ids(tail.get(7, 8)), Some(vec![(1, 7)]));
        assert_eq!(ids(tail.get(4, 8)), None, "entry 4 is older than the tail");
        assert_eq!(ids(tail.get(8, 11)), None, "entry 10 is not written yet");
        assert_eq!(ids(tail.get(7, 7)), None);
        assert_eq!(ids(LogTail::new(4, 100).get(0, 1)), None);
    }

    #[test]
    fn a_conflicting_append_replaces_the_entries_from_its_index_on() {
        let mut tail = tail_of(1..6);
        // A follower's log is overwritten from index 3 by a new leader's entries.
        tail.appended(entry(2, 3), 10);
        assert_eq!(ids(tail.get(1, 4)), Some(vec![(1, 1), (1, 2), (2, 3)]));
        assert_eq!(
            ids(tail.get(1, 5)),
            None,
            "the old entries 4 and 5 are gone"
        );
        assert_eq!(tail.bytes, 30);
    }

    #[test]
    fn an_append_after_a_gap_starts_afresh() {
        // A snapshot was installed up to 99: the log goes on at 100.
        let mut tail = tail_of(1..4);
        tail.appended(entry(3, 100), 10);
        assert_eq!(ids(tail.get(1, 2)), None);
        assert_eq!(ids(tail.get(100, 101)), Some(vec![(3, 100)]));
        assert_eq!(tail.bytes, 10);
    }

    #[test]
    fn truncate_and_purge_drop_what_the_log_dropped() {
        let mut tail = tail_of(1..10);
        tail.truncated(7);
        assert_eq!(ids(tail.get(6, 7)), Some(vec![(1, 6)]));
        assert_eq!(ids(tail.get(6, 8)), None);
        tail.purged(3);
        assert_eq!(ids(tail.get(3, 5)), None);
        assert_eq!(ids(tail.get(4, 7)), Some(vec![(1, 4), (1, 5), (1, 6)]));
        assert_eq!(tail.bytes, 30);
        tail.purged(100);
        assert_eq!(ids(tail.get(6, 7)), None);
        assert_eq!(tail.bytes, 0);
    }

    #[test]
    fn keeps_at_most_its_entries_and_bytes() {
        let mut tail = LogTail::new(4, 1_000);
        for index in 1..=10 {
            tail.appended(entry(1, index), 10);
        }
        assert_eq!(ids(tail.get(6, 7)), None);
        assert_eq!(ids(tail.get(7, 11)).map(|v| v.len()), Some(4));

        let mut tail = LogTail::new(100, 25);
        for index in 1..=3 {
            tail.appended(entry(1, index), 10);
        }
        assert_eq!(ids(tail.get(1, 2)), None);
        assert_eq!(ids(tail.get(2, 4)).map(|v| v.len()), Some(2));
        // One entry larger than the budget is still kept (it is the newest).
        tail.appended(entry(1, 4), 100);
        assert_eq!(ids(tail.get(4, 5)), Some(vec![(1, 4)]));
        assert_eq!(tail.bytes, 100);
    }
}
