//! openraft's state machine: baton-core's machine in memory, snapshots in files.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, StorageIOError};
use rocksdb::DB;

use crate::error::StoreError;
use crate::metrics::StoreMetrics;
use crate::shared::{AppliedState, ApplyObserver, SharedState};
use crate::snapshot::{SnapshotEnvelope, SnapshotStore};
use crate::snapshot_builder::SnapshotBuilder;
use crate::stage_times;
use crate::type_config::{
    Entry, LogId, Snapshot, SnapshotMeta, StorageResult, StoredMembership, TypeConfig,
};

/// The state machine as openraft sees it.
///
/// # Persistent snapshot, in-memory state
///
/// `apply` changes only memory; what survives a restart is the last snapshot
/// (a synced file in the data directory's `snapshots/`, recorded in the
/// `snapshot` column family, when built or installed) plus the log. On [`crate::open`] the state is restored from that snapshot, and
/// openraft 0.9.25 itself replays the rest at startup: its
/// `StorageHelper::get_initial_state` reads `read_committed()` from the log
/// store and re-applies the entries between the state machine's last applied
/// log id and that committed id before the node serves anything. Entries after
/// the saved committed id are applied once the leader re-commits them.
///
/// The state lives in an `Arc<SharedState>` so that readers and the raft layer
/// keep access after the store was handed to openraft.
pub struct StateMachineStore {
    shared: Arc<SharedState>,
    snapshots: Arc<SnapshotStore>,
    metrics: Arc<StoreMetrics>,
    /// The file [`RaftStateMachine::begin_receiving_snapshot`] made last,
    /// removed once the snapshot it received was installed.
    receiving: Option<PathBuf>,
}

