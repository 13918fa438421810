//! The leader's lease clock: deadlines on a monotonic clock, in memory.
//!
//! Keepalives only move a deadline here (no disk write, no log entry); when a
//! deadline passes, the leader proposes an `ExpireLeaseOfTerm` command, so every
//! replica drops the same holdings at the same revision. A node that becomes
//! leader (in every new term) restarts every lease's deadline at a full TTL, so a
//! leader change never shortens a lease (etcd's rule); an expiry carries the term
//! it was decided in, and the log applies it only in that term.
//!
//! Deadlines are kept in order (`due`), so a tick costs what expires, not what
//! lives: it used to scan every lease every 50 ms under the mutex keepalives and
//! apply take too (issue 19), which at a million leases is most of a core.
//!
//! Only a leader keeps the deadlines up to date. A follower's are never read
//! (every use goes through the leader), and a node that becomes leader
//! rebuilds them from the applied state ([`LeaseClock::reset_all`]). So a
//! follower skips the bookkeeping: per applied lease event, and above all
//! after an installed snapshot, where catching up with 100,000 leases under
//! the state's write lock stalled the node's only runtime thread for 190 ms
//! (issue 19, session 64).

use std::collections::{BTreeSet, HashMap};
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

impl Deadline {
    fn starting(now: Instant, ttl: Duration) -> Deadline {
        Deadline {
            at: now + ttl,
            ttl,
            expiring: false,
            retry_at: None,
        }
    }

    /// When this lease is next due for an expiry proposal: its deadline, or
    /// the retry of a failed proposal; `None` while a proposal is in flight.
    fn due_at(&self) -> Option<Instant> {
        if self.expiring {
            self.retry_at
        } else {
            Some(self.at)
        }
    }
}

/// The deadlines of one leadership term.
#[derive(Default)]
struct Deadlines {
    /// The term in which these deadlines were (re)started; every expiry decided
    /// from them carries it, and the log applies it only in that term.
    term: u64,
    /// This node leads `term`: the deadlines follow applied events. False
    /// until the first [`LeaseClock::reset_all`] and after
    /// [`LeaseClock::stand_down`]; the deadlines then stay as they were.
    leading: bool,
    leases: HashMap<LeaseId, Deadline>,
    /// Every lease with a `due_at`, ordered by it (one entry per lease).
    due: BTreeSet<(Instant, LeaseId)>,
}

impl Deadlines {
    /// Inserts or replaces a lease's deadline, keeping `due` in step.
    fn set(&mut self, lease_id: LeaseId, deadline: Deadline) {
        if let Some(old) = self.leases.insert(lease_id, deadline) {
            if let Some(at) = old.due_at() {
                self.due.remove(&(at, lease_id));
            }
        }
        if let Some(at) = deadline.due_at() {
            self.due.insert((at, lease_id));
        }
    }

    fn remove(&mut self, lease_id: LeaseId) {
        if let Some(old) = self.leases.remove(&lease_id) {
            if let Some(at) = old.due_at() {
                self.due.remove(&(at, lease_id));
            }
        }
    }

    /// Starts every lease of `state` not tracked yet at a full TTL from `now`.
    fn start_untracked(&mut self, state: &StateMachine, now: Instant) {
        for (lease_id, ttl_ms) in state.leases() {
            if !self.leases.contains_key(&lease_id) {
                self.set(
                    lease_id,
                    Deadline::starting(now, Duration::from_millis(ttl_ms)),
                );
            }
        }
    }
}

/// Lease id -> deadline, for the term this node leads.
#[derive(Default)]
pub struct LeaseClock {
    deadlines: Mutex<Deadlines>,
}

/// Leases whose deadline passed, decided by the clock of the leader of `term`.
#[derive(Debug, PartialEq, Eq)]
pub struct Expired {
    /// The term the decision belongs to.
    pub term: u64,
    /// The leases to expire.
    pub leases: Vec<LeaseId>,
}

