//! The one waiting-acquire algorithm: hold a slot, or queue for it in strict FIFO
//! order, and hand it to the head of the line when it frees up.
//!
//! A lock and an election are the same contest: one lease holds the slot at a
//! time, the others wait in line, a retry by the same lease gets its grant or its
//! place back. What differs (the map the slot lives in, the replies, events and
//! lease attachments, the election's published value, the lock's delay) is told by
//! [`SlotKind`], so a rule fixed here is fixed for both.

use std::collections::BTreeMap;

use crate::command::LeaseRef;
use crate::error::CoreError;
use crate::ids::{LeaseId, WaiterId};
use crate::lease::{Attachment, Leases};
use crate::limits::Limits;
use crate::machine::StateMachine;
use crate::outcome::{EndReason, Event, EventKind, Grant};
use crate::reply::Reply;
use crate::slot::{Holding, Slot, Waiting};

/// Which kind of slot a claim is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotKind {
    /// An exclusive lock.
    Lock,
    /// An election: the holder leads and publishes a value.
    Election,
}

/// A request to hold a slot, or to queue for it when `waiter` is set.
pub(crate) struct Claim<'a> {
    pub kind: SlotKind,
    pub name: &'a str,
    pub lease: &'a LeaseRef,
    /// The holder's label (a lock's holder, an election's candidate); `None`
    /// takes the lease's.
    pub holder: Option<&'a str>,
    /// Published with an election's leadership; empty for a lock.
    pub value: &'a str,
    /// The lock delay kept with the holding; 0 for an election.
    pub lock_delay_ms: u64,
    /// Set when the request may wait in line.
    pub waiter: Option<WaiterId>,
    /// Where a queued request's final answer is remembered.
    pub idempotency: Option<(String, String)>,
}

impl<'a> Claim<'a> {
    /// A claim on lock `name`.
    pub fn lock(
        name: &'a str,
        lease: &'a LeaseRef,
        holder: Option<&'a str>,
        lock_delay_ms: u64,
        waiter: Option<WaiterId>,
    ) -> Self {
        Claim {
            kind: SlotKind::Lock,
            name,
            lease,
            holder,
            value: "",
            lock_delay_ms,
            waiter,
            idempotency: None,
        }
    }

    /// A candidacy in election `name`, publishing `value` once elected.
    pub fn election(
        name: &'a str,
        lease: &'a LeaseRef,
        candidate: &'a str,
        value: &'a str,
        waiter: Option<WaiterId>,
    ) -> Self {
        Claim {
            kind: SlotKind::Election,
            name,
            lease,
            holder: Some(candidate),
            value,
            lock_delay_ms: 0,
            waiter,
            idempotency: None,
        }
    }

    /// The same claim, its wait's final answer remembered under `idempotency`.
    pub fn remembered_as(self, idempotency: Option<(String, String)>) -> Self {
        Claim {
            idempotency,
            ..self
        }
    }
}

/// Who takes a slot.
struct Taker<'a> {
    lease_id: LeaseId,
    holder: String,
    lock_delay_ms: u64,
    value: &'a str,
}

impl SlotKind {
    fn slots(self, sm: &StateMachine) -> &BTreeMap<String, Box<Slot>> {
        match self {
            SlotKind::Lock => &sm.locks,
            SlotKind::Election => &sm.elections,
        }
    }

    /// The slots of this kind, and the leases (to name holders) beside them.
    fn slots_mut(self, sm: &mut StateMachine) -> (&mut BTreeMap<String, Box<Slot>>, &Leases) {
        match self {
            SlotKind::Lock => (&mut sm.locks, &sm.leases),
            SlotKind::Election => (&mut sm.elections, &sm.leases),
        }
    }

    fn holding(self, name: &str) -> Attachment {
        match self {
            SlotKind::Lock => Attachment::Lock(name.to_owned()),
            SlotKind::Election => Attachment::Leader(name.to_owned()),
        }
    }

    fn waiting(self, name: &str, waiter: WaiterId) -> Attachment {
        match self {
            SlotKind::Lock => Attachment::LockWait(name.to_owned(), waiter),
            SlotKind::Election => Attachment::Candidacy(name.to_owned(), waiter),
        }
    }

