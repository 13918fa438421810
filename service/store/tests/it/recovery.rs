//! What survives a restart, and what the raft layer is told while applying.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use baton_core::Outcome;
use baton_store::{ApplyObserver, LogState, Vote};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine, StorageHelper};
use openraft::{RaftLogReader, RaftSnapshotBuilder};
use tempfile::TempDir;

use crate::common::{blank, lease_batch, log_id, membership, normal, received_copy};

#[tokio::test]
async fn vote_log_snapshot_and_state_survive_a_restart() {
    let dir = TempDir::new().unwrap();
    let vote = Vote::new(2, 1);

    let (snapshot_meta, snapshot_revision, final_revision, membership_after) = {
        let (mut log, mut sm) = baton_store::open(dir.path()).unwrap();
        log.save_vote(&vote).await.unwrap();

        let first = vec![
            membership(1, 1, &[1]),
            blank(2, 2),
            normal(2, 3, lease_batch(1_000, &[11, 12])),
            normal(2, 4, lease_batch(1_001, &[13])),
            normal(2, 5, lease_batch(1_002, &[14])),
        ];
        // blocking_append goes through append() with a real LogFlushed callback
        // and waits for it, as openraft's log I/O does.
        log.blocking_append(first.clone()).await.unwrap();
        log.save_committed(Some(log_id(2, 5))).await.unwrap();
        let replies = sm.apply(first).await.unwrap();
        assert_eq!(
            replies.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![0, 0, 2, 1, 1]
        );
        assert!(
            replies[2].iter().all(|outcome| outcome.result.is_ok()),
            "{replies:?}"
        );

        let snapshot = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snapshot.meta.last_log_id, Some(log_id(2, 5)));
        let snapshot_revision = sm.shared().read().machine.revision();
        assert!(snapshot_revision > 0);

        // Openraft purges what a snapshot covers; keep a few entries.
        log.purge(log_id(2, 3)).await.unwrap();

        let second = vec![
            normal(2, 6, lease_batch(2_000, &[15])),
            normal(2, 7, lease_batch(2_001, &[16, 17])),
        ];
        log.blocking_append(second.clone()).await.unwrap();
        sm.apply(second).await.unwrap();
        log.save_committed(Some(log_id(2, 7))).await.unwrap();
        let final_revision = sm.shared().read().machine.revision();
        assert!(final_revision > snapshot_revision);
        let membership_after = sm.applied_state().await.unwrap().1;

        (
            snapshot.meta,
            snapshot_revision,
            final_revision,
            membership_after,
        )
    };

    let (mut log, mut sm) = baton_store::open(dir.path()).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(vote));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(2, 7)));
    assert_eq!(
        log.get_log_state().await.unwrap(),
        LogState {
            last_purged_log_id: Some(log_id(2, 3)),
            last_log_id: Some(log_id(2, 7))
        }
    );
    let indexes: Vec<u64> = log
        .try_get_log_entries(..)
        .await
        .unwrap()
        .iter()
        .map(|entry| entry.log_id.index)
        .collect();
    assert_eq!(indexes, vec![4, 5, 6, 7]);

    let current = sm
        .get_current_snapshot()
        .await
        .unwrap()
        .expect("a stored snapshot");
    assert_eq!(current.meta, snapshot_meta);

    // Restored from the snapshot only: the state as of log index 5.
    let (applied, stored_membership) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(2, 5)));
    assert_eq!(stored_membership, membership_after);
    assert_eq!(sm.shared().read().machine.revision(), snapshot_revision);
    assert_eq!(*sm.shared().subscribe_applied().borrow(), snapshot_revision);

    // What openraft does when a Raft is created on these stores: re-apply the
    // committed entries after the snapshot (6 and 7).
    let shared = sm.shared();
    let state = StorageHelper::new(&mut log, &mut sm)
        .get_initial_state()
        .await
        .unwrap();
    assert_eq!(state.committed.as_ref(), Some(&log_id(2, 7)));
    assert_eq!(shared.applied_index(), Some(7));
    assert_eq!(shared.read().machine.revision(), final_revision);
    assert_eq!(*shared.subscribe_applied().borrow(), final_revision);
    assert_eq!(*state.vote_ref(), vote);
}

