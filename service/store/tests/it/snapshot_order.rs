//! A snapshot build that finishes after a newer snapshot was installed must not
//! replace it; and a builder builds once.

use openraft::storage::RaftStateMachine;
use openraft::RaftSnapshotBuilder;
use tempfile::TempDir;

use crate::common::{lease_batch, log_id, membership, normal, received_copy};

/// A snapshot of a second store that applied entries 1..=7, as a leader would
/// send it.
async fn snapshot_at_seven(dir: &TempDir) -> baton_store::Snapshot {
    let (_log, mut sm) = baton_store::open(dir.path()).unwrap();
    sm.apply(vec![
        membership(1, 1, &[1]),
        normal(1, 2, lease_batch(1_000, &[21])),
        normal(1, 7, lease_batch(1_001, &[22, 23])),
    ])
    .await
    .unwrap();
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_older_build_never_replaces_an_installed_newer_snapshot() {
    let leader_dir = TempDir::new().unwrap();
    let mut newer = snapshot_at_seven(&leader_dir).await;
    assert_eq!(newer.meta.last_log_id, Some(log_id(1, 7)));

    let dir = TempDir::new().unwrap();
    {
        let (_log, mut sm) = baton_store::open(dir.path()).unwrap();
        sm.apply(vec![
            membership(1, 1, &[1]),
            normal(1, 2, lease_batch(1_000, &[11])),
        ])
        .await
        .unwrap();
        // The builder copies the state at index 2; the newer snapshot is
        // installed before that build runs.
        let mut stale = sm.get_snapshot_builder().await;
        let received = received_copy(&mut sm, &mut newer).await;
        sm.install_snapshot(&newer.meta, received).await.unwrap();
        let built = stale.build_snapshot().await.unwrap();
        assert_eq!(built.meta.last_log_id, Some(log_id(1, 2)));
        let current = sm.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta, newer.meta, "the older build replaced it");

        // A builder is used once: its copy of the state went to that build.
        assert!(stale.build_snapshot().await.is_err());
    }

    // After a restart the stored snapshot's position is known again: an older
    // build still does not replace it, a newer one does.
    let (_log, mut sm) = baton_store::open(dir.path()).unwrap();
    let mut restored = sm.get_snapshot_builder().await;
    let rebuilt = restored.build_snapshot().await.unwrap();
    assert_eq!(rebuilt.meta.last_log_id, Some(log_id(1, 7)));
    sm.apply(vec![normal(1, 8, lease_batch(1_002, &[31]))])
        .await
        .unwrap();
    let newest = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    assert_eq!(newest.meta.last_log_id, Some(log_id(1, 8)));
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, newest.meta);
}
