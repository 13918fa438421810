//! The committed log id, carried to disk by the next append.

use std::sync::{Arc, Mutex, PoisonError};

use rocksdb::{WriteBatch, DB};

use crate::codec::encode;
use crate::db::{self, CF_META, KEY_COMMITTED};
use crate::error::StoreError;
use crate::log_writer::LogWriter;
use crate::type_config::LogId;

/// What a value of the committed log id is called in encoding errors.
const WHAT: &str = "committed log id";

/// The committed log id openraft saved last, until a write carries it to disk.
///
/// openraft saves the committed id on every commit advance, right before the
/// entries are applied, so a write of its own would sit on every request's path
/// (a RocksDB write and its `write(2)` between the sync and the answer). It
/// needs no write of its own: a stored committed id that lags only means that
/// fewer entries are re-applied at startup, and the leader commits the rest
/// again. So it rides in the batch of the next append ([`add_to`](Self::add_to)),
/// and is written alone only when the store is dropped with one still pending.
///
/// Why at submission, not when the writer thread gets to the batch: the
/// entries it names were submitted before it was saved, so any batch submitted
/// after that is behind them in the write-ahead log, and a sync that makes it
/// durable makes them durable too. A stored committed id never names an entry
/// that is not on disk.
pub(crate) struct CommittedMark {
    db: Arc<DB>,
    writer: Arc<LogWriter>,
    /// The value saved last by this process, if any.
    saved: Mutex<Option<Saved>>,
}

/// A saved committed id, and whether a submitted batch carries it yet.
#[derive(Clone, Copy)]
struct Saved {
    committed: Option<LogId>,
    carried: bool,
}

impl CommittedMark {
    pub(crate) fn new(db: Arc<DB>, writer: Arc<LogWriter>) -> Self {
        CommittedMark {
            db,
            writer,
            saved: Mutex::new(None),
        }
    }

    /// Saves `committed` for the next write to carry.
    pub(crate) fn save(&self, committed: Option<LogId>) {
        *lock(&self.saved) = Some(Saved {
            committed,
            carried: false,
        });
    }

    /// The value saved last by this process, if any (`None`: read the disk).
    pub(crate) fn latest(&self) -> Option<Option<LogId>> {
        lock(&self.saved).map(|saved| saved.committed)
    }

    /// Puts the pending committed id, if there is one, into `batch`, which the
    /// caller is about to submit.
    pub(crate) fn add_to(&self, batch: &mut WriteBatch) -> Result<(), StoreError> {
        let mut saved = lock(&self.saved);
        if let Some(saved) = saved.as_mut().filter(|saved| !saved.carried) {
            let cf = db::cf(&self.db, CF_META)?;
            batch.put_cf(cf, KEY_COMMITTED, encode(WHAT, &saved.committed)?);
            saved.carried = true;
        }
        Ok(())
    }
}

impl Drop for CommittedMark {
    /// A clean stop keeps the last committed id (a crash may lose it, which
    /// only costs re-applying entries at startup): queued behind every write,
    /// carried out before the writer thread stops.
    fn drop(&mut self) {
        let mut batch = WriteBatch::default();
        match self.add_to(&mut batch) {
            Ok(()) if batch.is_empty() => {}
            Ok(()) => self.writer.submit(
                batch,
                false,
                Box::new(|written| written.unwrap_or_else(not_saved)),
            ),
            Err(error) => not_saved(error),
        }
    }
}

fn not_saved(error: StoreError) {
    tracing::warn!(%error, "the committed log id was not saved");
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
