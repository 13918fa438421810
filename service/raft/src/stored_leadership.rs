//! A restarted node does not resume the leadership of its old term unless it
//! is the only voter.

use std::collections::BTreeSet;

use baton_store::{LogStore, StateMachineStore, StorageError, Vote};
use openraft::storage::{RaftLogStorage, StorageHelper};

/// Stores a committed vote for `node_id` back uncommitted, before openraft
/// reads it, unless `node_id` is the only voter; returns whether it did.
///
/// openraft 0.9 restores a node whose stored vote is a committed one of its
/// own as the leader of that term at once, with no election
/// (`Engine::startup`). Here that is unsafe in two ways, both seen in tests:
/// - A leader replicates its entries while its own append is still queued
///   (the patched core, ARCHITECTURE.md "Why openraft 0.9.25"), so the
///   followers' flushes can commit a write, and it is acknowledged, before the
///   leader's copy is on disk: after a `kill -9` the leader's log lacks it.
///   Leading the same term again, it would write different entries under the
///   log ids the followers already hold, and openraft matches entries by log
///   id, so the replicas would diverge.
/// - The committed index it stored lags (it rides on the next append,
///   `CommittedMark`), and its read index in a resumed term is that index, so
///   it answered linearizable reads from before writes it acknowledged.
///
/// The uncommitted vote still refuses every vote not greater than itself (and
/// openraft's log ids carry the leader's node id, so leaders of one term never
/// write the same log id); the node starts as a follower, and the next leader,
/// which only voters holding every committed entry can elect, commits them all
/// with its first entry, before any read is answered at it. What it costs: an
/// election after a leader restarts. A lone voter keeps leading: nothing
/// commits without its own disk, and openraft commits its whole log at start.
/// Two voters do not: the resumed leader's log would hold every write (each
/// commit needed it), but its read index would still be the lagging committed
/// index.
pub(crate) async fn give_up_stored_leadership(
    node_id: u64,
    log_store: &mut LogStore,
    state_machine: &mut StateMachineStore,
) -> Result<bool, StorageError> {
    let Some(vote) = log_store.read_vote().await? else {
        return Ok(false);
    };
    if !vote.is_committed() || vote.leader_id().voted_for() != Some(node_id) {
        return Ok(false);
    }
    let membership = StorageHelper::new(log_store, state_machine)
        .get_membership()
        .await?;
    let joint = membership.effective().membership().get_joint_config();
    if !has_other_voters(node_id, joint) {
        return Ok(false);
    }
    let term = vote.leader_id().term;
    log_store.save_vote(&Vote::new(term, node_id)).await?;
    tracing::info!(
        term,
        "this node led term {term} when it stopped; it starts as a follower (the next leader commits what it may lack)"
    );
    Ok(true)
}

/// Whether any configuration of `joint` has a voter other than `me`.
fn has_other_voters(me: u64, joint: &[BTreeSet<u64>]) -> bool {
    joint.iter().flatten().any(|id| *id != me)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use baton_store::{BatonNode, Entry, LogId, Membership};
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;

    fn set(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    #[test]
    fn only_a_lone_voter_keeps_its_leadership() {
        assert!(!has_other_voters(1, &[set(&[1])]));
        assert!(has_other_voters(1, &[set(&[1, 2])]));
        assert!(has_other_voters(1, &[set(&[1, 2, 3])]));
        // A joint configuration: the new half counts too.
        assert!(has_other_voters(1, &[set(&[1]), set(&[1, 2, 3])]));
    }

    /// A store whose log holds a membership of `voters`, and whose vote is
    /// `vote`; what is stored after the call.
    async fn after_start(voters: &[u64], vote: Vote) -> (bool, Option<Vote>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut log, mut sm) = baton_store::open(dir.path()).expect("open");
        let nodes: BTreeMap<u64, BatonNode> = voters
            .iter()
            .map(|id| (*id, BatonNode::default()))
            .collect();
        let membership = Membership::new(vec![set(voters)], nodes);
        log.blocking_append([Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
            payload: EntryPayload::Membership(membership),
        }])
        .await
        .expect("append");
        log.save_vote(&vote).await.expect("save vote");
        let gave_up = give_up_stored_leadership(1, &mut log, &mut sm)
            .await
            .expect("give up");
        (gave_up, log.read_vote().await.expect("read vote"))
    }

    #[tokio::test]
    async fn a_leader_of_two_or_three_starts_with_its_vote_uncommitted() {
        for voters in [&[1, 2][..], &[1, 2, 3]] {
            let (gave_up, vote) = after_start(voters, Vote::new_committed(4, 1)).await;
            assert!(gave_up, "{voters:?}");
            assert_eq!(vote, Some(Vote::new(4, 1)), "{voters:?}");
        }
    }

    #[tokio::test]
    async fn a_lone_voter_and_other_votes_are_left_as_they_are() {
        let lone = after_start(&[1], Vote::new_committed(4, 1)).await;
        assert_eq!(lone, (false, Some(Vote::new_committed(4, 1))));
        let follower = after_start(&[1, 2, 3], Vote::new_committed(4, 2)).await;
        assert_eq!(follower, (false, Some(Vote::new_committed(4, 2))));
        let candidate = after_start(&[1, 2, 3], Vote::new(5, 1)).await;
        assert_eq!(candidate, (false, Some(Vote::new(5, 1))));
    }
}