impl LeaseClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, Deadlines> {
        self.deadlines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tracks leases created and forgets leases ended by applied events, while
    /// this node leads; does nothing otherwise.
    pub fn on_events(&self, events: &[Event]) {
        let now = Instant::now();
        let mut deadlines = None;
        for event in events {
            let lease_event = matches!(
                event.kind,
                EventKind::LeaseCreated { .. } | EventKind::LeaseEnded { .. }
            );
            if !lease_event {
                continue;
            }
            let deadlines = deadlines.get_or_insert_with(|| self.lock());
            if !deadlines.leading {
                return;
            }
            match &event.kind {
                EventKind::LeaseCreated {
                    lease_id, ttl_ms, ..
                } => {
                    let deadline = Deadline::starting(now, Duration::from_millis(*ttl_ms));
                    deadlines.set(*lease_id, deadline);
                }
                EventKind::LeaseEnded { lease_id, .. } => deadlines.remove(*lease_id),
                _ => {}
            }
        }
    }

    /// Restarts every live lease at a full TTL from now, for leadership `term`
    /// (on becoming leader, or leader again in a later term), and follows
    /// applied events from then on.
    ///
    /// Read `state` under the state's read lock held across this call: an
    /// event applied after that read is then seen by [`Self::on_events`] only
    /// once this returned, so it is not skipped as a follower's.
    pub fn reset_all(&self, state: &StateMachine, term: u64) {
        let now = Instant::now();
        let mut deadlines = self.lock();
        *deadlines = Deadlines {
            term,
            leading: true,
            ..Deadlines::default()
        };
        deadlines.start_untracked(state, now);
    }

    /// This node no longer leads: applied events and installed snapshots are
    /// ignored until the next [`Self::reset_all`]. The deadlines are kept as
    /// they are, so a keepalive that passed its leadership check just before
    /// still finds its lease.
    pub fn stand_down(&self) {
        self.lock().leading = false;
    }

    /// Brings the deadlines in step with `state` after a snapshot replaced the
    /// applied state (whose lease events the clock never saw), in the same
    /// term and under one lock: leases `state` no longer has are forgotten,
    /// leases it adds start at a full TTL, and leases already tracked keep
    /// their deadline, so an expiry already decided stays decided.
    ///
    /// Only on a node that leads, i.e. one elected while its install was
    /// being restored; that costs a pass over every lease. A follower, the
    /// usual installer, does nothing here.
    pub fn restart_from(&self, state: &StateMachine) {
        let now = Instant::now();
        let mut deadlines = self.lock();
        if !deadlines.leading {
            return;
        }
        let gone: Vec<LeaseId> = deadlines
            .leases
            .keys()
            .filter(|lease_id| state.lease_ttl_ms(**lease_id).is_none())
            .copied()
            .collect();
        for lease_id in gone {
            deadlines.remove(lease_id);
        }
        deadlines.start_untracked(state, now);
    }

    /// Moves a lease's deadline to a full TTL from now. `None` if unknown here or
    /// if its expiry has already been proposed: that proposal will commit, so a
    /// keepalive acknowledged now would promise a lease that is about to end.
    pub fn keep_alive(&self, lease_id: LeaseId) -> Option<Duration> {
        let mut deadlines = self.lock();
        let deadline = *deadlines.leases.get(&lease_id)?;
        if deadline.expiring {
            return None;
        }
        let moved = Deadline::starting(Instant::now(), deadline.ttl);
        deadlines.set(lease_id, moved);
        Some(deadline.ttl)
    }

    /// Time left before the lease expires, as this node's clock sees it.
    pub fn remaining(&self, lease_id: LeaseId) -> Option<Duration> {
        let deadlines = self.lock();
        let deadline = deadlines.leases.get(&lease_id)?;
        Some(deadline.at.saturating_duration_since(Instant::now()))
    }

    /// The term the deadlines belong to (0 before this node first led).
    pub fn term(&self) -> u64 {
        self.lock().term
    }

