//! The Raft log, the vote and the log pointers, in RocksDB.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, PoisonError};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, OptionalSend, RaftLogReader, StorageIOError};
use rocksdb::{Direction, IteratorMode, WriteBatch, DB};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{self, decode, encode, log_key, LOG_KEY_END};
use crate::committed_mark::CommittedMark;
use crate::db::{self, CF_LOG, CF_META, KEY_COMMITTED, KEY_LAST_PURGED, KEY_VOTE};
use crate::error::StoreError;
use crate::log_tail::{LogTail, TAIL_BYTES, TAIL_ENTRIES};
use crate::log_writer::LogWriter;
use crate::metrics::StoreMetrics;
use crate::stage_times;
use crate::type_config::{Entry, LogId, LogState, StorageResult, TypeConfig, Vote};
use crate::Durability;

/// openraft's log storage on RocksDB: entries in the `log` column family, the
/// vote and the committed and last purged log ids in `meta`.
///
/// # Durability
///
/// - [`RaftLogStorage::append`] writes all entries of one call in ONE write batch
///   and reports them flushed only once that batch is synced: one fsync per
///   append call however many entries it carries, which is what makes proposal
///   batching pay, and fewer when appends queue together on the writer (the
///   last synced write of a group makes the ones before it in RocksDB's
///   write-ahead log durable too).
/// - After a write fails, every later one fails without being written
///   ([`LogWriter`]), so a failed append never leaves a hole below entries
///   written after it.
/// - [`RaftLogStorage::save_vote`], [`RaftLogStorage::truncate`] and
///   [`RaftLogStorage::purge`] are synced before they return.
/// - [`RaftLogStorage::save_committed`] is not written by itself: it is called
///   on every commit advance, so the next append carries it in its batch
///   ([`CommittedMark`]), and a stored value that lags (or is lost in a crash)
///   only means fewer entries are re-applied at startup (the rest are
///   re-committed by the leader).
/// - `truncate` and `purge` are single atomic write batches (a range delete,
///   plus the new last purged id for `purge`), so a crash never leaves a hole.
///
/// # Writing in order, off the Raft core
///
/// Every write goes to one [`LogWriter`] thread, which carries them out in the
/// order they were submitted (Raft needs the log's writes in order) and syncs
/// the ones that queued together once. `append` returns as soon as its write is
/// queued and reports the flush through openraft's callback (but an append
/// openraft's core waits for, a follower's or a single node's, is written on
/// the calling task when nothing is queued: the core would only wait for the
/// hand-over to the writer and back); `save_vote`,
/// `truncate` and `purge` wait for theirs.
/// So no fsync blocks the runtime worker that runs openraft's core, and the
/// patched core (vendor/openraft) replicates a leader's entries while its own
/// append syncs.
///
/// # Reading back
///
/// The newest entries are also kept in memory ([`LogTail`]), from the moment
/// `append` is called: openraft reads each entry back right after appending it
/// (to apply it, and once per follower to replicate it, before the leader's
/// own sync is done), and those reads are served from there. A read the tail
/// cannot serve first waits for the queued writes, so the disk has everything
/// appended before it.
///
/// Cloning is cheap (the database and the tail are shared); the log reader
/// handed to replication tasks is such a clone.
#[derive(Clone)]
pub struct LogStore {
    committed: Arc<CommittedMark>,
    db: Arc<DB>,
    /// Testing only: how long a leader's own append is held before it is written.
    leader_append_hold: std::time::Duration,
    metrics: Arc<StoreMetrics>,
    tail: Arc<Mutex<LogTail>>,
    writer: Arc<LogWriter>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("path", &self.db.path())
            .finish()
    }
}

