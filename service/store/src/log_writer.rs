//! The log's writes, carried out in order on a thread of their own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use rocksdb::{WriteBatch, DB};

use crate::db;
use crate::error::StoreError;
use crate::Durability;

/// What to do once a write is done (on disk, when it asked for a sync).
pub(crate) type WriteDone = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// One write batch and whether it must be synced before `done` runs.
struct Write {
    batch: WriteBatch,
    sync: bool,
    /// Testing only: how long to wait before writing it
    /// ([`Durability::DelayedLeaderAppends`]).
    hold: std::time::Duration,
    done: WriteDone,
}

/// Carries out the log store's writes (appends, truncations, purges, the vote,
/// the committed id when the store is dropped) on a thread of its own, in the
/// order they were submitted.
///
/// Why a thread: the patched openraft (vendor/openraft) lets a leader replicate
/// entries while its own append syncs, and the sync must then not run on the
/// Raft core's task (one runtime worker per node by default: it would stop
/// every task, the replication streams included). Why one thread: Raft needs
/// the log's writes in order, and RocksDB's write-ahead log is one ordered file,
/// so writes that queued behind a sync are written together and made durable
/// by one sync (group commit).
///
/// After one write fails, every later one fails without being written: a log
/// with entries written after a failed append would have a hole below them.
/// (The Raft core stops on the failure, but it may have queued more appends
/// before it hears of it.)
pub(crate) struct LogWriter {
    db: Arc<DB>,
    durability: Durability,
    queue: Mutex<Option<std::sync::mpsc::Sender<Write>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    submitted: AtomicU64,
    /// How many submitted writes are done, for readers that must see them;
    /// closed when the thread ends.
    done: tokio::sync::watch::Receiver<u64>,
    failed: Arc<AtomicBool>,
}

impl LogWriter {
    /// Starts the writer thread for `db`.
    pub(crate) fn start(db: Arc<DB>, durability: Durability) -> Result<Arc<Self>, StoreError> {
        let (queue, jobs) = std::sync::mpsc::channel();
        let (progress, done) = tokio::sync::watch::channel(0);
        let failed = Arc::new(AtomicBool::new(false));
        let writer = Arc::new(LogWriter {
            db: db.clone(),
            durability,
            queue: Mutex::new(Some(queue)),
            thread: Mutex::new(None),
            submitted: AtomicU64::new(0),
            done,
            failed: failed.clone(),
        });
        let thread = std::thread::Builder::new()
            .name("baton-log-writer".to_owned())
            .spawn(move || write_in_order(&db, durability, &jobs, &progress, &failed))
            .map_err(StoreError::WriterThread)?;
        *writer.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        Ok(writer)
    }

    /// Queues `batch`; `done` runs on the writer thread once it is written
    /// (and synced, with `sync`), after every write submitted before it.
    pub(crate) fn submit(&self, batch: WriteBatch, sync: bool, done: WriteDone) {
        self.submit_held(batch, sync, std::time::Duration::ZERO, done);
    }

    /// [`submit`](Self::submit), with the write held `hold` before it is
    /// carried out (testing only: [`Durability::DelayedLeaderAppends`]).
    pub(crate) fn submit_held(
        &self,
        batch: WriteBatch,
        sync: bool,
        hold: std::time::Duration,
        done: WriteDone,
    ) {
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let write = Write {
            batch,
            sync,
            hold,
            done,
        };
        match queue.as_ref() {
            // Counted only once sent (under the lock, so before anyone can
            // compare it): a write the thread never got is never waited for.
            Some(queue) => match queue.send(write) {
                Ok(()) => {
                    self.submitted.fetch_add(1, Ordering::SeqCst);
                }
                Err(unsent) => (unsent.0.done)(Err(StoreError::WriterStopped)),
            },
            None => (write.done)(Err(StoreError::WriterStopped)),
        }
    }

    /// Writes `batch` on the calling thread when nothing is queued or being
    /// written (so the order holds), [submits](Self::submit) it otherwise;
    /// `done` runs either way. For a caller that would only wait for the
    /// writer: it saves the hand-over there and back.
    ///
    /// A write done here is not counted in what [`caught_up`](Self::caught_up)
    /// waits for: it is done before this returns, and its callers (the Raft
    /// core's own awaited appends) are the only ones that could read it
    /// meanwhile.
    pub(crate) fn write_here_or_submit(&self, batch: WriteBatch, sync: bool, done: WriteDone) {
        match self.write_here_if_idle(batch, sync) {
            Ok(written) => done(written),
            Err(batch) => self.submit(batch, sync, done),
        }
    }

    /// The first half of [`write_here_or_submit`](Self::write_here_or_submit):
    /// how the write went when it was done here, `batch` back when the writer
    /// is busy.
    fn write_here_if_idle(
        &self,
        batch: WriteBatch,
        sync: bool,
    ) -> Result<Result<(), StoreError>, WriteBatch> {
        // Held through the write: nothing can be submitted meanwhile.
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.is_none() || self.failed.load(Ordering::SeqCst) {
            return Ok(Err(StoreError::WriterStopped));
        }
        if self.submitted.load(Ordering::SeqCst) != *self.done.borrow() {
            return Err(batch);
        }
        Ok(
            write_one(&self.db, self.durability, batch, sync, &self.failed)
                .map_err(StoreError::Rocks),
        )
    }

