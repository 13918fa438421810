//! Syncing a snapshot file while its chunks are still arriving.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the file being received is looked at.
pub(crate) const RECEIVING_SYNC_EVERY: Duration = Duration::from_millis(50);

/// Syncs the data of a snapshot file being received, in the background, each
/// time it has grown by `step` bytes or more since the last sync; stops when
/// dropped.
///
/// openraft writes the chunks without syncs, and the store syncs the whole
/// file once the last chunk is in, before it answers that chunk
/// (`SnapshotStore::adopt_received`). That answer, and every heartbeat
/// handled after it, waits for the sync: a 75 MiB file flushed at once took
/// up to 250 ms, twice what issue 19 allows a follower to go without hearing
/// its leader (`make bench-snapshot-cluster`, session 64). Synced while it
/// arrives, what is left for the final sync is the last moments' chunks.
#[derive(Debug)]
pub(crate) struct ReceivingSync {
    task: tokio::task::JoinHandle<()>,
    syncs: Arc<AtomicU64>,
}

impl ReceivingSync {
    /// Starts syncing `file` (a handle of the file being received) on the
    /// current tokio runtime, looking every `every`. A failed sync ends the
    /// syncing quietly: the final sync reports the failure.
    pub(crate) fn start(file: File, every: Duration, step: u64) -> Self {
        let syncs = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&syncs);
        let task = tokio::spawn(async move {
            let file = Arc::new(file);
            let mut synced = 0;
            loop {
                tokio::time::sleep(every).await;
                let Ok(len) = file.metadata().map(|meta| meta.len()) else {
                    return;
                };
                if len.saturating_sub(synced) < step.max(1) {
                    continue;
                }
                let syncing = Arc::clone(&file);
                match tokio::task::spawn_blocking(move || syncing.sync_data()).await {
                    Ok(Ok(())) => {
                        synced = len;
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => return,
                }
            }
        });
        ReceivingSync { task, syncs }
    }

    /// Syncs done so far.
    #[cfg(test)]
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

impl Drop for ReceivingSync {
    fn drop(&mut self) {
        // A sync already handed to a blocking thread finishes there, harmless.
        self.task.abort();
        tracing::debug!(
            syncs = self.syncs.load(Ordering::Relaxed),
            "synced the snapshot being received while it arrived"
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::io::Write;

    /// Waits, up to `limit`, for `done` to hold.
    async fn eventually(limit: Duration, done: impl Fn() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while !done() {
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    #[tokio::test]
    async fn a_growing_file_is_synced_once_per_step_and_no_more_once_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = File::create(dir.path().join("receiving-1.tmp")).unwrap();
        let sync = ReceivingSync::start(file.try_clone().unwrap(), Duration::from_millis(5), 1_000);

        file.write_all(&[7; 999]).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(sync.syncs(), 0, "less than a step is left for later");

        file.write_all(&[7; 1]).unwrap();
        assert!(eventually(Duration::from_secs(10), || sync.syncs() == 1).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(sync.syncs(), 1, "nothing new, no sync");

        file.write_all(&[7; 2_500]).unwrap();
        assert!(eventually(Duration::from_secs(10), || sync.syncs() == 2).await);

        let syncs = Arc::clone(&sync.syncs);
        drop(sync);
        file.write_all(&[7; 5_000]).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(syncs.load(Ordering::Relaxed), 2, "stopped when dropped");
    }

    /// The store syncs the file it hands openraft for a snapshot's chunks
    /// while they are written, and stops once the install begins.
    #[tokio::test]
    async fn the_store_syncs_a_snapshot_file_while_it_is_received() {
        use openraft::storage::RaftStateMachine;
        use tokio::io::AsyncWriteExt;

        let dir = tempfile::tempdir().unwrap();
        let (_log, mut store) = crate::open(dir.path()).unwrap();
        assert_eq!(store.receiving_syncs(), None);
        let mut receiving = store.begin_receiving_snapshot().await.unwrap();
        receiving
            .write_all(&vec![7; 3 * crate::snapshot::SYNC_STEP_BYTES as usize])
            .await
            .unwrap();
        receiving.flush().await.unwrap();
        assert!(
            eventually(Duration::from_secs(10), || store
                .receiving_syncs()
                .is_some_and(|syncs| syncs >= 1))
            .await,
            "synced while receiving"
        );
        // A new receipt replaces the old one and its syncing.
        let _next = store.begin_receiving_snapshot().await.unwrap();
        assert_eq!(store.receiving_syncs(), Some(0));
    }
}
