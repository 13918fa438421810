//! Exclusive lock rules: acquire or queue, release, cancel a wait, lock delay and
//! the strictly-FIFO handoff.

use crate::command::LeaseRef;
use crate::error::CoreError;
use crate::ids::{LeaseId, WaiterId};
use crate::lease::{Attachment, Leases};
use crate::limits::Limits;
use crate::machine::{check_holder, StateMachine};
use crate::name::validate_name;
use crate::outcome::{EndReason, Event, EventKind, Grant, Reply};
use crate::slot::{Holding, Slot, Waiting};

impl StateMachine {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire(
        &mut self,
        limits: &Limits,
        name: &str,
        lease: &LeaseRef,
        holder: Option<&str>,
        waiter: Option<WaiterId>,
        lock_delay_ms: u64,
        idempotency: Option<(String, String)>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        validate_name(name)?;
        check_holder(limits, holder)?;
        if lock_delay_ms > limits.max_lock_delay_ms {
            return Err(CoreError::InvalidLockDelay {
                lock_delay_ms,
                max_ms: limits.max_lock_delay_ms,
            });
        }
        let lease_id = lease.id();
        if let LeaseRef::Existing(id) = lease {
            if !self.leases.contains_key(id) {
                return Err(CoreError::LeaseNotFound);
            }
        }
        if let Some(slot) = self.locks.get(name) {
            // Retries are safe: the same lease gets its grant or its place back.
            if let Some(held) = slot.held_by(lease_id) {
                return Ok(Reply::LockGranted(Grant {
                    name: name.to_owned(),
                    token: held.token,
                    lease_id,
                    ttl_ms: self.lease_ttl(lease_id),
                    holder: held.holder(&self.leases),
                }));
            }
            if let (Some(_), Some(queued)) = (waiter, slot.queued_by(lease_id)) {
                return Ok(queued_reply(slot, queued.waiter, lease_id, &self.leases));
            }
        }
        if let Some(slot) = self
            .locks
            .get(name)
            .filter(|slot| !slot.grantable() || !slot.queue.is_empty())
        {
            let Some(waiter) = waiter else {
                return Err(lock_held(slot, &self.leases));
            };
            if slot.queue.len() >= limits.max_waiters_per_lock as usize {
                return Err(CoreError::QuotaExceeded {
                    what: format!("a lock has at most {} waiters", limits.max_waiters_per_lock),
                });
            }
            self.check_lease_for_holding(limits, lease)?;
            let holder = self.materialize_lease(lease, holder, events);
            let slot = self.locks.entry(name.to_owned()).or_default();
            slot.queue.push_back(Waiting {
                waiter,
                lease_id,
                holder,
                lock_delay_ms,
                value: String::new(),
                idempotency,
            });
            let reply = queued_reply(slot, waiter, lease_id, &self.leases);
            self.attach(lease_id, Attachment::LockWait(name.to_owned(), waiter));
            self.emit(
                events,
                EventKind::LockQueued {
                    name: name.to_owned(),
                    waiter,
                },
            );
            return Ok(reply);
        }
        self.check_lease_for_holding(limits, lease)?;
        let holder = self.materialize_lease(lease, holder, events);
        let grant = self.grant_lock(name, lease_id, holder, lock_delay_ms, None, events);
        self.attach(lease_id, Attachment::Lock(name.to_owned()));
        Ok(Reply::LockGranted(grant))
    }