    /// At most `max` leases past their deadline whose expiry is not in flight
    /// (new ones, and failed proposals due for another try), the most overdue
    /// first, with the term of the decision; marks them as being expired. The
    /// rest stay due for the next call: the bound keeps an expiry storm (a
    /// fleet's leases ending in one second) from flooding the proposer.
    pub fn take_expired(&self, max: usize) -> Expired {
        let now = Instant::now();
        let mut deadlines = self.lock();
        let term = deadlines.term;
        let mut expired = Vec::new();
        while expired.len() < max {
            let Some(&(at, lease_id)) = deadlines.due.first() else {
                break;
            };
            if at > now {
                break;
            }
            deadlines.due.pop_first();
            if let Some(deadline) = deadlines.leases.get_mut(&lease_id) {
                deadline.expiring = true;
                deadline.retry_at = None;
            }
            expired.push(lease_id);
        }
        Expired {
            term,
            leases: expired,
        }
    }

    /// An expiry proposal decided in `term` failed: propose it again in a
    /// second. The lease stays refused to keepalives (the failed proposal may
    /// still commit); a new term starts over with full TTLs anyway, so a failure
    /// from an older term is ignored.
    pub fn expiry_failed(&self, term: u64, lease_id: LeaseId) {
        let mut deadlines = self.lock();
        if deadlines.term != term {
            return;
        }
        if let Some(&deadline) = deadlines.leases.get(&lease_id) {
            let retry = Deadline {
                retry_at: Some(Instant::now() + Duration::from_secs(1)),
                ..deadline
            };
            deadlines.set(lease_id, retry);
        }
    }