    /// The refusal for a request that may not wait (or whose wait ended) while
    /// the slot is taken: who holds it and with which token.
    fn taken(self, slot: &Slot, leases: &Leases) -> CoreError {
        let holder = slot.holding.as_ref().map(|h| h.holder(leases));
        let token = slot.holding.as_ref().map(|h| h.token);
        match self {
            SlotKind::Lock => CoreError::LockHeld { holder, token },
            SlotKind::Election => CoreError::NotElected {
                leader: holder,
                token,
            },
        }
    }

    fn queue_full(self, max: u32) -> CoreError {
        let what = match self {
            SlotKind::Lock => format!("a lock has at most {max} waiters"),
            SlotKind::Election => format!("an election has at most {max} candidates waiting"),
        };
        CoreError::QuotaExceeded { what }
    }

    fn queued(self, slot: &Slot, waiter: WaiterId, lease_id: LeaseId, leases: &Leases) -> Reply {
        let holder = slot.holding.as_ref().map(|h| h.holder(leases));
        match self {
            SlotKind::Lock => Reply::LockQueued {
                waiter,
                lease_id,
                holder,
                token: slot.holding.as_ref().map(|h| h.token),
            },
            SlotKind::Election => Reply::CampaignQueued {
                waiter,
                lease_id,
                leader: holder,
            },
        }
    }

    fn granted(self, grant: Grant, value: String) -> Reply {
        match self {
            SlotKind::Lock => Reply::LockGranted(grant),
            SlotKind::Election => Reply::Elected { grant, value },
        }
    }

    fn queued_event(self, name: &str, waiter: WaiterId) -> EventKind {
        let name = name.to_owned();
        match self {
            SlotKind::Lock => EventKind::LockQueued { name, waiter },
            SlotKind::Election => EventKind::CandidateQueued { name, waiter },
        }
    }

    fn granted_event(self, grant: Grant, value: &str, waiter: Option<WaiterId>) -> EventKind {
        match self {
            SlotKind::Lock => EventKind::LockAcquired { grant, waiter },
            SlotKind::Election => EventKind::Elected {
                grant,
                value: value.to_owned(),
                waiter,
            },
        }
    }

    fn wait_ended_event(self, name: &str, waiter: WaiterId, reason: EndReason) -> EventKind {
        let name = name.to_owned();
        match self {
            SlotKind::Lock => EventKind::LockWaitEnded {
                name,
                waiter,
                reason,
            },
            SlotKind::Election => EventKind::CampaignEnded {
                name,
                waiter,
                reason,
            },
        }
    }
}

impl StateMachine {
    /// Holds the slot, queues for it, or refuses; the caller has validated the
    /// request's own fields (name, holder, value, delay).
    pub(crate) fn claim(
        &mut self,
        limits: &Limits,
        claim: Claim<'_>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        let Claim {
            kind,
            name,
            lease,
            holder,
            value,
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
        if let Some(slot) = kind.slots(self).get(name) {
            // Retries are safe: the same lease gets its grant or its place back.
            if let Some(held) = slot.held_by(lease_id) {
                let grant = Grant {
                    name: name.to_owned(),
                    token: held.token,
                    lease_id,
                    ttl_ms: self.lease_ttl(lease_id),
                    holder: held.holder(&self.leases),
                };
                return Ok(kind.granted(grant, held.value.clone()));
            }
            if let (Some(_), Some(queued)) = (waiter, slot.queued_by(lease_id)) {
                return Ok(kind.queued(slot, queued.waiter, lease_id, &self.leases));
            }
        }
        // Anyone in line goes first, even when the slot is free right now (a lock
        // in its delay, a hand-off this same entry will make).
        if let Some(slot) = kind
            .slots(self)
            .get(name)
            .filter(|slot| !slot.grantable() || !slot.queue.is_empty())
        {
            let Some(waiter) = waiter else {
                return Err(kind.taken(slot, &self.leases));
            };
            if slot.queue.len() >= limits.max_waiters_per_lock as usize {
                return Err(kind.queue_full(limits.max_waiters_per_lock));
            }
            self.check_lease_for_holding(limits, lease)?;
            let holder = self.materialize_lease(lease, holder, events);
            let (slots, leases) = kind.slots_mut(self);
            let slot = slots.entry(name.to_owned()).or_default();
            slot.queue.push_back(Waiting {
                waiter,
                lease_id,
                holder,
                lock_delay_ms,
                value: value.to_owned(),
                idempotency,
            });
            let reply = kind.queued(slot, waiter, lease_id, leases);
            self.attach(lease_id, kind.waiting(name, waiter));
            self.emit(events, kind.queued_event(name, waiter));
            return Ok(reply);
        }
        self.check_lease_for_holding(limits, lease)?;
        let holder = self.materialize_lease(lease, holder, events);
        let taker = Taker {
            lease_id,
            holder,
            lock_delay_ms,
            value,
        };
        let grant = self.hold(kind, name, taker, None, events);
        self.attach(lease_id, kind.holding(name));
        Ok(kind.granted(grant, value.to_owned()))
    }

