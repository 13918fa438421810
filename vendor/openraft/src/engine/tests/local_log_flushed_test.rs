//! Patched (Baton): a leader's own log flush, reported by the storage after
//! the append returned (`Notify::LocalLogFlushed`), counts towards the quorum
//! only under the vote the append was made with.

use std::sync::Arc;

use maplit::btreeset;
use pretty_assertions::assert_eq;

use crate::engine::testing::UTConfig;
use crate::engine::Engine;
use crate::progress::Progress;
use crate::testing::log_id;
use crate::utime::UTime;
use crate::EffectiveMembership;
use crate::LogId;
use crate::Membership;
use crate::MembershipState;
use crate::TokioInstant;
use crate::Vote;

fn m123() -> Membership<u64, ()> {
    Membership::<u64, ()>::new(vec![btreeset! {1,2,3}], None)
}

/// Node 1, leading term `term` of voters {1, 2, 3}.
fn leader_of_term(term: u64) -> Engine<UTConfig> {
    let mut eng = Engine::default();
    eng.state.enable_validation(false); // Disable validation for incomplete state
    eng.config.id = 1;
    eng.state.vote = UTime::new(TokioInstant::now(), Vote::new_committed(term, 1));
    eng.state.membership_state = MembershipState::new(
        Arc::new(EffectiveMembership::new(Some(log_id(1, 1, 1)), m123())),
        Arc::new(EffectiveMembership::new(Some(log_id(1, 1, 1)), m123())),
    );
    eng.testing_new_leader();
    eng.output.take_commands();
    eng
}

/// How far node 1's own log counts towards the quorum.
fn own_matching(eng: &Engine<UTConfig>) -> Option<LogId<u64>> {
    eng.leader.as_ref().expect("a leader").progress.get(&1).matching
}

#[test]
fn test_a_flush_under_the_leaders_vote_counts() -> anyhow::Result<()> {
    let mut eng = leader_of_term(2);

    eng.local_log_flushed(&Vote::new_committed(2, 1), log_id(2, 1, 5));

    assert_eq!(Some(log_id(2, 1, 5)), own_matching(&eng));
    Ok(())
}

/// Node 1 led term 2, lost the lead and won term 3: a flush of its term-2
/// append that arrives now says nothing about the term-3 log.
#[test]
fn test_a_flush_under_an_earlier_vote_counts_for_nothing() -> anyhow::Result<()> {
    let mut eng = leader_of_term(3);

    eng.local_log_flushed(&Vote::new_committed(2, 1), log_id(2, 1, 5));

    assert_eq!(None, own_matching(&eng));
    assert_eq!(0, eng.output.take_commands().len());
    Ok(())
}

#[test]
fn test_a_flush_after_stepping_down_counts_for_nothing() -> anyhow::Result<()> {
    let mut eng = leader_of_term(2);
    eng.leader = None;

    eng.local_log_flushed(&Vote::new_committed(2, 1), log_id(2, 1, 5));

    assert_eq!(0, eng.output.take_commands().len());
    Ok(())
}
