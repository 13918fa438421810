//! The Raft log, the vote and the log pointers, in RocksDB.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, PoisonError};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, OptionalSend, RaftLogReader, StorageIOError};
use rocksdb::{Direction, IteratorMode, WriteBatch, WriteOptions, DB};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{self, decode, encode, log_key, LOG_KEY_END};
use crate::db::{self, CF_LOG, CF_META, KEY_COMMITTED, KEY_LAST_PURGED, KEY_VOTE};
use crate::error::StoreError;
use crate::log_tail::{LogTail, TAIL_BYTES, TAIL_ENTRIES};
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
///   with `sync` set, and reports them flushed only after that write returned:
///   one fsync per append call however many entries it carries, which is what
///   makes proposal batching pay.
/// - [`RaftLogStorage::save_vote`], [`RaftLogStorage::truncate`] and
///   [`RaftLogStorage::purge`] are synced before they return.
/// - [`RaftLogStorage::save_committed`] is written without sync: it is called on
///   every commit advance, and losing the latest value in a crash only means
///   fewer entries are re-applied at startup (the rest are re-committed by the
///   leader). RocksDB's WAL is ordered, so the next synced write makes it durable.
/// - `truncate` and `purge` are single atomic write batches (a range delete,
///   plus the new last purged id for `purge`), so a crash never leaves a hole.
///
/// # Blocking
///
/// The RocksDB calls are synchronous and run on the calling task: a synced write
/// blocks the tokio worker for about one fsync (~1 ms here). openraft 0.9 runs
/// log I/O inline in its core task, so this also serializes all writes, as
/// openraft requires. Moving writes to a dedicated thread is a later
/// optimisation that would have to keep that ordering.
///
/// # Reading back
///
/// The newest entries are also kept in memory ([`LogTail`]): openraft reads each
/// entry back right after appending it (to apply it, and once per follower to
/// replicate it), and those reads are served from there.
///
/// Cloning is cheap (the database and the tail are shared); the log reader
/// handed to replication tasks is such a clone.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
    durability: Durability,
    metrics: Arc<StoreMetrics>,
    tail: Arc<Mutex<LogTail>>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("path", &self.db.path())
            .finish()
    }
}

impl LogStore {
    pub(crate) fn new(db: Arc<DB>, durability: Durability, metrics: Arc<StoreMetrics>) -> Self {
        LogStore {
            db,
            durability,
            metrics,
            tail: Arc::new(Mutex::new(LogTail::new(TAIL_ENTRIES, TAIL_BYTES))),
        }
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, LogTail> {
        self.tail.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Options for the writes Raft needs on disk before they are acknowledged.
    fn durable_write(&self) -> WriteOptions {
        db::write_options(self.durability, true)
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

    fn put_meta<T: Serialize>(
        &self,
        key: &[u8],
        what: &'static str,
        value: &T,
        opts: &WriteOptions,
    ) -> Result<(), StoreError> {
        let cf = db::cf(&self.db, CF_META)?;
        self.db.put_cf_opt(cf, key, encode(what, value)?, opts)?;
        Ok(())
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

    fn write_entries(&self, entries: impl IntoIterator<Item = Entry>) -> Result<(), StoreError> {
        let cf = db::cf(&self.db, CF_LOG)?;
        let mut batch = WriteBatch::default();
        // Trace spans only: when this append started, and its first and last index.
        let started = stage_times::recording().then(std::time::SystemTime::now);
        let mut indexes = None;
        let mut written = Vec::new();
        let mut bytes = 0;
        for entry in entries {
            let index = entry.log_id.index;
            indexes = Some((indexes.map_or(index, |(first, _)| first), index));
            let encoded = encode("log entry", &entry)?;
            bytes += encoded.len() as u64;
            written.push((entry, encoded.len()));
            batch.put_cf(cf, log_key(index), encoded);
        }
        self.db.write_opt(batch, &self.durable_write())?;
        self.metrics.entries_appended.add(written.len() as u64);
        let mut tail = self.tail();
        for (entry, size) in written {
            tail.appended(entry, size);
        }
        drop(tail);
        self.metrics.log_bytes_appended.add(bytes);
        if let (Some(started), Some((first, last))) = (started, indexes) {
            stage_times::appended(first, last, started);
        }
        Ok(())
    }

    fn delete_since(&self, index: u64) -> Result<(), StoreError> {
        // The tail first: a read racing the delete then finds the entries on
        // disk at worst, as it would without a tail.
        self.tail().truncated(index);
        let cf = db::cf(&self.db, CF_LOG)?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf, log_key(index).as_slice(), LOG_KEY_END.as_slice());
        self.db.write_opt(batch, &self.durable_write())?;
        Ok(())
    }

    fn delete_upto(&self, log_id: &LogId) -> Result<(), StoreError> {
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
        self.db.write_opt(batch, &self.durable_write())?;
        Ok(())
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
        self.log_state().map_err(read_logs_err)
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> StorageResult<()> {
        self.put_meta(KEY_VOTE, "vote", vote, &self.durable_write())
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote>> {
        self.get_meta(KEY_VOTE, "vote")
            .map_err(|e| StorageIOError::read_vote(&e).into())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> StorageResult<()> {
        if let Some(committed) = &committed {
            self.metrics.committed(committed.index);
        }
        self.put_meta(
            KEY_COMMITTED,
            "committed log id",
            &committed,
            &db::write_options(self.durability, false),
        )
        .map_err(write_logs_err)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId>> {
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
        let started = std::time::Instant::now();
        let written = self.write_entries(entries);
        self.metrics.append.observe_duration(started.elapsed());
        match written {
            Ok(()) => {
                // The batch was written with sync: the entries are on disk.
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(io::Error::other(e.to_string())));
                Err(write_logs_err(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> StorageResult<()> {
        tracing::debug!(%log_id, "truncating log");
        self.delete_since(log_id.index)
            .map_err(|e| StorageIOError::write_log_entry(log_id, AnyError::new(&e)).into())
    }

    async fn purge(&mut self, log_id: LogId) -> StorageResult<()> {
        tracing::debug!(%log_id, "purging log");
        self.delete_upto(&log_id)
            .map_err(|e| StorageIOError::write_log_entry(log_id, AnyError::new(&e)).into())
    }
}
