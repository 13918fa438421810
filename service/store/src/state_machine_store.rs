//! openraft's state machine: baton-core's machine in memory, snapshots in files.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, StorageIOError};
use rocksdb::DB;

use crate::apply_run::ApplyRun;
use crate::error::StoreError;
use crate::metrics::StoreMetrics;
use crate::receiving_sync::{ReceivingSync, RECEIVING_SYNC_EVERY};
use crate::shared::{AppliedState, ApplyObserver, SharedState};
use crate::snapshot::{SnapshotEnvelope, SnapshotStore, SYNC_STEP_BYTES};
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
///
/// # Installing a snapshot: stored first, restored after answering
///
/// openraft answers the leader's last snapshot chunk only when
/// `install_snapshot` returns, and sends that follower nothing (no heartbeat)
/// until then. Decoding a million holdings takes seconds, so `install_snapshot`
/// only checks the envelope (format, log position, length, state format),
/// makes the received file the stored snapshot (synced) and returns; the state
/// is decoded and swapped in on a blocking thread after that. Every later call
/// of openraft's on this store (apply, applied state, builder, the next
/// install) first waits for that restore, so entries are applied on top of
/// the snapshot's state, never the old one; readers wait for it through
/// [`SharedState::applied_at_least`]. A crash in between restarts from the
/// stored snapshot. Should the state not decode after all (the envelope was
/// right), the store refuses every later call and openraft stops: the node
/// cannot serve a state it cannot read.
pub struct StateMachineStore {
    shared: Arc<SharedState>,
    snapshots: Arc<SnapshotStore>,
    metrics: Arc<StoreMetrics>,
    /// The file [`RaftStateMachine::begin_receiving_snapshot`] made last,
    /// removed once the snapshot it received was installed.
    receiving: Option<PathBuf>,
    /// Syncs that file while its chunks arrive, with synced durability.
    receiving_sync: Option<ReceivingSync>,
    /// The restore of the snapshot installed last, while it runs.
    restoring: Option<tokio::task::JoinHandle<Result<(), StoreError>>>,
    /// Why the last restore failed: every later call is refused with it.
    failed: Option<Arc<StoreError>>,
    /// What was applied since the task last let others run.
    run: ApplyRun,
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
                let applied = SnapshotEnvelope::restore(&meta, &data)?;
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
            receiving_sync: None,
            restoring: None,
            failed: None,
            run: ApplyRun::default(),
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

    /// Replaces how this store's applies are cut into runs (tests).
    #[cfg(test)]
    pub(crate) fn set_apply_run(&mut self, run: ApplyRun) {
        self.run = run;
    }

    /// Syncs done so far of the snapshot file being received, if it is
    /// being synced (tests).
    #[cfg(test)]
    pub(crate) fn receiving_syncs(&self) -> Option<u64> {
        self.receiving_sync.as_ref().map(ReceivingSync::syncs)
    }

