//! Building snapshots off the state-machine task.

use std::sync::Arc;

use openraft::{RaftSnapshotBuilder, StorageIOError};

use crate::error::StoreError;
use crate::metrics::StoreMetrics;
use crate::shared::AppliedState;
use crate::snapshot::SnapshotStore;
use crate::type_config::{Snapshot, SnapshotMeta, StorageResult, TypeConfig};

/// Builds a snapshot of the state as it was when openraft asked for the builder.
///
/// openraft runs the build in a task of its own while applying continues, so
/// the builder owns a copy of the applied state. The state's collections are
/// persistent maps, so the copy shares them and costs next to nothing; the
/// state machine task does not pause for it.
#[derive(Debug)]
pub struct SnapshotBuilder {
    /// Taken by the one build: encoding and then freeing the copy both
    /// happen on the blocking thread.
    view: Option<AppliedState>,
    snapshots: Arc<SnapshotStore>,
    metrics: Arc<StoreMetrics>,
}

impl SnapshotBuilder {
    pub(crate) fn new(
        view: AppliedState,
        snapshots: Arc<SnapshotStore>,
        metrics: Arc<StoreMetrics>,
    ) -> Self {
        SnapshotBuilder {
            view: Some(view),
            snapshots,
            metrics,
        }
    }

    /// Builds the snapshot; returns it and its size in bytes.
    fn build(
        view: &AppliedState,
        snapshots: &SnapshotStore,
    ) -> Result<(Snapshot, u64), StoreError> {
        let (seq, snapshot_id) = snapshots.next_id(view.last_applied.as_ref());
        let meta = SnapshotMeta {
            last_log_id: view.last_applied,
            last_membership: view.membership.clone(),
            snapshot_id,
        };
        let staged = snapshots.stage_built(seq, view)?;
        // Opened before it is committed or dropped: either way the handle
        // reads these bytes.
        let (file, bytes) = std::fs::File::open(&staged)
            .and_then(|file| Ok((file.metadata()?.len(), file)))
            .map(|(bytes, file)| (file, bytes))
            .map_err(|source| StoreError::SnapshotFile {
                path: staged.clone(),
                source,
            })?;
        // If a newer snapshot was installed meanwhile it stays current; openraft
        // ignores a built snapshot older than the one it knows, so returning
        // this one anyway is harmless.
        if !snapshots.commit(seq, &meta, &staged, true)? {
            tracing::info!(snapshot = %meta, "a newer snapshot is stored; not replacing it");
        }
        let snapshot = Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        };
        Ok((snapshot, bytes))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot> {
        // Encoding a large state and syncing it takes CPU-seconds: on a
        // blocking thread, not one of the runtime's workers (two on a
        // two-core machine), where it would delay heartbeats and requests.
        let view = self
            .view
            .take()
            .ok_or_else(|| StorageIOError::write_snapshot(None, &StoreError::BuilderUsed))?;
        let snapshots = Arc::clone(&self.snapshots);
        let started = std::time::Instant::now();
        let (snapshot, bytes) = tokio::task::spawn_blocking(move || Self::build(&view, &snapshots))
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        self.metrics
            .snapshot_build
            .observe_duration(started.elapsed());
        self.metrics
            .snapshot_bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
        self.metrics.snapshots_built.inc();
        Ok(snapshot)
    }
}
