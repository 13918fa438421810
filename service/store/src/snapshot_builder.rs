//! Building snapshots off the state-machine task.

use std::io::Cursor;
use std::sync::Arc;

use openraft::{RaftSnapshotBuilder, StorageIOError};

use crate::error::StoreError;
use crate::metrics::StoreMetrics;
use crate::shared::AppliedState;
use crate::snapshot::{SnapshotEnvelope, SnapshotStore, StoredSnapshot};
use crate::type_config::{Snapshot, SnapshotMeta, StorageResult, TypeConfig};

/// Builds a snapshot of the state as it was when openraft asked for the builder.
///
/// openraft runs the build in a task of its own while applying continues, so
/// the builder owns a copy of the applied state (cloning is cheaper than
/// serializing, and it keeps the state machine task's pause short).
#[derive(Debug)]
pub struct SnapshotBuilder {
    view: AppliedState,
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
            view,
            snapshots,
            metrics,
        }
    }

    fn build(&self) -> Result<Snapshot, StoreError> {
        let data = SnapshotEnvelope::of(&self.view).encode()?;
        let (seq, snapshot_id) = self.snapshots.next_id(self.view.last_applied.as_ref());
        let meta = SnapshotMeta {
            last_log_id: self.view.last_applied,
            last_membership: self.view.membership.clone(),
            snapshot_id,
        };
        let stored = StoredSnapshot { seq, meta, data };
        // If a newer snapshot was installed meanwhile it stays current; openraft
        // ignores a built snapshot older than the one it knows, so returning
        // this one anyway is harmless.
        if !self.snapshots.save(&stored, true)? {
            tracing::info!(snapshot = %stored.meta, "a newer snapshot is stored; not replacing it");
        }
        self.metrics.snapshots_built.inc();
        Ok(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(stored.data)),
        })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot> {
        self.build()
            .map_err(|e| StorageIOError::write_snapshot(None, &e).into())
    }
}
