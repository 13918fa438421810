//! The leader's lease clock: deadlines on a monotonic clock, in memory.
//!
//! Keepalives only move a deadline here (no disk write, no log entry); when a
//! deadline passes, the leader proposes an `ExpireLease` command, so every replica
//! drops the same holdings at the same revision. A node that becomes leader
//! restarts every lease's deadline at a full TTL, so a leader change never
//! shortens a lease (etcd's rule).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use baton_core::{Event, EventKind, LeaseId, StateMachine};
use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
struct Deadline {
    at: Instant,
    ttl: Duration,
    /// The expiry was decided (proposed, not yet applied): keepalives are refused
    /// from then on, even if the proposal fails, because a failed proposal may
    /// still commit (its outcome can be unknown).
    expiring: bool,
    /// After a failed expiry proposal: when to propose it again.
    retry_at: Option<Instant>,
}

/// Lease id -> deadline.
#[derive(Default)]
pub struct LeaseClock {
    deadlines: Mutex<HashMap<LeaseId, Deadline>>,
}

impl LeaseClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseId, Deadline>> {
        self.deadlines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tracks leases created and forgets leases ended by applied events.
    pub fn on_events(&self, events: &[Event]) {
        let now = Instant::now();
        let mut deadlines = None;
        for event in events {
            match &event.kind {
                EventKind::LeaseCreated {
                    lease_id, ttl_ms, ..
                } => {
                    let ttl = Duration::from_millis(*ttl_ms);
                    deadlines.get_or_insert_with(|| self.lock()).insert(
                        *lease_id,
                        Deadline {
                            at: now + ttl,
                            ttl,
                            expiring: false,
                            retry_at: None,
                        },
                    );
                }
                EventKind::LeaseEnded { lease_id, .. } => {
                    deadlines
                        .get_or_insert_with(|| self.lock())
                        .remove(lease_id);
                }
                _ => {}
            }
        }
    }

    /// Restarts every live lease at a full TTL from now (on becoming leader, after
    /// a snapshot install).
    pub fn reset_all(&self, state: &StateMachine) {
        let now = Instant::now();
        let mut deadlines = self.lock();
        deadlines.clear();
        for (lease_id, ttl_ms) in state.leases() {
            let ttl = Duration::from_millis(ttl_ms);
            deadlines.insert(
                lease_id,
                Deadline {
                    at: now + ttl,
                    ttl,
                    expiring: false,
                    retry_at: None,
                },
            );
        }
    }

    /// Moves a lease's deadline to a full TTL from now. `None` if unknown here or
    /// if its expiry has already been proposed: that proposal will commit, so a
    /// keepalive acknowledged now would promise a lease that is about to end.
    pub fn keep_alive(&self, lease_id: LeaseId) -> Option<Duration> {
        let mut deadlines = self.lock();
        let deadline = deadlines.get_mut(&lease_id)?;
        if deadline.expiring {
            return None;
        }
        deadline.at = Instant::now() + deadline.ttl;
        Some(deadline.ttl)
    }

    /// Time left before the lease expires, as this node's clock sees it.
    pub fn remaining(&self, lease_id: LeaseId) -> Option<Duration> {
        let deadlines = self.lock();
        let deadline = deadlines.get(&lease_id)?;
        Some(deadline.at.saturating_duration_since(Instant::now()))
    }

    /// Leases past their deadline whose expiry is not in flight (new ones, and
    /// failed proposals due for another try); marks them as being expired.
    pub fn take_expired(&self) -> Vec<LeaseId> {
        let now = Instant::now();
        let mut deadlines = self.lock();
        let mut expired = Vec::new();
        for (lease_id, deadline) in deadlines.iter_mut() {
            let due = if deadline.expiring {
                deadline.retry_at.is_some_and(|at| at <= now)
            } else {
                deadline.at <= now
            };
            if due {
                deadline.expiring = true;
                deadline.retry_at = None;
                expired.push(*lease_id);
            }
        }
        expired
    }