    /// Number of leases tracked.
    pub fn len(&self) -> usize {
        self.lock().leases.len()
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

    /// A clock of a node that leads term 0 of an empty state.
    fn leading_clock() -> LeaseClock {
        let clock = LeaseClock::default();
        clock.reset_all(&StateMachine::new(), 0);
        clock
    }

    /// A state holding leases `leases`, each with a TTL of one second.
    fn state_with_leases(leases: &[u128]) -> StateMachine {
        let ctx = ApplyContext {
            now_ms: 0,
            limits: Limits::default(),
            term: 1,
        };
        let mut state = StateMachine::new();
        for lease in leases {
            state.apply(
                &ctx,
                &Request::plain(Command::CreateLease {
                    lease_id: LeaseId(*lease),
                    ttl_ms: 1_000,
                    holder: String::new(),
                }),
            );
        }
        state
    }

    fn ended(lease: u128) -> Event {
        Event {
            revision: 2,
            kind: EventKind::LeaseEnded {
                lease_id: LeaseId(lease),
                holder: String::new(),
                reason: baton_core::EndReason::Revoked,
            },
        }
    }

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
        let clock = leading_clock();
        clock.on_events(&[created(1, 1_000)]);
        tokio::time::advance(Duration::from_millis(900)).await;
        assert!(clock.take_expired(usize::MAX).leases.is_empty());
        assert_eq!(
            clock.keep_alive(LeaseId(1)),
            Some(Duration::from_millis(1_000))
        );
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(clock.take_expired(usize::MAX).leases.is_empty());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(clock.take_expired(usize::MAX).leases, vec![LeaseId(1)]);
        assert!(
            clock.take_expired(usize::MAX).leases.is_empty(),
            "an expiry is proposed once"
        );
        clock.expiry_failed(0, LeaseId(1));
        assert!(
            clock.take_expired(usize::MAX).leases.is_empty(),
            "retried after a pause"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(clock.take_expired(usize::MAX).leases, vec![LeaseId(1)]);
    }

    /// Review of the deferred snapshot restore: a node that leads while its
    /// restore runs brings the snapshot's leases in without giving up its
    /// term or an expiry it already decided.
    #[tokio::test(start_paused = true)]
    async fn an_installed_state_keeps_the_term_and_decided_expiries() {
        let clock = LeaseClock::default();
        clock.reset_all(&state_with_leases(&[1, 2]), 5);
        tokio::time::advance(Duration::from_millis(1_001)).await;
        let decided = clock.take_expired(usize::MAX);
        assert_eq!(decided.leases, vec![LeaseId(1), LeaseId(2)]);

        clock.restart_from(&state_with_leases(&[1, 3]));
        assert_eq!(clock.term(), 5, "the term is the one this node leads");
        assert_eq!(
            clock.keep_alive(LeaseId(1)),
            None,
            "its expiry is in flight"
        );
        assert_eq!(clock.remaining(LeaseId(2)), None, "gone with the snapshot");
        assert_eq!(
            clock.remaining(LeaseId(3)),
            Some(Duration::from_millis(1_000)),
            "new in the snapshot: a full TTL"
        );
        assert_eq!(clock.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_leader_restarts_every_lease_at_a_full_ttl() {
        let mut state = StateMachine::new();
        let ctx = ApplyContext {
            now_ms: 0,
            limits: Limits::default(),
            term: 1,
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
        clock.reset_all(&state, 3);
        assert_eq!(
            clock.remaining(LeaseId(7)),
            Some(Duration::from_millis(2_000))
        );
        tokio::time::advance(Duration::from_millis(1_999)).await;
        assert!(clock.take_expired(usize::MAX).leases.is_empty());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(clock.take_expired(usize::MAX).leases, vec![LeaseId(7)]);
    }

    #[tokio::test(start_paused = true)]
    async fn ended_leases_are_forgotten() {
        let clock = leading_clock();
        clock.on_events(&[created(1, 1_000)]);
        clock.on_events(&[ended(1)]);
        assert!(clock.is_empty());
        assert_eq!(clock.keep_alive(LeaseId(1)), None);
    }

    /// Found by the chaos harness (seed 6, leader SIGSTOPped while a renew
    /// waited): a keepalive arriving after the expiry was proposed used to
    /// "rescue" the deadline and answer 200, then the expiry committed.
    #[tokio::test(start_paused = true)]
    async fn a_keepalive_after_the_expiry_was_proposed_is_refused() {
        let clock = leading_clock();
        clock.on_events(&[created(1, 1_000)]);
        tokio::time::advance(Duration::from_millis(1_001)).await;
        assert_eq!(clock.take_expired(usize::MAX).leases, vec![LeaseId(1)]);
        assert_eq!(
            clock.keep_alive(LeaseId(1)),
            None,
            "its expiry is in flight"
        );
        // A failed proposal may still commit: the lease stays refused, and its
        // expiry is proposed again a second later.
        clock.expiry_failed(0, LeaseId(1));
        assert_eq!(clock.keep_alive(LeaseId(1)), None);
        assert!(clock.take_expired(usize::MAX).leases.is_empty());
        tokio::time::advance(Duration::from_millis(1_001)).await;
        assert_eq!(clock.take_expired(usize::MAX).leases, vec![LeaseId(1)]);
    }

    /// Chaos finding 7: an expiry decided in one term must never be applied in
    /// another, and a failure reported for it must not touch the new term's
    /// deadlines.
    #[tokio::test(start_paused = true)]
    async fn an_expiry_carries_the_term_of_its_decision() {
        let mut state = StateMachine::new();
        let ctx = ApplyContext {
            now_ms: 0,
            limits: Limits::default(),
            term: 4,
        };
        state.apply(
            &ctx,
            &Request::plain(Command::CreateLease {
                lease_id: LeaseId(1),
                ttl_ms: 1_000,
                holder: String::new(),
            }),
        );
        let clock = LeaseClock::default();
        clock.reset_all(&state, 4);
        tokio::time::advance(Duration::from_millis(1_001)).await;
        let decided = clock.take_expired(usize::MAX);
        assert_eq!(
            decided,
            Expired {
                term: 4,
                leases: vec![LeaseId(1)]
            }
        );
        // Leader again in term 6: the lease restarts, not expiring.
        clock.reset_all(&state, 6);
        assert_eq!(clock.term(), 6);
        clock.expiry_failed(decided.term, LeaseId(1));
        assert_eq!(
            clock.keep_alive(LeaseId(1)),
            Some(Duration::from_millis(1_000)),
            "the old term's failure leaves the new deadline alone"
        );
        // And the log refuses the old decision in an entry of the new term.
        let late = state.apply(
            &ApplyContext { term: 6, ..ctx },
            &Request::plain(Command::ExpireLeaseOfTerm {
                lease_id: LeaseId(1),
                term: decided.term,
            }),
        );
        assert!(
            matches!(
                late.result,
                Err(baton_core::CoreError::ExpiryOutdated { .. })
            ),
            "{late:?}"
        );
        assert_eq!(state.lease_ttl_ms(LeaseId(1)), Some(1_000));
    }

    /// Issue 19: a tick takes what is due in deadline order, at most `max` of
    /// it, and leaves the rest due for the next tick.
    #[tokio::test(start_paused = true)]
    async fn a_tick_takes_at_most_max_leases_the_most_overdue_first() {
        let clock = leading_clock();
        let events: Vec<Event> = (1..=5)
            .map(|id| created(id, 1_000 + 10 * (6 - id) as u64))
            .collect();
        clock.on_events(&events);
        tokio::time::advance(Duration::from_millis(2_000)).await;
        assert_eq!(clock.take_expired(2).leases, vec![LeaseId(5), LeaseId(4)]);
        assert_eq!(
            clock.take_expired(10).leases,
            vec![LeaseId(3), LeaseId(2), LeaseId(1)]
        );
        assert!(clock.take_expired(10).leases.is_empty());
        assert_eq!(clock.take_expired(0).leases, Vec::<LeaseId>::new());
    }

    /// A keepalive moves the lease to its new place in the order: its old
    /// deadline no longer counts.
    #[tokio::test(start_paused = true)]
    async fn a_kept_alive_lease_is_due_at_its_new_deadline_only() {
        let clock = leading_clock();
        clock.on_events(&[created(1, 1_000), created(2, 1_500)]);
        tokio::time::advance(Duration::from_millis(900)).await;
        assert!(clock.keep_alive(LeaseId(1)).is_some());
        tokio::time::advance(Duration::from_millis(700)).await;
        assert_eq!(clock.take_expired(10).leases, vec![LeaseId(2)]);
        tokio::time::advance(Duration::from_millis(299)).await;
        assert!(clock.take_expired(10).leases.is_empty());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(clock.take_expired(10).leases, vec![LeaseId(1)]);
        // An ended lease leaves the order too.
        clock.on_events(&[created(3, 1_000)]);
        clock.on_events(&[ended(3)]);
        tokio::time::advance(Duration::from_millis(2_000)).await;
        assert!(clock.take_expired(10).leases.is_empty());
    }

    /// Issue 19, session 64: a follower's clock is never read, so it skips the
    /// bookkeeping; above all an installed snapshot's 100,000 leases, which
    /// it used to insert under the state's write lock.
    #[tokio::test(start_paused = true)]
    async fn a_clock_that_does_not_lead_ignores_events_and_installed_states() {
        let clock = LeaseClock::default();
        clock.on_events(&[created(1, 1_000)]);
        clock.restart_from(&state_with_leases(&[2, 3]));
        assert!(clock.is_empty(), "a follower tracks nothing");

        clock.reset_all(&state_with_leases(&[2, 3]), 4);
        assert_eq!(clock.len(), 2, "a new leader starts from the state");
        clock.on_events(&[created(4, 1_000), ended(2)]);
        assert_eq!(clock.remaining(LeaseId(4)), Some(Duration::from_secs(1)));
        assert_eq!(clock.remaining(LeaseId(2)), None);
    }

    /// After stepping down, events are ignored and the deadlines stay as they
    /// were (a keepalive that passed its leadership check still finds its
    /// lease); leading again starts over from the state.
    #[tokio::test(start_paused = true)]
    async fn a_clock_that_stood_down_keeps_its_deadlines_until_it_leads_again() {
        let clock = leading_clock();
        clock.on_events(&[created(1, 1_000), created(2, 1_000)]);
        clock.stand_down();
        clock.on_events(&[created(3, 1_000), ended(1)]);
        clock.restart_from(&state_with_leases(&[5]));
        assert_eq!(clock.len(), 2);
        assert_eq!(
            clock.keep_alive(LeaseId(1)),
            Some(Duration::from_secs(1)),
            "kept as it was"
        );
        assert_eq!(clock.remaining(LeaseId(3)), None, "not followed");

        clock.reset_all(&state_with_leases(&[5]), 7);
        assert_eq!(clock.len(), 1);
        assert_eq!(clock.term(), 7);
        clock.on_events(&[ended(5)]);
        assert!(clock.is_empty(), "followed again");
    }
}
