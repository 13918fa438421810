//! Multi-acquire: one request for several locks (each exclusive or shared),
//! granted all together or not at all, with one lease and one wait.
//!
//! A waiting multi-acquire takes a place at the back of every line it needs, in
//! the same apply, and holds once it may hold in each of them (see
//! [`crate::queueing`]). Because every line is in arrival order and a request
//! joins all of its lines at once, the oldest waiting request is never behind a
//! younger one anywhere, so it holds as soon as the holders ahead of it leave:
//! two clients asking for `{a, b}` and `{b, a}` can never deadlock.

use serde::{Deserialize, Serialize};

use crate::command::{LeaseRef, LockRequest};
use crate::error::CoreError;
use crate::ids::{LeaseId, WaiterId};
use crate::lease::Attachment;
use crate::limits::Limits;
use crate::machine::{check_holder, StateMachine};
use crate::name::validate_name;
use crate::outcome::{EndReason, Event, EventKind};
use crate::queueing::{wait_end_answer, SlotKind, Taker};
use crate::reply::{HeldLock, Reply};
use crate::slot::{LockMode, Waiting};

/// Most locks one multi-acquire may name.
pub const MAX_LOCKS_PER_ACQUIRE: usize = 32;

/// A multi-acquire waiting in several lines.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Group {
    pub lease_id: LeaseId,
    /// The locks, in the order the request named them.
    pub locks: Vec<LockRequest>,
    /// Where its final answer is remembered.
    pub idempotency: Option<(String, String)>,
}

/// What a multi-acquire asks for.
pub(crate) struct GroupClaim<'a> {
    pub locks: &'a [LockRequest],
    pub lease: &'a LeaseRef,
    pub holder: Option<&'a str>,
    pub lock_delay_ms: u64,
    pub waiter: Option<WaiterId>,
    pub idempotency: Option<(String, String)>,
}