    /// An expiry proposal failed: propose it again in a second. The lease stays
    /// refused to keepalives (the failed proposal may still commit); a new leader
    /// starts over with full TTLs anyway.
    pub fn expiry_failed(&self, lease_id: LeaseId) {
        if let Some(deadline) = self.lock().get_mut(&lease_id) {
            deadline.retry_at = Some(Instant::now() + Duration::from_secs(1));
        }
    }

    /// Number of leases tracked.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no lease is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::{ApplyContext, Command, Limits, Request};

    fn created(lease: u128, ttl_ms: u64) -> Event {
        Event {
            revision: 1,
            kind: EventKind::LeaseCreated {
                lease_id: LeaseId(lease),
                ttl_ms,
                holder: String::new(),
            },
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_expires_only_after_its_full_ttl_since_the_last_keepalive() {
        let clock = LeaseClock::default();
        clock.on_events(&[created(1, 1_000)]);
        tokio::time::advance(Duration::from_millis(900)).await;
        assert!(clock.take_expired().is_empty());
        assert_eq!(
            clock.keep_alive(LeaseId(1)),
            Some(Duration::from_millis(1_000))
        );
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(clock.take_expired().is_empty());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(clock.take_expired(), vec![LeaseId(1)]);
        assert!(
            clock.take_expired().is_empty(),
            "an expiry is proposed once"
        );
        clock.expiry_failed(LeaseId(1));
        assert!(clock.take_expired().is_empty(), "retried after a pause");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(clock.take_expired(), vec![LeaseId(1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_leader_restarts_every_lease_at_a_full_ttl() {
        let mut state = StateMachine::new();
        let ctx = ApplyContext {
            now_ms: 0,
            limits: Limits::default(),
        };
        state.apply(
            &ctx,
            &Request::plain(Command::CreateLease {
                lease_id: LeaseId(7),
                ttl_ms: 2_000,
                holder: String::new(),
            }),
        );
        let clock = LeaseClock::default();
        tokio::time::advance(Duration::from_millis(1_500)).await;
        clock.reset_all(&state);
        assert_eq!(
            clock.remaining(LeaseId(7)),
            Some(Duration::from_millis(2_000))
        );
        tokio::time::advance(Duration::from_millis(1_999)).await;
        assert!(clock.take_expired().is_empty());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(clock.take_expired(), vec![LeaseId(7)]);
    }

    #[tokio::test(start_paused = true)]
    async fn ended_leases_are_forgotten() {
        let clock = LeaseClock::default();
        clock.on_events(&[created(1, 1_000)]);
        clock.on_events(&[Event {
            revision: 2,
            kind: EventKind::LeaseEnded {
                lease_id: LeaseId(1),
                holder: String::new(),
                reason: baton_core::EndReason::Revoked,
            },
        }]);
        assert!(clock.is_empty());
        assert_eq!(clock.keep_alive(LeaseId(1)), None);
    }

    /// Found by the chaos harness (seed 6, leader SIGSTOPped while a renew
    /// waited): a keepalive arriving after the expiry was proposed used to
    /// "rescue" the deadline and answer 200, then the expiry committed.
    #[tokio::test(start_paused = true)]
    async fn a_keepalive_after_the_expiry_was_proposed_is_refused() {
        let clock = LeaseClock::default();
        clock.on_events(&[created(1, 1_000)]);
        tokio::time::advance(Duration::from_millis(1_001)).await;
        assert_eq!(clock.take_expired(), vec![LeaseId(1)]);
        assert_eq!(
            clock.keep_alive(LeaseId(1)),
            None,
            "its expiry is in flight"
        );
        // A failed proposal may still commit: the lease stays refused, and its
        // expiry is proposed again a second later.
        clock.expiry_failed(LeaseId(1));
        assert_eq!(clock.keep_alive(LeaseId(1)), None);
        assert!(clock.take_expired().is_empty());
        tokio::time::advance(Duration::from_millis(1_001)).await;
        assert_eq!(clock.take_expired(), vec![LeaseId(1)]);
    }
}