    fn grant_lock(
        &mut self,
        name: &str,
        lease_id: LeaseId,
        holder: String,
        lock_delay_ms: u64,
        waiter: Option<WaiterId>,
        events: &mut Vec<Event>,
    ) -> Grant {
        let token = self.next_revision();
        let stored_holder = Holding::holder_to_store(&self.leases, lease_id, &holder);
        let grant = Grant {
            name: name.to_owned(),
            token,
            lease_id,
            ttl_ms: self.lease_ttl(lease_id),
            holder,
        };
        let slot = self.locks.entry(name.to_owned()).or_default();
        slot.holding = Some(Holding {
            lease_id,
            token,
            holder: stored_holder,
            lock_delay_ms,
            value: String::new(),
            modified_revision: token,
        });
        let emitted = self.emit(
            events,
            EventKind::LockAcquired {
                grant: grant.clone(),
                waiter,
            },
        );
        debug_assert_eq!(emitted, token);
        grant
    }

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
                current_token: slot.and_then(|s| s.holding.as_ref()).map(|h| h.token),
            });
        }
        self.end_lock_holding(name, EndReason::Released, events);
        self.detach(lease_id, &Attachment::Lock(name.to_owned()), events);
        Ok(Reply::LockReleased)
    }

    /// Ends the current holding (the caller detaches it from its lease), starts
    /// the lock delay if its lease expired, and hands the lock on.
    pub(crate) fn end_lock_holding(
        &mut self,
        name: &str,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) {
        let clock = self.clock_ms;
        let Some(slot) = self.locks.get_mut(name) else {
            return;
        };
        let Some(holding) = slot.holding.take() else {
            return;
        };
        let mut delayed_until = None;
        // The holder may still be running after an expiry or a force-release:
        // the delay keeps its successor out meanwhile.
        let stopped_unseen = matches!(reason, EndReason::Expired | EndReason::ForceReleased);
        if stopped_unseen && holding.lock_delay_ms > 0 {
            let until = clock.saturating_add(holding.lock_delay_ms);
            slot.delay_until_ms = Some(until);
            delayed_until = Some(until);
        }
        if let Some(until) = delayed_until {
            self.delayed.insert((until, name.to_owned()));
        }
        self.emit(
            events,
            EventKind::LockReleased {
                name: name.to_owned(),
                token: holding.token,
                reason,
            },
        );
        self.hand_off_lock(name, events);
    }

    /// Grants a free lock to the first waiter in line, exactly one. Every queued
    /// waiter's lease is alive: a lease's waits leave their queues when it ends.
    fn hand_off_lock(&mut self, name: &str, events: &mut Vec<Event>) {
        let Some(slot) = self.locks.get_mut(name) else {
            return;
        };
        if slot.grantable() {
            if let Some(next) = slot.queue.pop_front() {
                let grant = self.grant_lock(
                    name,
                    next.lease_id,
                    next.holder,
                    next.lock_delay_ms,
                    Some(next.waiter),
                    events,
                );
                self.replace_attachment(
                    next.lease_id,
                    &Attachment::LockWait(name.to_owned(), next.waiter),
                    Attachment::Lock(name.to_owned()),
                );
                self.record_wait_end(next.idempotency, Ok(Reply::LockGranted(grant)));
            }
        }
        if self.locks.get(name).is_some_and(|slot| slot.is_idle()) {
            self.locks.remove(name);
        }
    }

    pub(crate) fn cancel_wait(
        &mut self,
        name: &str,
        waiter: WaiterId,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        let lease_id = self
            .locks
            .get(name)
            .and_then(|slot| slot.queue.iter().find(|w| w.waiter == waiter))
            .map(|w| w.lease_id)
            .ok_or(CoreError::WaiterNotFound)?;
        self.drop_lock_waiter(name, waiter, EndReason::Released, events);
        self.detach(
            lease_id,
            &Attachment::LockWait(name.to_owned(), waiter),
            events,
        );
        Ok(Reply::WaitCancelled)
    }

    /// Takes a waiter out of a lock's queue (its lease detaches it, or is gone).
    pub(crate) fn drop_lock_waiter(
        &mut self,
        name: &str,
        waiter: WaiterId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) {
        let Some(slot) = self.locks.get_mut(name) else {
            return;
        };
        let Some(removed) = slot.remove_waiter(waiter) else {
            return;
        };
        let held = lock_held(slot, &self.leases);
        if slot.is_idle() {
            self.locks.remove(name);
        }
        self.emit(
            events,
            EventKind::LockWaitEnded {
                name: name.to_owned(),
                waiter,
                reason,
            },
        );
        let final_answer = match reason {
            EndReason::Released => Err(held),
            // Only holdings are force-released, never a wait: grouped for completeness.
            EndReason::Revoked | EndReason::Expired | EndReason::ForceReleased => {
                Err(CoreError::LeaseNotFound)
            }
        };
        self.record_wait_end(removed.idempotency, final_answer);
    }

    /// Ends a lock delay that has passed, handing the lock to its next waiter.
    fn settle_lock(&mut self, name: &str, events: &mut Vec<Event>) {
        let clock = self.clock_ms;
        let Some(slot) = self.locks.get_mut(name) else {
            return;
        };
        match slot.delay_until_ms {
            Some(until) if until <= clock => {
                slot.delay_until_ms = None;
                self.delayed.remove(&(until, name.to_owned()));
                self.hand_off_lock(name, events);
            }
            _ => {}
        }
    }

    /// Settles every lock whose delay has passed (every apply starts with this).
    pub(crate) fn settle_due_delays(&mut self, events: &mut Vec<Event>) {
        let clock = self.clock_ms;
        if self.delayed.first().is_none_or(|(until, _)| *until > clock) {
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

fn lock_held(slot: &Slot, leases: &Leases) -> CoreError {
    CoreError::LockHeld {
        holder: slot.holding.as_ref().map(|h| h.holder(leases)),
        token: slot.holding.as_ref().map(|h| h.token),
    }
}

fn queued_reply(slot: &Slot, waiter: WaiterId, lease_id: LeaseId, leases: &Leases) -> Reply {
    Reply::LockQueued {
        waiter,
        lease_id,
        holder: slot.holding.as_ref().map(|h| h.holder(leases)),
        token: slot.holding.as_ref().map(|h| h.token),
    }
}