/// Checks the list of a multi-acquire: 1..=[`MAX_LOCKS_PER_ACQUIRE`] valid,
/// distinct names.
pub fn check_lock_list(locks: &[LockRequest]) -> Result<(), CoreError> {
    let refuse = |reason: String| Err(CoreError::InvalidLockList { reason });
    if locks.is_empty() {
        return refuse("the list of locks is empty".into());
    }
    if locks.len() > MAX_LOCKS_PER_ACQUIRE {
        return refuse(format!(
            "at most {MAX_LOCKS_PER_ACQUIRE} locks per request, got {}",
            locks.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for lock in locks {
        validate_name(&lock.name)?;
        if !seen.insert(lock.name.as_str()) {
            return refuse(format!("'{}' is named twice", lock.name));
        }
    }
    Ok(())
}

impl StateMachine {
    /// Acquires every lock of the list together, queues for all of them, or
    /// refuses. A lease that already holds every one gets its grants back (a
    /// retry); one that holds only some is refused (it would wait for itself).
    pub(crate) fn claim_group(
        &mut self,
        limits: &Limits,
        claim: GroupClaim<'_>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        let GroupClaim {
            locks,
            lease,
            holder,
            lock_delay_ms,
            waiter,
            idempotency,
        } = claim;
        let lease_id = lease.id();
        if let LeaseRef::Existing(id) = lease {
            if !self.leases.contains_key(id) {
                return Err(CoreError::LeaseNotFound);
            }
        }
        if let Some(reply) = self.retried_group(locks, lease_id, waiter.is_some())? {
            return Ok(reply);
        }
        let blocked = locks.iter().find(|lock| {
            self.locks
                .get(&lock.name)
                .is_some_and(|slot| !slot.admits_newcomer(lock.mode, 1))
        });
        if let Some(blocked) = blocked {
            let Some(waiter) = waiter else {
                return Err(self.lock_blocking(&blocked.name));
            };
            for lock in locks {
                self.check_room_in_line(SlotKind::Lock, &lock.name, limits)?;
            }
            self.check_lease_for_holding(limits, lease, locks.len())?;
            let holder = self.materialize_lease(lease, holder, events);
            let reply = self.queued_group(&blocked.name, waiter, lease_id);
            for lock in locks {
                let mut slot = self.locks.get_or_default(&lock.name);
                slot.queue.push_back(Waiting {
                    waiter,
                    lease_id,
                    holder: holder.clone(),
                    lock_delay_ms,
                    value: String::new(),
                    idempotency: None,
                    mode: lock.mode,
                    permits: 1,
                });
                drop(slot);
                self.attach(lease_id, Attachment::LockWait(lock.name.clone(), waiter));
                let name = lock.name.clone();
                self.emit(events, EventKind::LockQueued { name, waiter });
            }
            self.groups.insert(
                waiter,
                Group {
                    lease_id,
                    locks: locks.to_vec(),
                    idempotency,
                },
            );
            return Ok(reply);
        }
        self.check_lease_for_holding(limits, lease, locks.len())?;
        let holder = self.materialize_lease(lease, holder, events);
        let mut held = Vec::with_capacity(locks.len());
        for lock in locks {
            let taker = Taker {
                lease_id,
                holder: holder.clone(),
                lock_delay_ms,
                value: "",
                mode: lock.mode,
                permits: 1,
            };
            let (grant, _) = self.hold(SlotKind::Lock, &lock.name, taker, 0, None, events);
            self.attach(lease_id, Attachment::Lock(lock.name.clone()));
            held.push(HeldLock {
                grant,
                mode: lock.mode,
            });
        }
        Ok(Reply::LocksGranted(held))
    }

    /// The answer to a retry: every lock already held by this lease (its
    /// grants), or a place already taken in one of the lines (that request keeps
    /// it; a try is refused). Refuses a lease that holds only some of the locks.
    fn retried_group(
        &self,
        locks: &[LockRequest],
        lease_id: LeaseId,
        may_wait: bool,
    ) -> Result<Option<Reply>, CoreError> {
        let mut held = Vec::new();
        for lock in locks {
            let Some(slot) = self.locks.get(&lock.name) else {
                continue;
            };
            if let Some(holding) = slot.held_by(lease_id) {
                // An exclusive holding answers a shared request too; a shared
                // one never answers an exclusive request (no upgrades).
                if holding.mode == LockMode::Shared && lock.mode == LockMode::Exclusive {
                    return Err(self.lock_blocking(&lock.name));
                }
                held.push(HeldLock {
                    grant: self.grant_of(&lock.name, holding),
                    mode: holding.mode,
                });
            } else if let Some(queued) = slot.queued_by(lease_id) {
                // Its place in line answers it; a try of it is refused (a lease
                // never holds a lock beside its own place in that line).
                if !may_wait {
                    return Err(self.lock_blocking(&lock.name));
                }
                return Ok(Some(self.queued_group(&lock.name, queued.waiter, lease_id)));
            }
        }
        match held.len() {
            0 => Ok(None),
            n if n == locks.len() => Ok(Some(Reply::LocksGranted(held))),
            _ => {
                let name = &held[0].grant.name;
                Err(self.lock_blocking(name))
            }
        }
    }

    /// Who holds lock `name`, as the refusal of a multi-acquire it blocks.
    fn lock_blocking(&self, name: &str) -> CoreError {
        let slot = self.locks.get(name);
        let first = slot.and_then(|s| s.first_holder());
        CoreError::LocksHeld {
            name: name.to_owned(),
            holder: first.map(|h| h.holder(&self.leases)),
            token: first.map(|h| h.token),
        }
    }

    fn queued_group(&self, blocking: &str, waiter: WaiterId, lease_id: LeaseId) -> Reply {
        let first = self.locks.get(blocking).and_then(|s| s.first_holder());
        Reply::LocksQueued {
            waiter,
            lease_id,
            name: blocking.to_owned(),
            holder: first.map(|h| h.holder(&self.leases)),
            token: first.map(|h| h.token),
        }
    }

    /// Grants a waiting multi-acquire if it may hold in every one of its lines.
    pub(crate) fn grant_group_if_ready(&mut self, waiter: WaiterId, events: &mut Vec<Event>) {
        let Some(group) = self.groups.get(&waiter) else {
            return;
        };
        let ready = group.locks.iter().all(|lock| {
            self.locks
                .get(&lock.name)
                .is_some_and(|slot| slot.admits_queued(waiter))
        });
        if !ready {
            return;
        }
        let Some(group) = self.groups.remove(&waiter) else {
            return;
        };
        let mut held = Vec::with_capacity(group.locks.len());
        for lock in &group.locks {
            let Some(place) = self
                .locks
                .get_mut(&lock.name)
                .and_then(|mut slot| slot.remove_waiter(waiter))
            else {
                continue;
            };
            let taker = Taker {
                lease_id: place.lease_id,
                holder: place.holder,
                lock_delay_ms: place.lock_delay_ms,
                value: "",
                mode: place.mode,
                permits: 1,
            };
            let (grant, _) = self.hold(SlotKind::Lock, &lock.name, taker, 0, Some(waiter), events);
            self.replace_attachment(
                group.lease_id,
                &Attachment::LockWait(lock.name.clone(), waiter),
                Attachment::Lock(lock.name.clone()),
            );
            held.push(HeldLock {
                grant,
                mode: lock.mode,
            });
        }
        self.record_wait_end(group.idempotency, Ok(Reply::LocksGranted(held)));
    }

    /// Takes a multi-acquire out of every line it waits in; returns those lines.
    pub(crate) fn drop_group(
        &mut self,
        waiter: WaiterId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) -> Vec<(SlotKind, String)> {
        let Some(group) = self.groups.remove(&waiter) else {
            return Vec::new();
        };
        let mut left = Vec::with_capacity(group.locks.len());
        for lock in &group.locks {
            let removed = self
                .locks
                .get_mut(&lock.name)
                .and_then(|mut slot| slot.remove_waiter(waiter));
            if removed.is_some() {
                let name = lock.name.clone();
                self.emit(
                    events,
                    EventKind::LockWaitEnded {
                        name: name.clone(),
                        waiter,
                        reason,
                    },
                );
                left.push((SlotKind::Lock, name));
            }
        }
        let refusal = group
            .locks
            .iter()
            .find(|lock| {
                self.locks
                    .get(&lock.name)
                    .is_some_and(|slot| !slot.admits_newcomer(lock.mode, 1))
            })
            .map_or(CoreError::WaiterNotFound, |lock| {
                self.lock_blocking(&lock.name)
            });
        self.record_wait_end(group.idempotency, wait_end_answer(reason, refusal));
        left
    }

    /// Validates and runs an `AcquireLocks` command.
    pub(crate) fn acquire_locks(
        &mut self,
        limits: &Limits,
        claim: GroupClaim<'_>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        check_lock_list(claim.locks)?;
        check_holder(limits, claim.holder)?;
        if claim.lock_delay_ms > limits.max_lock_delay_ms {
            return Err(CoreError::InvalidLockDelay {
                lock_delay_ms: claim.lock_delay_ms,
                max_ms: limits.max_lock_delay_ms,
            });
        }
        self.claim_group(limits, claim, events)
    }
}
