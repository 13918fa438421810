//! Helpers shared by the integration tests.

#![allow(dead_code)]

use baton_core::{Batch, Command, LeaseId, Limits, Request};
use baton_store::{Entry, EntryPayload, LogId, Membership};
use openraft::CommittedLeaderId;
use std::collections::BTreeSet;

/// A log id written by leader 1.
pub fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// A batch creating one lease per id.
pub fn lease_batch(now_ms: u64, lease_ids: &[u128]) -> Batch {
    Batch {
        now_ms,
        limits: Limits::default(),
        requests: lease_ids
            .iter()
            .map(|id| {
                Request::plain(Command::CreateLease {
                    lease_id: LeaseId(*id),
                    ttl_ms: 10_000,
                    holder: format!("holder-{id}"),
                })
            })
            .collect(),
    }
}

/// A normal entry carrying `batch`.
pub fn normal(term: u64, index: u64, batch: Batch) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(batch),
    }
}

/// A blank entry.
pub fn blank(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Blank,
    }
}

/// A membership entry with voters `voters` (no node addresses).
pub fn membership(term: u64, index: u64, voters: &[u64]) -> Entry {
    let config = BTreeSet::from_iter(voters.iter().copied());
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(Membership::new(vec![config], ())),
    }
}

/// What a follower's store receives when `snapshot` is sent to it: a receiving
/// file of `follower` with the snapshot's bytes copied in, as openraft's chunks
/// would write them.
pub async fn received_copy(
    follower: &mut baton_store::StateMachineStore,
    snapshot: &mut baton_store::Snapshot,
) -> Box<tokio::fs::File> {
    use openraft::storage::RaftStateMachine;
    use tokio::io::{AsyncSeekExt, AsyncWriteExt};

    let mut received = follower.begin_receiving_snapshot().await.unwrap();
    snapshot
        .snapshot
        .seek(std::io::SeekFrom::Start(0))
        .await
        .unwrap();
    tokio::io::copy(&mut *snapshot.snapshot, &mut *received)
        .await
        .unwrap();
    received.flush().await.unwrap();
    received
}

/// Sends `snapshot` to `follower` as openraft would, installs it and waits for
/// its state to be restored.
pub async fn install_and_restore(
    follower: &mut baton_store::StateMachineStore,
    snapshot: &mut baton_store::Snapshot,
) {
    use openraft::storage::RaftStateMachine;

    let received = received_copy(follower, snapshot).await;
    follower
        .install_snapshot(&snapshot.meta, received)
        .await
        .unwrap();
    follower.applied_state().await.unwrap();
}
