//! Lock rules: what a lock adds to the shared waiting-acquire algorithm
//! ([`crate::queueing`]): the holder label, release by token, and the lock delay
//! that keeps a successor out after an expiry or a force-release. A lock is held
//! by one exclusive holder or by any number of shared ones; each holding is
//! released, renewed and expired on its own.

use crate::error::CoreError;
use crate::ids::LeaseId;
use crate::lease::Attachment;
use crate::limits::Limits;
use crate::machine::{check_holder, StateMachine};
use crate::name::validate_name;
use crate::outcome::{EndReason, Event, EventKind};
use crate::queueing::{Claim, SlotKind};
use crate::reply::Reply;

impl StateMachine {
    /// Acquires a lock exclusively or queues for it ([`StateMachine::claim`])
    /// after checking what only locks have: the holder label and the lock delay.
    pub(crate) fn acquire(
        &mut self,
        limits: &Limits,
        claim: Claim<'_>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        debug_assert_eq!(claim.kind, SlotKind::Lock);
        validate_name(claim.name)?;
        check_holder(limits, claim.holder)?;
        if claim.lock_delay_ms > limits.max_lock_delay_ms {
            return Err(CoreError::InvalidLockDelay {
                lock_delay_ms: claim.lock_delay_ms,
                max_ms: limits.max_lock_delay_ms,
            });
        }
        self.claim(limits, claim, events)
    }

    /// Releases the holding of `(lease_id, token)`.
    pub(crate) fn release(
        &mut self,
        name: &str,
        lease_id: LeaseId,
        token: u64,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        validate_name(name)?;
        if !self.leases.contains_key(&lease_id) {
            return Err(CoreError::LeaseNotFound);
        }
        let slot = self.locks.get(name);
        if !slot.is_some_and(|s| s.held_with(lease_id, token)) {
            return Err(CoreError::LockLost {
                current_token: slot.and_then(|s| s.newest_token()),
            });
        }
        self.end_lock_holding(name, lease_id, EndReason::Released, events);
        self.detach(lease_id, &Attachment::Lock(name.to_owned()), events);
        Ok(Reply::LockReleased)
    }

    /// Ends the holding of `lease_id` (the caller detaches it from its lease),
    /// starts the lock delay if its lease expired, and hands the lock on.
    pub(crate) fn end_lock_holding(
        &mut self,
        name: &str,
        lease_id: LeaseId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) {
        if self.take_lock_holding(name, lease_id, reason, events) {
            self.promote_next(SlotKind::Lock, name, events);
        }
    }

    /// Ends the holding of `lease_id` and starts the lock delay if its lease
    /// expired, without handing the lock on: an ending lease hands on only
    /// once all of its holdings have ended, so that no grant sees it half gone.
    ///
    /// Returns whether the lock's slot is left (others hold it, wait for it or
    /// its delay runs), so that its line may need handing on. A slot left with
    /// nothing is forgotten here, in the lookup that found it: an expiry storm
    /// ends millions of holdings, and each saved walk of the lock map counts.
    pub(crate) fn take_lock_holding(
        &mut self,
        name: &str,
        lease_id: LeaseId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) -> bool {
        let clock = self.clock_ms;
        let Some(mut slot) = self.locks.get_mut(name) else {
            return false;
        };
        let Some(holding) = slot.remove_holder(lease_id) else {
            return true;
        };
        // The holder may still be running after an expiry or a force-release:
        // the delay keeps its successors out meanwhile (a later delay of
        // another shared holder extends it).
        let stopped_unseen = matches!(reason, EndReason::Expired | EndReason::ForceReleased);
        if stopped_unseen && holding.lock_delay_ms > 0 {
            let until = clock.saturating_add(holding.lock_delay_ms);
            if slot.delay_until_ms.is_none_or(|current| current < until) {
                if let Some(current) = slot.delay_until_ms.replace(until) {
                    self.delayed.remove(&(current, name.to_owned()));
                }
                self.delayed.insert((until, name.to_owned()));
            }
        }
        let line_left = !slot.is_idle();
        // The slot's change is counted before anything else looks at the state.
        drop(slot);
        if !line_left {
            self.locks.remove(name);
        }
        self.emit(
            events,
            EventKind::LockReleased {
                name: name.to_owned(),
                token: holding.token,
                reason,
            },
        );
        line_left
    }

    /// Ends a lock delay that has passed, handing the lock to the waiters in line.
    fn settle_lock(&mut self, name: &str, events: &mut Vec<Event>) {
        let clock = self.clock_ms;
        let Some(mut slot) = self.locks.get_mut(name) else {
            return;
        };
        match slot.delay_until_ms {
            Some(until) if until <= clock => {
                slot.delay_until_ms = None;
                drop(slot);
                self.delayed.remove(&(until, name.to_owned()));
                self.promote_next(SlotKind::Lock, name, events);
            }
            _ => {}
        }
    }

    /// Settles every lock whose delay has passed (every apply starts with this).
    pub(crate) fn settle_due_delays(&mut self, events: &mut Vec<Event>) {
        let clock = self.clock_ms;
        if self
            .delayed
            .get_min()
            .is_none_or(|(until, _)| *until > clock)
        {
            return;
        }
        let due: Vec<String> = self
            .delayed
            .iter()
            .take_while(|(until, _)| *until <= clock)
            .map(|(_, name)| name.clone())
            .collect();
        for name in due {
            self.settle_lock(&name, events);
        }
    }
}
