//! The read floor of a leader that resumed its term after a restart.

use baton_store::{LogId, Vote};

/// What a node's storage held at start, for the one case in which openraft's
/// read index is too low: the node restarts as the leader of the term it led
/// before (openraft restores a committed vote of its own at once, no
/// election), with the committed index it stored.
///
/// That stored index lags: it rides on the next append (`CommittedMark` in
/// baton-store), so after a `kill -9` the entries of the last acknowledged
/// writes are not known to be committed, and the state machine was rebuilt
/// only up to what is. openraft's read index is the committed index (or the
/// first entry of the leader's term, long committed here), so such a leader
/// confirmed by a quorum served reads from before those writes until
/// replication caught up (the chaos smoke saw stale reads and refused renews
/// after a kill-all). Every write it acknowledged is in its log (a leader
/// counts itself only once its append is on disk), so a read confirmed in
/// that term waits for the log's end at start to be applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ResumedTerm {
    /// The term of the committed vote for this node stored at start, if any.
    term: Option<u64>,
    /// The index of the last log entry stored at start (0: none).
    log_end: u64,
}

impl ResumedTerm {
    /// What node `node_id` found in its storage: the vote and the last log id.
    pub(crate) fn new(node_id: u64, vote: Option<&Vote>, last_log: Option<&LogId>) -> Self {
        let term = vote
            .filter(|vote| vote.is_committed() && vote.leader_id().voted_for() == Some(node_id))
            .map(|vote| vote.leader_id().term);
        ResumedTerm {
            term,
            log_end: last_log.map_or(0, |log_id| log_id.index),
        }
    }

    /// The floor a read index must respect while this node leads in
    /// `term`, or `None` once nothing can be below it: the node did not
    /// start as a leader, or its applied index (`applied`) has reached the
    /// log's end at start, after which every read index is above it anyway.
    pub(crate) fn pending(&self, applied: Option<u64>) -> Option<(u64, u64)> {
        let term = self.term?;
        (applied < Some(self.log_end)).then_some((term, self.log_end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn committed(term: u64, node: u64) -> Vote {
        Vote::new_committed(term, node)
    }

    #[test]
    fn a_node_that_led_before_the_restart_waits_for_its_log_end() {
        let resumed = ResumedTerm::new(1, Some(&committed(4, 1)), Some(&log_id(4, 120)));
        assert_eq!(resumed.pending(Some(100)), Some((4, 120)));
        assert_eq!(resumed.pending(None), Some((4, 120)));
        // Once applied that far, no read index can be below it.
        assert_eq!(resumed.pending(Some(120)), None);
        assert_eq!(resumed.pending(Some(130)), None);
    }

    #[test]
    fn a_follower_or_a_candidate_at_start_has_no_floor() {
        let log = Some(log_id(4, 120));
        let follower = ResumedTerm::new(1, Some(&committed(4, 2)), log.as_ref());
        assert_eq!(follower.pending(Some(100)), None);
        let candidate = ResumedTerm::new(1, Some(&Vote::new(5, 1)), log.as_ref());
        assert_eq!(candidate.pending(Some(100)), None);
        let fresh = ResumedTerm::new(1, None, None);
        assert_eq!(fresh.pending(None), None);
    }
}