    /// Writes `batch` after everything submitted before it and waits for it.
    pub(crate) async fn write(&self, batch: WriteBatch, sync: bool) -> Result<(), StoreError> {
        let (tell, told) = tokio::sync::oneshot::channel();
        self.submit(
            batch,
            sync,
            Box::new(move |result| {
                let _ = tell.send(result);
            }),
        );
        told.await.map_err(|_| StoreError::WriterStopped)?
    }

    /// How many writes were submitted so far.
    #[cfg(test)]
    pub(crate) fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::SeqCst)
    }

    /// Waits until every write submitted so far is done: a read of the disk
    /// after it sees them. An error when the writer thread ended first (it
    /// panicked, or the store is shutting down).
    pub(crate) async fn caught_up(&self) -> Result<(), StoreError> {
        let target = self.submitted.load(Ordering::SeqCst);
        let mut done = self.done.clone();
        done.wait_for(|done| *done >= target)
            .await
            .map(|_| ())
            .map_err(|_| StoreError::WriterStopped)
    }

    /// Stops taking writes, lets the thread finish the queued ones and joins it,
    /// so that the database can be reopened right after.
    fn stop(&self) {
        drop(
            self.queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            if thread.join().is_err() {
                tracing::error!("the log writer thread panicked");
            }
        }
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The writer thread: takes every queued write at once, syncs only the last
/// that asked for a sync (the ones before it are in the write-ahead log ahead
/// of it), then reports them all done. Once a write failed, it writes nothing
/// more and fails the rest.
fn write_in_order(
    db: &DB,
    durability: Durability,
    jobs: &std::sync::mpsc::Receiver<Write>,
    progress: &tokio::sync::watch::Sender<u64>,
    failed: &AtomicBool,
) {
    let mut finished = 0u64;
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        group.extend(jobs.try_iter());
        if let Some(hold) = group.iter().map(|w| w.hold).max().filter(|h| !h.is_zero()) {
            std::thread::sleep(hold);
        }
        let last_synced = group.iter().rposition(|w| w.sync);
        // `Err(None)`: not tried, because an earlier write failed.
        let mut results = Vec::with_capacity(group.len());
        let mut dones = Vec::with_capacity(group.len());
        for (i, write) in group.into_iter().enumerate() {
            if failed.load(Ordering::SeqCst) {
                results.push(Err(None));
            } else {
                let sync = last_synced == Some(i);
                let written = write_one(db, durability, write.batch, sync, failed);
                results.push(written.map_err(Some));
            }
            dones.push(write.done);
        }
        // A sync that failed (or was never tried) leaves the writes before it
        // unsynced too.
        let failed_sync = last_synced.and_then(|i| results[i].as_ref().err().cloned());
        for (i, (result, done)) in results.into_iter().zip(dones).enumerate() {
            let before_sync = last_synced.is_some_and(|s| i < s);
            let result = match (result, &failed_sync) {
                (Err(Some(e)), _) => Err(StoreError::Rocks(e)),
                (Err(None), _) => Err(StoreError::WriterStopped),
                (Ok(()), Some(Some(e))) if before_sync => Err(StoreError::Rocks(e.clone())),
                (Ok(()), Some(None)) if before_sync => Err(StoreError::WriterStopped),
                (Ok(()), _) => Ok(()),
            };
            done(result);
            finished += 1;
        }
        progress.send_replace(finished);
    }
}