    /// Gives the slot to `taker` at a fresh token (the revision of its event).
    fn hold(
        &mut self,
        kind: SlotKind,
        name: &str,
        taker: Taker<'_>,
        waiter: Option<WaiterId>,
        events: &mut Vec<Event>,
    ) -> Grant {
        let Taker {
            lease_id,
            holder,
            lock_delay_ms,
            value,
        } = taker;
        let token = self.next_revision();
        let stored_holder = Holding::holder_to_store(&self.leases, lease_id, &holder);
        let grant = Grant {
            name: name.to_owned(),
            token,
            lease_id,
            ttl_ms: self.lease_ttl(lease_id),
            holder,
        };
        let (slots, _) = kind.slots_mut(self);
        slots.entry(name.to_owned()).or_default().holding = Some(Holding {
            lease_id,
            token,
            holder: stored_holder,
            lock_delay_ms,
            value: value.to_owned(),
            modified_revision: token,
        });
        let emitted = self.emit(events, kind.granted_event(grant.clone(), value, waiter));
        debug_assert_eq!(emitted, token);
        grant
    }

    /// Hands a free slot to the first in line, exactly one, and forgets the slot
    /// once nothing is left in it. Every queued lease is alive: a lease's waits
    /// leave their queues when it ends.
    pub(crate) fn promote_next(&mut self, kind: SlotKind, name: &str, events: &mut Vec<Event>) {
        let (slots, _) = kind.slots_mut(self);
        let Some(slot) = slots.get_mut(name) else {
            return;
        };
        let next = if slot.grantable() {
            slot.queue.pop_front()
        } else {
            None
        };
        if let Some(next) = next {
            let taker = Taker {
                lease_id: next.lease_id,
                holder: next.holder,
                lock_delay_ms: next.lock_delay_ms,
                value: &next.value,
            };
            let grant = self.hold(kind, name, taker, Some(next.waiter), events);
            self.replace_attachment(
                next.lease_id,
                &kind.waiting(name, next.waiter),
                kind.holding(name),
            );
            let answer = kind.granted(grant, next.value);
            self.record_wait_end(next.idempotency, Ok(answer));
        }
        let (slots, _) = kind.slots_mut(self);
        if slots.get(name).is_some_and(|slot| slot.is_idle()) {
            slots.remove(name);
        }
    }

    /// Withdraws a waiting request at its owner's asking.
    pub(crate) fn cancel_waiting(
        &mut self,
        kind: SlotKind,
        name: &str,
        waiter: WaiterId,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        let lease_id = kind
            .slots(self)
            .get(name)
            .and_then(|slot| slot.queue.iter().find(|w| w.waiter == waiter))
            .map(|w| w.lease_id)
            .ok_or(CoreError::WaiterNotFound)?;
        self.drop_waiter(kind, name, waiter, EndReason::Released, events);
        self.detach(lease_id, &kind.waiting(name, waiter), events);
        Ok(Reply::WaitCancelled)
    }

    /// Takes a waiter out of its queue (cancelled, or its lease ended) and
    /// remembers the final answer of its wait.
    pub(crate) fn drop_waiter(
        &mut self,
        kind: SlotKind,
        name: &str,
        waiter: WaiterId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) {
        let (slots, leases) = kind.slots_mut(self);
        let Some(slot) = slots.get_mut(name) else {
            return;
        };
        let Some(removed) = slot.remove_waiter(waiter) else {
            return;
        };
        let refusal = kind.taken(slot, leases);
        if slot.is_idle() {
            slots.remove(name);
        }
        self.emit(events, kind.wait_ended_event(name, waiter, reason));
        let final_answer = match reason {
            EndReason::Released => Err(refusal),
            // Only holdings are force-released, never a wait: grouped for completeness.
            EndReason::Revoked | EndReason::Expired | EndReason::ForceReleased => {
                Err(CoreError::LeaseNotFound)
            }
        };
        self.record_wait_end(removed.idempotency, final_answer);
    }
}
