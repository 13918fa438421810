//! How long a follower goes without hearing from its leader: the time between
//! two accepted leader RPCs (appends, heartbeats, snapshot chunks) of the same
//! term, measured when each has been handled.
//!
//! Issue 19 asks that building and installing a large snapshot never stop
//! heartbeats for more than a quarter of the election timeout. A stall on either
//! side shows here: a leader whose core is late sends late, a follower whose core
//! is busy handles late, and both lengthen the gap the follower's election timer
//! sees. Gaps across a change of term are not measured: an election is counted
//! by `baton_raft_leader_changes_total` instead.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_metrics::{Buckets, Histogram, Unit};

/// Gaps from 5 ms to 10 s, finest around the idle heartbeat cadence (90 ms) and a
/// quarter of the default election timeout (125 ms), so that "more than a
/// quarter of the election timeout" can be read off the buckets.
pub const CONTACT_GAP_SECONDS: Buckets = Buckets {
    bounds: &[
        5_000, 10_000, 25_000, 50_000, 75_000, 100_000, 110_000, 125_000, 150_000, 200_000,
        250_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000,
    ],
    unit: Unit::Micros,
};

/// The follower's record of leader contact.
#[derive(Debug)]
pub struct LeaderContact {
    /// Term and time of the last accepted leader RPC.
    last: Mutex<Option<(u64, Instant)>>,
    gaps: Histogram,
}

impl Default for LeaderContact {
    fn default() -> Self {
        LeaderContact {
            last: Mutex::new(None),
            gaps: Histogram::new(CONTACT_GAP_SECONDS),
        }
    }
}

impl LeaderContact {
    /// A leader RPC of `term` was accepted and handled at `now`; returns the
    /// gap since the previous one of that term, if there was one.
    pub fn heard(&self, term: u64, now: Instant) -> Option<Duration> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        match *last {
            // Concurrent RPCs may finish out of order: only time moving
            // forward is a gap.
            Some((last_term, at)) if last_term == term && now <= at => None,
            Some((last_term, at)) if last_term == term => {
                let gap = now - at;
                self.gaps.observe_duration(gap);
                *last = Some((term, now));
                Some(gap)
            }
            _ => {
                *last = Some((term, now));
                None
            }
        }
    }

    /// The gaps measured so far.
    pub fn gaps(&self) -> &Histogram {
        &self.gaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum_micros(contact: &LeaderContact) -> u64 {
        contact.gaps().snapshot().sum
    }

    #[test]
    fn gaps_between_contacts_of_one_term_are_measured() {
        let contact = LeaderContact::default();
        let start = Instant::now();
        assert_eq!(contact.heard(3, start), None);
        contact.heard(3, start + Duration::from_millis(100));
        let gap = contact.heard(3, start + Duration::from_millis(400));
        assert_eq!(gap, Some(Duration::from_millis(300)));
        assert_eq!(contact.gaps().count(), 2);
        assert_eq!(sum_micros(&contact), 400_000);
    }

    #[test]
    fn the_first_contact_and_a_new_term_start_over() {
        let contact = LeaderContact::default();
        let start = Instant::now();
        contact.heard(3, start);
        // A new leader after an election: the time without one is not a gap.
        contact.heard(4, start + Duration::from_secs(2));
        contact.heard(4, start + Duration::from_millis(2_050));
        assert_eq!(contact.gaps().count(), 1);
        assert_eq!(sum_micros(&contact), 50_000);
    }

    #[test]
    fn a_contact_finishing_out_of_order_does_not_move_time_back() {
        let contact = LeaderContact::default();
        let start = Instant::now();
        contact.heard(1, start + Duration::from_millis(100));
        contact.heard(1, start + Duration::from_millis(90));
        contact.heard(1, start + Duration::from_millis(200));
        assert_eq!(contact.gaps().count(), 1);
        assert_eq!(sum_micros(&contact), 100_000);
    }
}
