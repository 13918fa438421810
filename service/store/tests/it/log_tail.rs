//! Reading back what was just appended: from memory, and the same as on disk.

use baton_store::StoreMetrics;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::RaftLogReader;
use tempfile::TempDir;

use crate::common::{blank, lease_batch, log_id, normal};

fn reads(metrics: &StoreMetrics) -> (u64, u64) {
    (
        metrics.log_entries_read_from_memory.get(),
        metrics.log_entries_read_from_disk.get(),
    )
}

async fn ids(log: &mut baton_store::LogStore, range: std::ops::Range<u64>) -> Vec<(u64, u64)> {
    log.try_get_log_entries(range)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

#[tokio::test]
async fn just_appended_entries_are_read_from_memory_and_match_the_disk() {
    let dir = TempDir::new().unwrap();
    let written = {
        let (mut log, sm) = baton_store::open(dir.path()).unwrap();
        let metrics = sm.metrics();
        log.blocking_append((1..=6).map(|i| blank(1, i)))
            .await
            .unwrap();
        // A follower's conflicting suffix replaced by a new leader's entries.
        log.truncate(log_id(1, 4)).await.unwrap();
        log.blocking_append([normal(2, 4, lease_batch(1_000, &[7, 8]))])
            .await
            .unwrap();
        let written = log.try_get_log_entries(1..5).await.unwrap();
        assert_eq!(ids(&mut log, 1..5).await, [(1, 1), (1, 2), (1, 3), (2, 4)]);
        assert_eq!(reads(&metrics), (8, 0), "both reads from memory");
        // Past the end: only what the disk has (the entries truncated are gone).
        assert_eq!(ids(&mut log, 3..7).await, [(1, 3), (2, 4)]);
        assert_eq!(reads(&metrics), (8, 2));

        log.purge(log_id(1, 2)).await.unwrap();
        assert_eq!(ids(&mut log, 1..5).await, [(1, 3), (2, 4)]);
        assert_eq!(reads(&metrics), (8, 4), "entries 1 and 2 were purged");
        assert_eq!(ids(&mut log, 3..5).await, [(1, 3), (2, 4)]);
        assert_eq!(reads(&metrics), (10, 4));
        written
    };
    let (mut log, sm) = baton_store::open(dir.path()).unwrap();
    let from_disk = log.try_get_log_entries(1..5).await.unwrap();
    assert_eq!(reads(&sm.metrics()), (0, 2), "after a restart, from disk");
    assert_eq!(from_disk, written[2..]);
}