impl LogStore {
    pub(crate) fn new(
        db: Arc<DB>,
        durability: Durability,
        metrics: Arc<StoreMetrics>,
    ) -> Result<Self, StoreError> {
        let writer = LogWriter::start(db.clone(), durability)?;
        Ok(LogStore {
            committed: Arc::new(CommittedMark::new(db.clone(), writer.clone())),
            writer,
            leader_append_hold: durability.leader_append_hold(),
            db,
            metrics,
            tail: Arc::new(Mutex::new(LogTail::new(TAIL_ENTRIES, TAIL_BYTES))),
        })
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, LogTail> {
        self.tail.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get_meta<T: DeserializeOwned>(
        &self,
        key: &[u8],
        what: &'static str,
    ) -> Result<Option<T>, StoreError> {
        let cf = db::cf(&self.db, CF_META)?;
        match self.db.get_pinned_cf(cf, key)? {
            Some(bytes) => Ok(Some(decode(what, &bytes)?)),
            None => Ok(None),
        }
    }

    /// A batch that puts `value` under `key` in `meta`.
    fn meta_batch<T: Serialize>(
        &self,
        key: &[u8],
        what: &'static str,
        value: &T,
    ) -> Result<WriteBatch, StoreError> {
        let cf = db::cf(&self.db, CF_META)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(cf, key, encode(what, value)?);
        Ok(batch)
    }

    fn last_purged(&self) -> Result<Option<LogId>, StoreError> {
        self.get_meta(KEY_LAST_PURGED, "last purged log id")
    }

    /// The log id of the last entry present, if any.
    fn last_present(&self) -> Result<Option<LogId>, StoreError> {
        let cf = db::cf(&self.db, CF_LOG)?;
        match self.db.iterator_cf(cf, IteratorMode::End).next() {
            Some(item) => {
                let (_, value) = item?;
                let entry: Entry = decode("log entry", &value)?;
                Ok(Some(entry.log_id))
            }
            None => Ok(None),
        }
    }

    fn log_state(&self) -> Result<LogState, StoreError> {
        let last_purged_log_id = self.last_purged()?;
        // Entries present are after the purge point, so the last one (if any)
        // is the last log id; with none left the purge point is. `max` also
        // covers openraft's startup clean-up purging past the last entry's id.
        let last_log_id = std::cmp::max(self.last_present()?, last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    /// Entries with `start <= index < end` (`end == None`: to the last one).
    fn read_range(&self, start: u64, end: Option<u64>) -> Result<Vec<Entry>, StoreError> {
        let cf = db::cf(&self.db, CF_LOG)?;
        let from = log_key(start);
        let mut entries = Vec::new();
        for item in self
            .db
            .iterator_cf(cf, IteratorMode::From(&from, Direction::Forward))
        {
            let (key, value) = item?;
            let index = codec::log_index(&key)?;
            if end.is_some_and(|end| index >= end) {
                break;
            }
            entries.push(decode("log entry", &value)?);
        }
        Ok(entries)
    }

    /// Puts `entries` in the tail, where reads find them at once, and queues
    /// their write; `flushed` runs once they are on disk.
    fn write_entries(
        &self,
        entries: impl IntoIterator<Item = Entry>,
        flushed: LogFlushed<TypeConfig>,
    ) -> Result<(), StoreError> {
        let cf = db::cf(&self.db, CF_LOG)?;
        let mut batch = WriteBatch::default();
        // Trace spans only: when this append started, and its first and last index.
        let started = stage_times::recording().then(std::time::SystemTime::now);
        let mut indexes = None;
        let mut encoded_entries = Vec::new();
        let mut bytes = 0;
        for entry in entries {
            let index = entry.log_id.index;
            indexes = Some((indexes.map_or(index, |(first, _)| first), index));
            let encoded = encode("log entry", &entry)?;
            bytes += encoded.len() as u64;
            encoded_entries.push((entry, encoded.len()));
            batch.put_cf(cf, log_key(index), encoded);
        }
        self.committed.add_to(&mut batch)?;
        let count = encoded_entries.len() as u64;
        self.tail().appended_all(encoded_entries);
        let metrics = self.metrics.clone();
        let queued = std::time::Instant::now();
        let awaited = flushed.awaited();
        let done = move |written: Result<(), StoreError>| {
            metrics.append.observe_duration(queued.elapsed());
            if written.is_ok() {
                metrics.entries_appended.add(count);
                metrics.log_bytes_appended.add(bytes);
                if let (Some(started), Some((first, last))) = (started, indexes) {
                    stage_times::appended(first, last, started);
                }
            }
            flushed.log_io_completed(written.map_err(|e| io::Error::other(e.to_string())));
        };
        // A follower's or a single node's core waits for this flush anyway:
        // written here, it is spared the hand-over to the writer and back.
        if awaited {
            self.writer
                .write_here_or_submit(batch, true, Box::new(done));
        } else {
            let hold = self.leader_append_hold;
            self.writer.submit_held(batch, true, hold, Box::new(done));
        }
        Ok(())
    }

    async fn delete_since(&self, index: u64) -> Result<(), StoreError> {
        // The tail first: a read racing the delete then finds the entries on
        // disk at worst, as it would without a tail.
        self.tail().truncated(index);
        let cf = db::cf(&self.db, CF_LOG)?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf, log_key(index).as_slice(), LOG_KEY_END.as_slice());
        self.writer.write(batch, true).await
    }

    async fn delete_upto(&self, log_id: &LogId) -> Result<(), StoreError> {
        self.tail().purged(log_id.index);
        let log_cf = db::cf(&self.db, CF_LOG)?;
        let meta_cf = db::cf(&self.db, CF_META)?;
        let mut batch = WriteBatch::default();
        // Recording the purge point and deleting the entries in one batch: a
        // crash leaves either both or neither, never entries missing below a
        // stale purge point (a hole).
        batch.put_cf(
            meta_cf,
            KEY_LAST_PURGED,
            encode("last purged log id", log_id)?,
        );
        match log_id.index.checked_add(1) {
            Some(end) => {
                batch.delete_range_cf(log_cf, log_key(0).as_slice(), log_key(end).as_slice())
            }
            None => batch.delete_range_cf(log_cf, log_key(0).as_slice(), LOG_KEY_END.as_slice()),
        }
        self.writer.write(batch, true).await
    }
}

fn read_logs_err(e: StoreError) -> openraft::StorageError<u64> {
    StorageIOError::read_logs(&e).into()
}

fn write_logs_err(e: StoreError) -> openraft::StorageError<u64> {
    StorageIOError::write_logs(&e).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry>> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => match s.checked_add(1) {
                Some(s) => s,
                None => return Ok(Vec::new()),
            },
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => None,
        };
        if end.is_some_and(|end| end <= start) {
            return Ok(Vec::new());
        }
        if let Some(entries) = end.and_then(|end| self.tail().get(start, end)) {
            self.metrics
                .log_entries_read_from_memory
                .add(entries.len() as u64);
            return Ok(entries);
        }
        self.writer.caught_up().await.map_err(read_logs_err)?;
        let entries = self.read_range(start, end).map_err(read_logs_err)?;
        self.metrics
            .log_entries_read_from_disk
            .add(entries.len() as u64);
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState> {
        self.writer.caught_up().await.map_err(read_logs_err)?;
        self.log_state().map_err(read_logs_err)
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> StorageResult<()> {
        let batch = self
            .meta_batch(KEY_VOTE, "vote", vote)
            .map_err(|e| StorageIOError::write_vote(&e))?;
        self.writer
            .write(batch, true)
            .await
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote>> {
        self.writer
            .caught_up()
            .await
            .map_err(|e| StorageIOError::read_vote(&e))?;
        self.get_meta(KEY_VOTE, "vote")
            .map_err(|e| StorageIOError::read_vote(&e).into())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> StorageResult<()> {
        if let Some(committed) = &committed {
            self.metrics.committed(committed.index);
        }
        self.committed.save(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId>> {
        if let Some(committed) = self.committed.latest() {
            return Ok(committed);
        }
        self.writer.caught_up().await.map_err(read_logs_err)?;
        let committed: Option<Option<LogId>> = self
            .get_meta(KEY_COMMITTED, "committed log id")
            .map_err(read_logs_err)?;
        Ok(committed.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // The callback runs on the writer thread once the batch is synced;
        // an encoding error leaves it unsent, and openraft stops on the error
        // returned here instead.
        self.write_entries(entries, callback)
            .map_err(write_logs_err)
    }

    async fn truncate(&mut self, log_id: LogId) -> StorageResult<()> {
        tracing::debug!(%log_id, "truncating log");
        self.delete_since(log_id.index)
            .await
            .map_err(|e| StorageIOError::write_log_entry(log_id, AnyError::new(&e)).into())
    }

    async fn purge(&mut self, log_id: LogId) -> StorageResult<()> {
        tracing::debug!(%log_id, "purging log");
        self.delete_upto(&log_id)
            .await
            .map_err(|e| StorageIOError::write_log_entry(log_id, AnyError::new(&e)).into())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;

    fn blank(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.log_id.index).collect()
    }

    /// What the patched openraft core relies on when a leader replicates its
    /// entries while its own append syncs: they are readable as soon as
    /// `append` returns, and the flush is reported only once they are written.
    #[tokio::test]
    async fn appended_entries_are_readable_before_their_flush_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _sm) = crate::open(dir.path()).unwrap();
        log.blocking_append((1..=3).map(blank)).await.unwrap();

        // The writer thread is held by a write ahead of the next append.
        let (release, hold) = std::sync::mpsc::channel::<()>();
        log.writer.submit(
            WriteBatch::default(),
            false,
            Box::new(move |_| hold.recv().unwrap()),
        );
        let before = log.writer.submitted();
        let mut appending = log.clone();
        let append =
            tokio::spawn(
                async move { appending.blocking_append((4..=5).map(blank)).await.unwrap() },
            );
        while log.writer.submitted() == before {
            tokio::task::yield_now().await;
        }

        let read = log.try_get_log_entries(4..6).await.unwrap();
        assert_eq!(indexes(&read), [4, 5], "readable from the tail at once");
        assert!(
            log.read_range(4, None).unwrap().is_empty(),
            "not written yet"
        );
        assert!(!append.is_finished(), "no flush reported before the write");

        release.send(()).unwrap();
        append.await.unwrap();
        assert_eq!(indexes(&log.read_range(1, None).unwrap()), [1, 2, 3, 4, 5]);
    }

    /// The committed id costs no write of its own: the next append carries it,
    /// and until then this process reads the value it saved. A dropped store
    /// writes the one still pending.
    #[tokio::test]
    async fn the_committed_id_rides_on_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let committed = |index| Some(blank(index).log_id);
        {
            let (mut log, _sm) = crate::open(dir.path()).unwrap();
            let on_disk = |log: &LogStore| -> Option<Option<LogId>> {
                log.get_meta(KEY_COMMITTED, "committed log id").unwrap()
            };
            log.blocking_append((1..=2).map(blank)).await.unwrap();
            log.save_committed(committed(2)).await.unwrap();
            let writes = log.writer.submitted();
            assert_eq!(log.read_committed().await.unwrap(), committed(2));
            assert_eq!(on_disk(&log), None, "not written by itself");
            assert_eq!(log.writer.submitted(), writes, "nothing queued for it");

            log.blocking_append([blank(3)]).await.unwrap();
            assert_eq!(on_disk(&log), Some(committed(2)), "carried by the append");

            log.save_committed(committed(3)).await.unwrap();
            assert_eq!(on_disk(&log), Some(committed(2)));
        }
        let (mut log, _sm) = crate::open(dir.path()).unwrap();
        assert_eq!(
            log.read_committed().await.unwrap(),
            committed(3),
            "written when the store was dropped"
        );
    }

    /// A read the tail cannot serve waits for the queued writes, so the disk
    /// has every entry appended before it.
    #[tokio::test]
    async fn a_read_past_the_tail_waits_for_the_queued_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _sm) = crate::open(dir.path()).unwrap();
        let (release, hold) = std::sync::mpsc::channel::<()>();
        log.writer.submit(
            WriteBatch::default(),
            false,
            Box::new(move |_| hold.recv().unwrap()),
        );
        let mut appending = log.clone();
        let append =
            tokio::spawn(
                async move { appending.blocking_append((1..=3).map(blank)).await.unwrap() },
            );
        while log.writer.submitted() < 2 {
            tokio::task::yield_now().await;
        }
        // Unbounded: the tail never serves it, so it must wait for the disk.
        let mut reader = log.clone();
        let read = tokio::spawn(async move { reader.try_get_log_entries(1..).await.unwrap() });
        tokio::task::yield_now().await;
        assert!(!read.is_finished());
        release.send(()).unwrap();
        append.await.unwrap();
        assert_eq!(indexes(&read.await.unwrap()), [1, 2, 3]);
    }
}