/// Writes one batch; a failure marks the writer `failed` (see [`LogWriter`]).
fn write_one(
    db: &DB,
    durability: Durability,
    batch: WriteBatch,
    sync: bool,
    failed: &AtomicBool,
) -> Result<(), rocksdb::Error> {
    let written = db.write_opt(batch, &db::write_options(durability, sync));
    if written.is_err() {
        failed.store(true, Ordering::SeqCst);
    }
    written
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::db::{open_db, CF_META};

    fn put(db: &DB, key: &[u8], value: &[u8]) -> WriteBatch {
        let mut batch = WriteBatch::default();
        batch.put_cf(db::cf(db, CF_META).unwrap(), key, value);
        batch
    }

    #[tokio::test]
    async fn writes_are_done_in_the_order_they_were_submitted() {
        let dir = tempfile::tempdir().unwrap();
        let db = open_db(dir.path(), 0).unwrap();
        let writer = LogWriter::start(db.clone(), Durability::Synced).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        for i in 0..200u32 {
            let order = order.clone();
            let sync = i % 7 == 0;
            writer.submit(
                put(&db, b"k", &i.to_be_bytes()),
                sync,
                Box::new(move |r| {
                    r.unwrap();
                    order.lock().unwrap().push(i);
                }),
            );
        }
        writer.caught_up().await.unwrap();
        assert_eq!(*order.lock().unwrap(), (0..200).collect::<Vec<_>>());
        let cf = db::cf(&db, CF_META).unwrap();
        assert_eq!(
            db.get_cf(cf, b"k").unwrap().unwrap(),
            199u32.to_be_bytes(),
            "the last write submitted is the last one written"
        );
    }

    /// Submits a synced write of `value` to key `k` whose completion holds the
    /// writer thread (still busy: its writes are not yet counted done) until
    /// the returned sender sends or is dropped; returns once the thread is held.
    fn hold_writer(writer: &LogWriter, db: &DB, value: &[u8]) -> std::sync::mpsc::Sender<()> {
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let (entered, holding) = std::sync::mpsc::channel::<()>();
        writer.submit(
            put(db, b"k", value),
            true,
            Box::new(move |r| {
                r.unwrap();
                entered.send(()).unwrap();
                let _ = hold.recv();
            }),
        );
        holding.recv().unwrap();
        release
    }

    #[tokio::test]
    async fn a_write_is_done_here_only_when_nothing_is_queued() {
        let dir = tempfile::tempdir().unwrap();
        let db = open_db(dir.path(), 0).unwrap();
        let writer = LogWriter::start(db.clone(), Durability::Synced).unwrap();
        assert!(writer
            .write_here_if_idle(put(&db, b"k", b"1"), true)
            .is_ok());
        let release = hold_writer(&writer, &db, b"2");
        let handed_back = writer.write_here_if_idle(put(&db, b"k", b"3"), true);
        assert!(handed_back.is_err(), "a write is under way: not here");
        release.send(()).unwrap();
        writer.caught_up().await.unwrap();
        let cf = db::cf(&db, CF_META).unwrap();
        assert_eq!(db.get_cf(cf, b"k").unwrap().unwrap(), b"2");
        assert!(writer
            .write_here_if_idle(put(&db, b"k", b"4"), true)
            .is_ok());
        assert_eq!(db.get_cf(cf, b"k").unwrap().unwrap(), b"4");
    }

    /// A write RocksDB refuses (here: one into a column family dropped since
    /// the batch was made) fails every write in its group, the unsynced ones
    /// before it too (their sync was to come with the group's last), and every
    /// write after it, queued or done here, without writing them: a log with
    /// entries after a failed append would have a hole below them.
    #[tokio::test]
    async fn after_a_failed_write_nothing_more_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = open_db(dir.path(), 0).unwrap();
        Arc::get_mut(&mut db)
            .unwrap()
            .create_cf("doomed", &rocksdb::Options::default())
            .unwrap();
        let mut refused = WriteBatch::default();
        refused.put_cf(db.cf_handle("doomed").unwrap(), b"k", b"v");
        Arc::get_mut(&mut db).unwrap().drop_cf("doomed").unwrap();
        let writer = LogWriter::start(db.clone(), Durability::Synced).unwrap();

        // Held on its first write's completion, so the next three queue and
        // are taken as one group.
        let release = hold_writer(&writer, &db, b"first");
        let results = Arc::new(Mutex::new(Vec::new()));
        let note = |name: &'static str| -> WriteDone {
            let results = results.clone();
            Box::new(move |r| results.lock().unwrap().push((name, r)))
        };
        writer.submit(put(&db, b"k", b"before"), false, note("before"));
        writer.submit(refused, false, note("refused"));
        writer.submit(put(&db, b"k", b"after"), true, note("after"));
        release.send(()).unwrap();
        writer.caught_up().await.unwrap();
        let results = std::mem::take(&mut *results.lock().unwrap());
        let names: Vec<_> = results.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["before", "refused", "after"]);
        // Written but unsynced, and its sync (the group's last write) never
        // tried: failed as well.
        assert!(
            matches!(results[0].1, Err(StoreError::WriterStopped)),
            "{:?}",
            results[0].1
        );
        assert!(matches!(results[1].1, Err(StoreError::Rocks(_))));
        assert!(matches!(results[2].1, Err(StoreError::WriterStopped)));

        // Later writes are refused too, here or on the thread, unwritten.
        assert!(matches!(
            writer.write_here_if_idle(put(&db, b"k", b"here"), true),
            Ok(Err(StoreError::WriterStopped))
        ));
        assert!(matches!(
            writer.write(put(&db, b"k", b"later"), true).await,
            Err(StoreError::WriterStopped)
        ));
        let cf = db::cf(&db, CF_META).unwrap();
        let stored = db.get_cf(cf, b"k").unwrap().unwrap();
        assert!(
            stored == b"first" || stored == b"before",
            "nothing after the failure is written: {:?}",
            String::from_utf8_lossy(&stored)
        );
    }

    #[tokio::test]
    async fn a_write_is_readable_once_awaited_and_the_thread_stops_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let db = open_db(dir.path(), 0).unwrap();
        let writer = LogWriter::start(db.clone(), Durability::Synced).unwrap();
        writer.write(put(&db, b"vote", b"1"), true).await.unwrap();
        let cf = db::cf(&db, CF_META).unwrap();
        assert_eq!(db.get_cf(cf, b"vote").unwrap().unwrap(), b"1");
        drop(writer);
        // The writer and its thread held the other references; joined, the
        // thread let go of its own.
        assert_eq!(Arc::strong_count(&db), 1);
    }
}