    fn apply_entries(
        shared: &SharedState,
        metrics: &StoreMetrics,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Vec<Vec<baton_core::Outcome>> {
        let mut replies = Vec::new();
        // The log index and leader-stamped time of each reply that came from a
        // normal entry.
        let mut normal_index = Vec::new();
        // The indexes applied (contiguous), for the commit-to-apply lag.
        let mut first_last: Option<(u64, u64)> = None;
        let revision = {
            let mut applied = shared.write();
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
            metrics.applied(first..=last);
        }
        // Outside the lock: readers are not held up by the observer.
        if let Some(observer) = shared.observer() {
            for (index, outcomes) in normal_index.iter().zip(&replies) {
                if let Some((index, now_ms)) = index {
                    observer.applied(*index, *now_ms, outcomes);
                }
            }
        }
        shared.publish_revision(revision);
        replies
    }

    /// Makes received snapshot bytes the stored snapshot, after checking their
    /// envelope against `meta`, and returns the stored file opened for reading.
    /// `received` is the receiving file openraft wrote the chunks into: it
    /// becomes the stored snapshot as it is (synced), instead of the same bytes
    /// being written into a second file. Otherwise `bytes` are the snapshot's
    /// bytes, read from whatever file openraft handed over.
    fn store_received(
        snapshots: &SnapshotStore,
        meta: &SnapshotMeta,
        received: Result<PathBuf, Vec<u8>>,
    ) -> Result<(PathBuf, std::fs::File), StoreError> {
        let (seq, _) = snapshots.next_id(meta.last_log_id.as_ref());
        let staged = match received {
            Ok(path) => {
                if let Err(error) = check_received_file(meta, &path) {
                    let _ = std::fs::remove_file(&path);
                    return Err(error);
                }
                snapshots.adopt_received(path)?
            }
            Err(bytes) => {
                let checksum =
                    SnapshotEnvelope::promised_checksum(meta).map(|_| crc32fast::hash(&bytes));
                SnapshotEnvelope::check_received(meta, &bytes, bytes.len() as u64, checksum)?;
                snapshots.stage_bytes(seq, &bytes)?
            }
        };
        snapshots.commit(seq, meta, &staged, false)?;
        match snapshots.open_current()? {
            Some((_, path, file)) => Ok((path, file)),
            None => unreachable!("a snapshot was just committed"),
        }
    }

    /// Replaces the applied state with the stored snapshot `file`'s, described
    /// by `meta`. Runs on a blocking thread after the install was answered:
    /// decoding a large snapshot takes CPU-seconds.
    fn restore(
        shared: &SharedState,
        meta: &SnapshotMeta,
        (path, mut file): (PathBuf, std::fs::File),
    ) -> Result<(), StoreError> {
        use std::io::Read;

        let started = std::time::Instant::now();
        let mut data = Vec::new();
        file.read_to_end(&mut data)
            .map_err(|source| StoreError::SnapshotFile { path, source })?;
        drop(file);
        let applied = SnapshotEnvelope::restore(meta, &data)?;
        let bytes = data.len();
        drop(data);
        let decoded = started.elapsed();
        let revision = applied.machine.revision();
        let observer = shared.observer();
        let locked = std::time::Instant::now();
        let mut state = shared.write();
        let replaced = std::mem::replace(&mut *state, applied);
        // Announced before the lock is released: a reader that sees the new
        // state also sees the install counted and the lease clock caught up.
        // Announcing after let a reader see the snapshot's revision with the
        // install not yet counted (a flaky cluster test caught that).
        if let Some(observer) = observer {
            observer.snapshot_installed(revision, &state.machine);
        }
        drop(state);
        // How long readers, the node's runtime thread among them, could wait.
        let locked = locked.elapsed();
        // The old state is dropped after the lock is released: freeing a
        // million locks is itself many milliseconds that readers need not wait.
        drop(replaced);
        shared.publish_revision(revision);
        tracing::info!(
            snapshot = %meta,
            bytes,
            decode_ms = decoded.as_millis() as u64,
            locked_ms = locked.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "restored the installed snapshot"
        );
        Ok(())
    }

    /// Waits for the restore of the snapshot installed last, if one runs:
    /// what openraft asks of this store next must see the snapshot's state.
    /// A failed restore fails this and every later call.
    async fn settle(&mut self) -> Result<(), StoreError> {
        if let Some(restoring) = self.restoring.as_mut() {
            // Awaited in place and cleared only once finished: were this call
            // dropped midway, the next one still waits for the restore.
            let outcome = restoring
                .await
                .unwrap_or_else(|e| Err(StoreError::RestoreStopped(e)));
            self.restoring = None;
            if let Err(error) = outcome {
                tracing::error!(%error, "the installed snapshot could not be restored; this node stops serving");
                self.failed = Some(Arc::new(error));
            }
        }
        match &self.failed {
            Some(error) => Err(StoreError::NotRestored(Arc::clone(error))),
            None => Ok(()),
        }
    }

    /// Removes the last receiving file (best effort: a leftover is removed
    /// at the next start).
    fn forget_receiving(&mut self) {
        self.receiving_sync = None;
        if let Some(path) = self.receiving.take() {
            let _ = std::fs::remove_file(path);
        }
    }

    fn current_snapshot(&self) -> Result<Option<Snapshot>, StoreError> {
        Ok(self
            .snapshots
            .open_current()?
            .map(|(meta, _, file)| Snapshot {
                meta,
                snapshot: Box::new(tokio::fs::File::from_std(file)),
            }))
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> StorageResult<(Option<LogId>, StoredMembership)> {
        self.settle()
            .await
            .map_err(|e| StorageIOError::read_state_machine(&e))?;
        let applied = self.shared.read();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Vec<baton_core::Outcome>>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // baton-core's apply never fails and nothing is written here: the only
        // error is a snapshot that was installed but could not be restored.
        self.settle()
            .await
            .map_err(|e| StorageIOError::write_state_machine(&e))?;
        // In runs of a millisecond (`ApplyRun`), with a yield between them,
        // also across calls: a backlog comes as many calls in a row.
        let mut entries = entries.into_iter().fuse().peekable();
        let mut replies = Vec::new();
        while entries.peek().is_some() {
            if self.run.spent() {
                tokio::task::yield_now().await;
                self.run.yielded();
            }
            let started = std::time::Instant::now();
            let applied = Self::apply_entries(
                &self.shared,
                &self.metrics,
                self.run.take(&mut entries, started),
            );
            self.run.ran(started.elapsed());
            if replies.is_empty() {
                replies = applied;
            } else {
                replies.extend(applied);
            }
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let view = self.settle().await.map(|()| self.shared.read().clone());
        SnapshotBuilder::new(view, Arc::clone(&self.snapshots), Arc::clone(&self.metrics))
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<tokio::fs::File>> {
        // The chunks go to disk as they arrive: a large snapshot is never held
        // in memory while it is being received.
        let (path, file) = self
            .snapshots
            .receiving_file()
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        self.forget_receiving();
        // Without a second handle the file is synced whole at the end, as
        // it always was.
        let handle = if self.snapshots.syncs() {
            file.try_clone().ok()
        } else {
            None
        };
        self.receiving_sync = handle
            .map(|handle| ReceivingSync::start(handle, RECEIVING_SYNC_EVERY, SYNC_STEP_BYTES));
        self.receiving = Some(path);
        Ok(Box::new(tokio::fs::File::from_std(file)))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: Box<tokio::fs::File>,
    ) -> StorageResult<()> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

        let signature = meta.signature();
        let write_error =
            |e: &StoreError| StorageIOError::write_snapshot(Some(signature.clone()), e);
        // A failure of the previous restore is the state's, not this snapshot's.
        self.settle()
            .await
            .map_err(|e| StorageIOError::write_state_machine(&e))?;
        tracing::info!(snapshot = %meta, "installing snapshot");
        // Every chunk is in: what is left unsynced is synced below, at once.
        self.receiving_sync = None;
        let started = std::time::Instant::now();
        let io_error =
            |e: std::io::Error| StorageIOError::read_snapshot(Some(signature.clone()), &e);
        snapshot.flush().await.map_err(io_error)?;
        let handed = snapshot.metadata().await.map_err(io_error)?;
        // The receiving file itself (the usual case), or another file: then
        // its bytes are read, to be written into a file of our own, and the
        // receiving one is removed.
        let received = match self.receiving.take() {
            Some(path) if is_same_file(&handed, &path) => Ok(path),
            other => {
                self.receiving = other;
                self.forget_receiving();
                snapshot
                    .seek(std::io::SeekFrom::Start(0))
                    .await
                    .map_err(io_error)?;
                let mut bytes = Vec::new();
                snapshot.read_to_end(&mut bytes).await.map_err(io_error)?;
                Err(bytes)
            }
        };
        drop(snapshot);
        let snapshots = Arc::clone(&self.snapshots);
        let owned_meta = meta.clone();
        let stored = tokio::task::spawn_blocking(move || {
            Self::store_received(&snapshots, &owned_meta, received)
        })
        .await
        .unwrap_or(Err(StoreError::BuilderStopped))
        .map_err(|e| write_error(&e))?;
        self.metrics
            .snapshot_bytes
            .store(handed.len(), std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            snapshot = %meta,
            store_ms = started.elapsed().as_millis() as u64,
            "stored snapshot; restoring it in the background"
        );
        let shared = Arc::clone(&self.shared);
        let owned_meta = meta.clone();
        self.restoring = Some(tokio::task::spawn_blocking(move || {
            Self::restore(&shared, &owned_meta, stored)
        }));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot>> {
        self.current_snapshot()
            .map_err(|e| StorageIOError::read_snapshot(None, &e).into())
    }
}

/// Checks the received file at `path` before it is stored
/// ([`SnapshotEnvelope::check_received`]): its envelope, and its bytes against
/// the CRC-32 the snapshot id promises (a read from the page cache, tens of milliseconds for
/// 75 MiB), without decoding the state.
fn check_received_file(meta: &SnapshotMeta, path: &std::path::Path) -> Result<(), StoreError> {
    use std::io::Read;

    /// More than the envelope's fields ever take (a membership of a few nodes).
    const HEAD_BYTES: usize = 1 << 20;
    let io = |source: std::io::Error| StoreError::SnapshotFile {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    // Only an id that promises a CRC-32 (this build's leaders) costs a read
    // of the whole file; otherwise the head is all that is read.
    let mut checksum = SnapshotEnvelope::promised_checksum(meta).map(|_| crc32fast::Hasher::new());
    let mut head = Vec::new();
    let mut buffer = vec![0; HEAD_BYTES];
    loop {
        let read = file.read(&mut buffer).map_err(io)?;
        if read == 0 {
            break;
        }
        if head.len() < HEAD_BYTES {
            let wanted = (HEAD_BYTES - head.len()).min(read);
            head.extend_from_slice(&buffer[..wanted]);
        }
        match checksum.as_mut() {
            Some(hasher) => hasher.update(&buffer[..read]),
            None if head.len() >= HEAD_BYTES => break,
            None => {}
        }
    }
    SnapshotEnvelope::check_received(meta, &head, len, checksum.map(|h| h.finalize()))
}

/// Whether `handed` (the metadata of an open file) describes the file at `path`.
fn is_same_file(handed: &std::fs::Metadata, path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .is_ok_and(|named| named.dev() == handed.dev() && named.ino() == handed.ino())
}