#[tokio::test]
async fn truncate_removes_the_suffix_durably() {
    let dir = TempDir::new().unwrap();
    {
        let (mut log, _sm) = baton_store::open(dir.path()).unwrap();
        log.blocking_append((1..=6).map(|i| blank(1, i)))
            .await
            .unwrap();
        log.truncate(log_id(1, 4)).await.unwrap();
        log.blocking_append([blank(2, 4)]).await.unwrap();
    }
    let (mut log, _sm) = baton_store::open(dir.path()).unwrap();
    let ids: Vec<_> = log
        .try_get_log_entries(..)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.log_id)
        .collect();
    assert_eq!(
        ids,
        vec![log_id(1, 1), log_id(1, 2), log_id(1, 3), log_id(2, 4)]
    );
    assert_eq!(
        log.get_log_state().await.unwrap().last_log_id,
        Some(log_id(2, 4))
    );
}

#[derive(Default)]
struct Recorder {
    applied: Mutex<Vec<(u64, Vec<Outcome>)>>,
    installed: Mutex<Vec<u64>>,
}

impl ApplyObserver for Recorder {
    fn applied(&self, log_index: u64, _now_ms: u64, outcomes: &[Outcome]) {
        self.applied
            .lock()
            .unwrap()
            .push((log_index, outcomes.to_vec()));
    }

    fn snapshot_installed(&self, revision: u64, machine: &baton_core::StateMachine) {
        assert_eq!(machine.revision(), revision, "announced with its state");
        self.installed.lock().unwrap().push(revision);
    }
}

#[tokio::test]
async fn observer_gets_every_normal_entry_in_order() {
    let dir = TempDir::new().unwrap();
    let (_log, mut sm) = baton_store::open(dir.path()).unwrap();
    let recorder = Arc::new(Recorder::default());
    sm.set_observer(recorder.clone());
    let mut revisions = sm.shared().subscribe_applied();

    let replies = sm
        .apply([
            blank(1, 1),
            normal(1, 2, lease_batch(10, &[1, 2])),
            membership(1, 3, &[1, 2]),
            normal(1, 4, lease_batch(11, &[3])),
        ])
        .await
        .unwrap();
    let more = sm
        .apply([normal(1, 5, lease_batch(12, &[4]))])
        .await
        .unwrap();

    let seen = recorder.applied.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            (2, replies[1].clone()),
            (4, replies[3].clone()),
            (5, more[0].clone())
        ],
        "only normal entries, in log order, with the outcomes openraft got"
    );
    let outcome_revisions: Vec<u64> = seen
        .iter()
        .flat_map(|(_, o)| o.iter().map(|o| o.revision))
        .collect();
    assert!(
        outcome_revisions.windows(2).all(|w| w[0] < w[1]),
        "{outcome_revisions:?}"
    );

    assert!(revisions.has_changed().unwrap());
    assert_eq!(
        *revisions.borrow_and_update(),
        sm.shared().read().machine.revision()
    );
    assert_eq!(*revisions.borrow(), *outcome_revisions.last().unwrap());
    assert_eq!(sm.shared().applied_index(), Some(5));
}