impl fmt::Debug for StateMachineStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMachineStore")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl StateMachineStore {
    /// Restores the applied state from the stored snapshot, if there is one.
    pub(crate) fn open(
        db: Arc<DB>,
        snapshot_dir: PathBuf,
        durability: crate::Durability,
        metrics: Arc<StoreMetrics>,
    ) -> Result<Self, StoreError> {
        let (snapshots, _) = SnapshotStore::open(db, snapshot_dir, durability)?;
        let applied = match snapshots.read_current()? {
            Some((meta, data)) => {
                let applied = SnapshotEnvelope::decode_for(&meta, &data)?.restore(&meta)?;
                metrics
                    .snapshot_bytes
                    .store(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(snapshot = %meta, revision = applied.machine.revision(), "restored state from snapshot");
                applied
            }
            None => AppliedState::default(),
        };
        Ok(StateMachineStore {
            shared: Arc::new(SharedState::new(applied)),
            snapshots: Arc::new(snapshots),
            metrics,
            receiving: None,
        })
    }

    /// The storage metrics of this node (shared with its log store), for
    /// `/metrics`.
    pub fn metrics(&self) -> Arc<StoreMetrics> {
        Arc::clone(&self.metrics)
    }

    /// The applied state, for readers and the raft layer.
    pub fn shared(&self) -> Arc<SharedState> {
        Arc::clone(&self.shared)
    }

    /// Installs (or replaces) the observer told about applied outcomes.
    ///
    /// Set it before creating the `Raft` to also see the entries openraft
    /// re-applies at startup.
    pub fn set_observer(&self, observer: Arc<dyn ApplyObserver>) {
        self.shared.set_observer(observer);
    }

    fn apply_entries(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Vec<Vec<baton_core::Outcome>> {
        let mut replies = Vec::new();
        // The log index and leader-stamped time of each reply that came from a
        // normal entry.
        let mut normal_index = Vec::new();
        // The indexes applied (contiguous), for the commit-to-apply lag.
        let mut first_last: Option<(u64, u64)> = None;
        let revision = {
            let mut applied = self.shared.write();
            for entry in entries {
                let index = entry.log_id.index;
                first_last = Some((first_last.map_or(index, |(first, _)| first), index));
                let started = stage_times::recording().then(std::time::SystemTime::now);
                let mut from_normal = None;
                let reply = match entry.payload {
                    EntryPayload::Blank => Vec::new(),
                    EntryPayload::Normal(batch) => {
                        from_normal = Some((index, batch.now_ms));
                        applied
                            .machine
                            .apply_batch(&batch, entry.log_id.leader_id.term)
                    }
                    EntryPayload::Membership(membership) => {
                        applied.membership = StoredMembership::new(Some(entry.log_id), membership);
                        Vec::new()
                    }
                };
                applied.last_applied = Some(entry.log_id);
                if let Some(started) = started {
                    stage_times::applied(index, started);
                }
                replies.push(reply);
                normal_index.push(from_normal);
            }
            applied.machine.revision()
        };
        if let Some((first, last)) = first_last {
            self.metrics.applied(first..=last);
        }
        // Outside the lock: readers are not held up by the observer.
        if let Some(observer) = self.shared.observer() {
            for (index, outcomes) in normal_index.iter().zip(&replies) {
                if let Some((index, now_ms)) = index {
                    observer.applied(*index, *now_ms, outcomes);
                }
            }
        }
        self.shared.publish_revision(revision);
        replies
    }

    /// Replaces the state with a snapshot's. A free function of the two
    /// shared halves, so it can run on a blocking thread: decoding, restoring
    /// and syncing a large snapshot takes CPU-seconds.
    /// `received` is the receiving file `data` was read from, when openraft
    /// handed that file over: it becomes the stored snapshot as it is, instead
    /// of writing the same bytes into a second file (0.3-0.4 s at a million
    /// holdings, time in which the leader sends this follower nothing).
    fn install(
        shared: &SharedState,
        snapshots: &SnapshotStore,
        meta: &SnapshotMeta,
        data: Vec<u8>,
        received: Option<PathBuf>,
    ) -> Result<(), StoreError> {
        // Validate and restore before persisting: bad bytes must not replace a
        // good snapshot on disk.
        let started = std::time::Instant::now();
        let applied = match SnapshotEnvelope::decode_for(meta, &data)
            .and_then(|envelope| envelope.restore(meta))
        {
            Ok(applied) => applied,
            Err(error) => {
                if let Some(path) = &received {
                    let _ = std::fs::remove_file(path);
                }
                return Err(error);
            }
        };
        let restored = started.elapsed();
        let (seq, _) = snapshots.next_id(meta.last_log_id.as_ref());
        let staged = match received {
            Some(path) => snapshots.adopt_received(path)?,
            None => snapshots.stage_bytes(seq, &data)?,
        };
        let bytes = data.len();
        drop(data);
        snapshots.commit(seq, meta, &staged, false)?;
        let stored = started.elapsed() - restored;
        let revision = applied.machine.revision();
        // The old state is dropped after the lock is released: freeing a
        // million locks is itself many milliseconds that readers need not wait.
        let replaced = std::mem::replace(&mut *shared.write(), applied);
        drop(replaced);
        if let Some(observer) = shared.observer() {
            observer.snapshot_installed(revision);
        }
        shared.publish_revision(revision);
        tracing::info!(
            snapshot = %meta,
            bytes,
            decode_ms = restored.as_millis() as u64,
            store_ms = stored.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "installed snapshot"
        );
        Ok(())
    }

    /// Removes the last receiving file (best effort: a leftover is removed
    /// at the next start).
    fn forget_receiving(&mut self) {
        if let Some(path) = self.receiving.take() {
            let _ = std::fs::remove_file(path);
        }
    }

    fn current_snapshot(&self) -> Result<Option<Snapshot>, StoreError> {
        Ok(self.snapshots.open_current()?.map(|(meta, file)| Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        }))
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> StorageResult<(Option<LogId>, StoredMembership)> {
        let applied = self.shared.read();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Vec<baton_core::Outcome>>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // baton-core's apply never fails and nothing is written here, so there
        // is no error path.
        Ok(self.apply_entries(entries))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder::new(
            self.shared.read().clone(),
            Arc::clone(&self.snapshots),
            Arc::clone(&self.metrics),
        )
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<tokio::fs::File>> {
        // The chunks go to disk as they arrive: a large snapshot is never held
        // in memory while it is being received.
        let (path, file) = self
            .snapshots
            .receiving_file()
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        self.forget_receiving();
        self.receiving = Some(path);
        Ok(Box::new(tokio::fs::File::from_std(file)))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: Box<tokio::fs::File>,
    ) -> StorageResult<()> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

        tracing::info!(snapshot = %meta, "installing snapshot");
        let signature = meta.signature();
        let io_error =
            |e: std::io::Error| StorageIOError::read_snapshot(Some(signature.clone()), &e);
        // Read back from whatever file openraft hands over (usually the one
        // `begin_receiving_snapshot` made): decoding needs the bytes anyway.
        snapshot.flush().await.map_err(io_error)?;
        snapshot
            .seek(std::io::SeekFrom::Start(0))
            .await
            .map_err(io_error)?;
        let mut data = Vec::new();
        snapshot.read_to_end(&mut data).await.map_err(io_error)?;
        let handed = snapshot.metadata().await.map_err(io_error)?;
        drop(snapshot);
        // The receiving file itself, or another file (then the bytes are
        // written into a file of our own, and the receiving one is removed).
        let received = match self.receiving.take() {
            Some(path) if is_same_file(&handed, &path) => Some(path),
            other => {
                self.receiving = other;
                self.forget_receiving();
                None
            }
        };
        self.metrics
            .snapshot_bytes
            .store(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let shared = Arc::clone(&self.shared);
        let snapshots = Arc::clone(&self.snapshots);
        let owned_meta = meta.clone();
        tokio::task::spawn_blocking(move || {
            Self::install(&shared, &snapshots, &owned_meta, data, received)
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?
        .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e).into())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot>> {
        self.current_snapshot()
            .map_err(|e| StorageIOError::read_snapshot(None, &e).into())
    }
}

/// Whether `handed` (the metadata of an open file) describes the file at `path`.
fn is_same_file(handed: &std::fs::Metadata, path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .is_ok_and(|named| named.dev() == handed.dev() && named.ino() == handed.ino())
}
