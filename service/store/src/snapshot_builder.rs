//! Building snapshots off the state-machine task.

use std::sync::Arc;

use openraft::{RaftSnapshotBuilder, StorageIOError};

use crate::error::StoreError;
use crate::metrics::StoreMetrics;
use crate::shared::AppliedState;
use crate::snapshot::{SnapshotEnvelope, SnapshotStore};
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
    /// happen on the blocking thread. An error instead when the store had none
    /// to give (an installed snapshot it could not restore).
    view: Option<Result<AppliedState, StoreError>>,
    snapshots: Arc<SnapshotStore>,
    metrics: Arc<StoreMetrics>,
}

impl SnapshotBuilder {
    pub(crate) fn new(
        view: Result<AppliedState, StoreError>,
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
        let (staged, checksum) = snapshots.stage_built(seq, view)?;
        let meta = SnapshotMeta {
            last_log_id: view.last_applied,
            last_membership: view.membership.clone(),
            snapshot_id: SnapshotEnvelope::id_with_checksum(&snapshot_id, checksum),
        };
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
        // Encoding a large state and syncing it takes CPU-seconds: on a thread
        // of its own, not one of the runtime's workers (two on a two-core
        // machine), where it would delay heartbeats and requests; and at a
        // lower priority, so that on a busy machine it takes the CPU that
        // requests leave rather than a share of theirs (the scale benchmark's
        // p99 with a million holdings). It still finishes: nothing waits for
        // it but the next snapshot and the purge of the log it covers.
        let view = self
            .view
            .take()
            .unwrap_or(Err(StoreError::BuilderUsed))
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        let snapshots = Arc::clone(&self.snapshots);
        let started = std::time::Instant::now();
        let (done, built) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("baton-snapshot".to_owned())
            .spawn(move || {
                lower_this_threads_priority();
                let built = Self::build(&view, &snapshots);
                // Freed before the answer, off the runtime: once the build has
                // answered, nothing of it holds the store open (a restart
                // reopens the database right after).
                drop((view, snapshots));
                let _ = done.send(built);
            })
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        let (snapshot, bytes) = built
            .await
            .map_err(|_| StorageIOError::write_snapshot(None, &StoreError::BuilderStopped))?
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        let took = started.elapsed();
        tracing::info!(
            snapshot = %snapshot.meta,
            bytes,
            build_ms = took.as_millis() as u64,
            "built snapshot"
        );
        self.metrics.snapshot_build.observe_duration(took);
        self.metrics
            .snapshot_bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
        self.metrics.snapshots_built.inc();
        Ok(snapshot)
    }
}

/// The nice value the snapshot thread falls back to when the system refuses
/// `SCHED_IDLE` (see [`lower_this_threads_priority`]): 19, the lowest.
const FALLBACK_NICENESS: i32 = 19;

/// Moves the calling thread to `SCHED_IDLE`, the policy for work that should
/// run only on CPU nothing else wants; where the system refuses it (a seccomp
/// profile that blocks `sched_setscheduler`), to nice 19. On Linux the policy
/// and the nice value belong to a thread, so this touches no other; a failure
/// of both only costs the benefit.
///
/// Why not nice 19 alone (sessions 49 to 50): at a million held a nice-19
/// build still got 60-80 % of a core on a saturated two-core machine, and the
/// request threads' run-queue wait rose by about a sixth (per-thread
/// `schedstat`). Most likely because the kernel's fair scheduler (EEVDF) lets
/// a running task finish a minimum slice before a waking one takes its CPU,
/// whatever their weights, and the request threads sleep and wake thousands
/// of times a second (a CPU-bound nice-19 loop gets its 1.3 %). A `SCHED_IDLE`
/// thread is preempted by any waking normal thread at once, and a CPU that
/// runs only such threads counts as idle when a woken thread is placed.
/// The cost: on a machine that stays saturated, the build gets about 0.3 % of
/// a CPU (weight 3 against 1,024) and takes that much longer; nothing but the
/// next snapshot and the purge of the log it covers waits for it, and
/// `baton_snapshot_build_seconds` shows it.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            set_thread_priority_and_policy, thread_native_id, thread_schedule_policy,
            NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        // The call also resets the thread's nice value to 0, which fails in a
        // process started with a higher one after the policy was already set:
        // what counts is the policy the thread ends up with.
        let set = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle);
        if thread_schedule_policy().is_ok_and(|policy| policy == idle) {
            return;
        }
        if let Err(refused) = set {
            tracing::debug!(error = %refused, "SCHED_IDLE refused; the snapshot thread runs at nice 19");
        }
        let lowered = rustix::process::getpriority_process(None).and_then(|current| {
            rustix::process::setpriority_process(None, (current + FALLBACK_NICENESS).min(19))
        });
        if let Err(error) = lowered {
            tracing::debug!(%error, "the snapshot thread keeps its priority");
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_the_calling_thread_is_made_idle() {
        use thread_priority::{
            thread_schedule_policy, NormalThreadSchedulePolicy, ThreadSchedulePolicy,
        };
        let before = thread_schedule_policy().unwrap();
        let lowered = std::thread::spawn(|| {
            lower_this_threads_priority();
            thread_schedule_policy().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(
            lowered,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle)
        );
        assert_eq!(thread_schedule_policy().unwrap(), before);
        assert_ne!(before, lowered);
    }
}