#[tokio::test]
async fn installed_snapshot_replaces_state_and_is_announced() {
    let leader_dir = TempDir::new().unwrap();
    let follower_dir = TempDir::new().unwrap();
    let (_leader_log, mut leader) = baton_store::open(leader_dir.path()).unwrap();
    let (_follower_log, mut follower) = baton_store::open(follower_dir.path()).unwrap();

    leader
        .apply([
            membership(1, 1, &[1, 2, 3]),
            normal(1, 2, lease_batch(5, &[7, 8])),
            blank(2, 3),
        ])
        .await
        .unwrap();
    let mut built = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let leader_revision = leader.shared().read().machine.revision();
    // The build is measured: one duration, and the size of the file it wrote.
    let built_bytes = {
        use tokio::io::AsyncReadExt;
        let mut bytes = Vec::new();
        built.snapshot.read_to_end(&mut bytes).await.unwrap();
        bytes.len() as u64
    };
    assert!(built_bytes > 0);
    assert_eq!(leader.metrics().snapshot_build.count(), 1);
    assert_eq!(
        leader.metrics().snapshot_bytes.load(Ordering::Relaxed),
        built_bytes
    );

    // A builder taken before the install: its (older) build must not replace
    // the installed snapshot.
    follower.apply([blank(1, 1)]).await.unwrap();
    let mut stale_builder = follower.get_snapshot_builder().await;

    let recorder = Arc::new(Recorder::default());
    follower.set_observer(recorder.clone());

    let received = received_copy(&mut follower, &mut built).await;
    let received_inode = {
        use std::os::unix::fs::MetadataExt;
        received.metadata().await.unwrap().ino()
    };
    follower
        .install_snapshot(&built.meta, received)
        .await
        .unwrap();
    // The received file became the stored snapshot: no second copy was written,
    // and nothing is left over.
    assert_eq!(
        snapshot_files(follower_dir.path()),
        vec![("snapshot".to_owned(), received_inode)]
    );

    // The state is restored after the install was answered; the store's next
    // call waits for it (deferred_restore.rs shows the answer does not).
    let (applied, membership) = follower.applied_state().await.unwrap();
    assert_eq!(*recorder.installed.lock().unwrap(), vec![leader_revision]);
    assert_eq!(
        follower.metrics().snapshot_bytes.load(Ordering::Relaxed),
        built_bytes
    );
    assert_eq!(follower.shared().read().machine.revision(), leader_revision);
    assert_eq!(
        follower.shared().read().machine,
        leader.shared().read().machine
    );
    assert_eq!(applied, Some(log_id(2, 3)));
    assert_eq!(membership.log_id(), &Some(log_id(1, 1)));
    assert_eq!((applied, membership), leader.applied_state().await.unwrap());
    assert_eq!(
        *follower.shared().subscribe_applied().borrow(),
        leader_revision
    );

    let stale = stale_builder.build_snapshot().await.unwrap();
    assert_eq!(stale.meta.last_log_id, Some(log_id(1, 1)));
    let current = follower.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, built.meta);

    // Snapshot bytes that disagree with their meta are refused, and the stored
    // snapshot stays; so are bytes cut short in transfer.
    let mut wrong_meta = built.meta.clone();
    wrong_meta.last_log_id = Some(log_id(2, 9));
    let received = received_copy(&mut follower, &mut built).await;
    assert!(follower
        .install_snapshot(&wrong_meta, received)
        .await
        .is_err());
    let received = received_copy(&mut follower, &mut built).await;
    received.set_len(built_bytes - 1).await.unwrap();
    let refused = follower
        .install_snapshot(&built.meta, received)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("its envelope says"),
        "{refused}"
    );
    assert_eq!(
        follower.get_current_snapshot().await.unwrap().unwrap().meta,
        built.meta
    );
    follower.applied_state().await.unwrap();
    // The refused bytes' file is gone; the stored snapshot is untouched.
    assert_eq!(
        snapshot_files(follower_dir.path()),
        vec![("snapshot".to_owned(), received_inode)]
    );
}

/// The files in a store's snapshot directory: the part of each name before its
/// first `-` or `.` (`snapshot`, `receiving`, `staged`) and its inode, sorted.
fn snapshot_files(data_dir: &std::path::Path) -> Vec<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut files: Vec<(String, u64)> = std::fs::read_dir(data_dir.join(baton_store::SNAPSHOT_DIR))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = name.split(['-', '.']).next().unwrap_or_default().to_owned();
            (kind, entry.metadata().unwrap().ino())
        })
        .collect();
    files.sort();
    files
}
