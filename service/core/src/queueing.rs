//! The one waiting-acquire algorithm: hold a slot, or queue for it in strict FIFO
//! order, and hand it on to everyone at the head of the line who may hold together.
//!
//! Locks (exclusive or shared), elections and semaphores are the same contest:
//! holders that are compatible with each other, and a queue in arrival order. A
//! request holds once it fits beside the holders *and* every request ahead of it
//! in line (as if those held already), so nobody is ever passed by a later
//! request it cannot hold beside: a queued writer blocks later readers, a head
//! request for three permits is not passed by a later request for one. A retry by
//! the same lease gets its grant or its place back.
//!
//! What differs (the map the slot lives in, the replies, events and lease
//! attachments, the election's value, the lock's delay, a semaphore's permits) is
//! told by [`SlotKind`], so a rule fixed here is fixed for all three. The places
//! of a multi-acquire (one request queued on several locks at once) are granted
//! by `groups`, which this module asks whenever such a place may hold.

use crate::command::LeaseRef;
use crate::error::CoreError;
use crate::ids::{LeaseId, WaiterId};
use crate::lease::{Attachment, Leases};
use crate::limits::Limits;
use crate::machine::StateMachine;
use crate::outcome::{EndReason, Event, EventKind, Grant};
use crate::reply::{PermitGrant, Reply};
use crate::slot::{Holding, LockMode, Slot, Waiting};
use crate::slots::Slots;

/// Which kind of slot a claim is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SlotKind {
    /// A lock, exclusive or shared.
    Lock,
    /// An election: the holder leads and publishes a value.
    Election,
    /// A counting semaphore: holders take permits of a limit.
    Semaphore,
}

/// A request to hold a slot, or to queue for it when `waiter` is set.
pub(crate) struct Claim<'a> {
    pub kind: SlotKind,
    pub name: &'a str,
    pub lease: &'a LeaseRef,
    /// The holder's label (a lock's holder, an election's candidate); `None`
    /// takes the lease's.
    pub holder: Option<&'a str>,
    /// Published with an election's leadership; empty otherwise.
    pub value: &'a str,
    /// The lock delay kept with the holding; 0 for elections and semaphores.
    pub lock_delay_ms: u64,
    /// Permits asked for (semaphores); 1 otherwise.
    pub permits: u32,
    /// A semaphore's limit as this request states it; 0 otherwise.
    pub limit: u32,
    /// Set when the request may wait in line.
    pub waiter: Option<WaiterId>,
    /// Where a queued request's final answer is remembered.
    pub idempotency: Option<(String, String)>,
}

impl<'a> Claim<'a> {
    /// A claim on exclusive lock `name`.
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
            permits: 1,
            limit: 0,
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
            permits: 1,
            limit: 0,
            waiter,
            idempotency: None,
        }
    }

    /// A request for `permits` of semaphore `name`, whose limit it states.
    pub fn permits(
        name: &'a str,
        lease: &'a LeaseRef,
        holder: Option<&'a str>,
        limit: u32,
        permits: u32,
        waiter: Option<WaiterId>,
    ) -> Self {
        Claim {
            kind: SlotKind::Semaphore,
            name,
            lease,
            holder,
            value: "",
            lock_delay_ms: 0,
            permits,
            limit,
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
pub(crate) struct Taker<'a> {
    pub lease_id: LeaseId,
    pub holder: String,
    pub lock_delay_ms: u64,
    pub value: &'a str,
    pub mode: LockMode,
    pub permits: u32,
}

impl SlotKind {
    pub(crate) fn slots(self, sm: &StateMachine) -> &Slots {
        match self {
            SlotKind::Lock => &sm.locks,
            SlotKind::Election => &sm.elections,
            SlotKind::Semaphore => &sm.semaphores,
        }
    }

    /// The slots of this kind, and the leases (to name holders) beside them.
    pub(crate) fn slots_mut(self, sm: &mut StateMachine) -> (&mut Slots, &Leases) {
        match self {
            SlotKind::Lock => (&mut sm.locks, &sm.leases),
            SlotKind::Election => (&mut sm.elections, &sm.leases),
            SlotKind::Semaphore => (&mut sm.semaphores, &sm.leases),
        }
    }

    pub(crate) fn holding(self, name: &str) -> Attachment {
        match self {
            SlotKind::Lock => Attachment::Lock(name.to_owned()),
            SlotKind::Election => Attachment::Leader(name.to_owned()),
            SlotKind::Semaphore => Attachment::Permits(name.to_owned()),
        }
    }

    pub(crate) fn waiting(self, name: &str, waiter: WaiterId) -> Attachment {
        match self {
            SlotKind::Lock => Attachment::LockWait(name.to_owned(), waiter),
            SlotKind::Election => Attachment::Candidacy(name.to_owned(), waiter),
            SlotKind::Semaphore => Attachment::PermitWait(name.to_owned(), waiter),
        }
    }

    /// The refusal for a request that may not wait (or whose wait ended) while
    /// the slot is taken: who holds it and with which token, or how many
    /// permits are out.
    pub(crate) fn taken(self, slot: &Slot, leases: &Leases) -> CoreError {
        let first = slot.first_holder();
        let holder = first.map(|h| h.holder(leases));
        let token = first.map(|h| h.token);
        match self {
            SlotKind::Lock => CoreError::LockHeld { holder, token },
            SlotKind::Election => CoreError::NotElected {
                leader: holder,
                token,
            },
            SlotKind::Semaphore => CoreError::SemaphoreFull {
                in_use: slot.in_use(),
                limit: slot.limit,
                waiters: slot.queue.len() as u64,
            },
        }
    }

    fn queue_full(self, max: u32) -> CoreError {
        let what = match self {
            SlotKind::Lock => format!("a lock has at most {max} waiters"),
            SlotKind::Election => format!("an election has at most {max} candidates waiting"),
            SlotKind::Semaphore => format!("a semaphore has at most {max} waiters"),
        };
        CoreError::QuotaExceeded { what }
    }

    fn queued(self, slot: &Slot, waiter: WaiterId, lease_id: LeaseId, leases: &Leases) -> Reply {
        let first = slot.first_holder();
        let holder = first.map(|h| h.holder(leases));
        match self {
            SlotKind::Lock => Reply::LockQueued {
                waiter,
                lease_id,
                holder,
                token: first.map(|h| h.token),
            },
            SlotKind::Election => Reply::CampaignQueued {
                waiter,
                lease_id,
                leader: holder,
            },
            SlotKind::Semaphore => Reply::PermitsQueued {
                waiter,
                lease_id,
                in_use: slot.in_use(),
                limit: slot.limit,
            },
        }
    }

    fn granted(self, grant: Grant, holding: &Holding, limit: u32) -> Reply {
        match self {
            SlotKind::Lock => Reply::LockGranted(grant),
            SlotKind::Election => Reply::Elected {
                grant,
                value: holding.value.clone(),
            },
            SlotKind::Semaphore => Reply::PermitsGranted(PermitGrant {
                grant,
                permits: holding.permits,
                limit,
            }),
        }
    }

    fn queued_event(self, name: &str, waiter: WaiterId) -> EventKind {
        let name = name.to_owned();
        match self {
            SlotKind::Lock => EventKind::LockQueued { name, waiter },
            SlotKind::Election => EventKind::CandidateQueued { name, waiter },
            SlotKind::Semaphore => EventKind::SemaphoreQueued { name, waiter },
        }
    }

    fn granted_event(
        self,
        grant: Grant,
        taker: &Taker<'_>,
        limit: u32,
        waiter: Option<WaiterId>,
    ) -> EventKind {
        match self {
            SlotKind::Lock => EventKind::LockAcquired {
                grant,
                waiter,
                mode: taker.mode,
            },
            SlotKind::Election => EventKind::Elected {
                grant,
                value: taker.value.to_owned(),
                waiter,
            },
            SlotKind::Semaphore => EventKind::SemaphoreAcquired {
                grant,
                permits: taker.permits,
                limit,
                waiter,
            },
        }
    }

    pub(crate) fn wait_ended_event(
        self,
        name: &str,
        waiter: WaiterId,
        reason: EndReason,
    ) -> EventKind {
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
            SlotKind::Semaphore => EventKind::SemaphoreWaitEnded {
                name,
                waiter,
                reason,
            },
        }
    }
}

impl StateMachine {
    /// Holds the slot, queues for it, or refuses; the caller has validated the
    /// request's own fields (name, holder, value, delay, permits).
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
            permits,
            limit,
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
            if kind == SlotKind::Semaphore && slot.limit != limit {
                return Err(CoreError::LimitMismatch { limit: slot.limit });
            }
            // Retries are safe: the same lease gets its grant or its place back.
            // A shared holding is no answer to an exclusive request: that would
            // be an upgrade, which is not offered (release, then acquire).
            if let Some(held) = slot.held_by(lease_id) {
                if held.mode == LockMode::Shared {
                    return Err(kind.taken(slot, &self.leases));
                }
                let grant = self.grant_of(name, held);
                return Ok(kind.granted(grant, held, slot.limit));
            }
            // A lease that waits in this line already is answered with its
            // place, and a try of it is refused: one lease never holds a slot
            // twice, nor beside its own place in line.
            if let Some(queued) = slot.queued_by(lease_id) {
                return match waiter {
                    Some(_) => Ok(kind.queued(slot, queued.waiter, lease_id, &self.leases)),
                    None => Err(kind.taken(slot, &self.leases)),
                };
            }
        }
        let mode = LockMode::Exclusive;
        let fits = kind
            .slots(self)
            .get(name)
            .is_none_or(|slot| slot.admits_newcomer(mode, permits));
        if !fits {
            // Anyone in line goes first, even when the slot is free right now (a
            // lock in its delay, a hand-off this same entry will make).
            let Some(waiter) = waiter else {
                let slot = kind.slots(self).get(name);
                return Err(slot.map_or(CoreError::NotFound, |s| kind.taken(s, &self.leases)));
            };
            self.check_room_in_line(kind, name, limits)?;
            self.check_lease_for_holding(limits, lease, 1)?;
            let holder = self.materialize_lease(lease, holder, events);
            let (slots, leases) = kind.slots_mut(self);
            let mut slot = slots.get_or_default(name);
            slot.queue.push_back(Waiting {
                waiter,
                lease_id,
                holder,
                lock_delay_ms,
                value: value.to_owned(),
                idempotency,
                mode,
                permits,
            });
            let reply = kind.queued(&slot, waiter, lease_id, leases);
            drop(slot);
            self.attach(lease_id, kind.waiting(name, waiter));
            self.emit(events, kind.queued_event(name, waiter));
            return Ok(reply);
        }
        self.check_lease_for_holding(limits, lease, 1)?;
        let holder = self.materialize_lease(lease, holder, events);
        let taker = Taker {
            lease_id,
            holder,
            lock_delay_ms,
            value,
            mode,
            permits,
        };
        let (grant, holding) = self.hold(kind, name, taker, limit, None, events);
        self.attach(lease_id, kind.holding(name));
        Ok(kind.granted(grant, &holding, limit))
    }

    /// Refuses a new place in the line of `name` when the line is at its cap.
    pub(crate) fn check_room_in_line(
        &self,
        kind: SlotKind,
        name: &str,
        limits: &Limits,
    ) -> Result<(), CoreError> {
        let queued = kind
            .slots(self)
            .get(name)
            .map_or(0, |slot| slot.queue.len());
        if queued >= limits.max_waiters_per_lock as usize {
            return Err(kind.queue_full(limits.max_waiters_per_lock));
        }
        Ok(())
    }

    /// The grant answer for an existing holding.
    pub(crate) fn grant_of(&self, name: &str, held: &Holding) -> Grant {
        Grant {
            name: name.to_owned(),
            token: held.token,
            lease_id: held.lease_id,
            ttl_ms: self.lease_ttl(held.lease_id),
            holder: held.holder(&self.leases),
        }
    }

    /// Adds `taker` to the holders at a fresh token (the revision of its event).
    /// `limit` is the limit a semaphore claim states (0 for a grant from the line,
    /// a lock or an election).
    pub(crate) fn hold(
        &mut self,
        kind: SlotKind,
        name: &str,
        taker: Taker<'_>,
        limit: u32,
        waiter: Option<WaiterId>,
        events: &mut Vec<Event>,
    ) -> (Grant, Holding) {
        let token = self.next_revision();
        let stored_holder = Holding::holder_to_store(&self.leases, taker.lease_id, &taker.holder);
        let grant = Grant {
            name: name.to_owned(),
            token,
            lease_id: taker.lease_id,
            ttl_ms: self.lease_ttl(taker.lease_id),
            holder: taker.holder.clone(),
        };
        let holding = Holding {
            lease_id: taker.lease_id,
            token,
            holder: stored_holder,
            lock_delay_ms: taker.lock_delay_ms,
            value: taker.value.to_owned(),
            modified_revision: token,
            mode: taker.mode,
            permits: taker.permits,
        };
        let (slots, _) = kind.slots_mut(self);
        let mut slot = slots.get_or_default(name);
        // Only a claim names a limit (and only one that matches, once the
        // semaphore exists); a grant from the line keeps the one that stands.
        if limit > 0 {
            slot.limit = limit;
        }
        let limit = slot.limit;
        slot.holders.push(holding.clone());
        drop(slot);
        let event = kind.granted_event(grant.clone(), &taker, limit, waiter);
        let emitted = self.emit(events, event);
        debug_assert_eq!(emitted, token);
        (grant, holding)
    }

    /// Hands a slot that changed (a holder left, a waiter left, a delay ended) to
    /// everyone in line who may now hold, in line order, and forgets the slot
    /// once nothing is left in it. Every queued lease is alive: a lease's waits
    /// leave their queues when it ends, before anything is handed on.
    pub(crate) fn promote_next(&mut self, kind: SlotKind, name: &str, events: &mut Vec<Event>) {
        let admitted = kind
            .slots(self)
            .get(name)
            .map(|slot| slot.admitted_waiters())
            .unwrap_or_default();
        for waiter in admitted {
            if kind == SlotKind::Lock && self.groups.contains_key(&waiter) {
                self.grant_group_if_ready(waiter, events);
            } else {
                self.grant_waiter(kind, name, waiter, events);
            }
        }
        let (slots, _) = kind.slots_mut(self);
        if slots.get(name).is_some_and(|slot| slot.is_idle()) {
            slots.remove(name);
        }
    }

    /// Grants a single request waiting in the line of `name`.
    fn grant_waiter(
        &mut self,
        kind: SlotKind,
        name: &str,
        waiter: WaiterId,
        events: &mut Vec<Event>,
    ) {
        let (slots, _) = kind.slots_mut(self);
        let Some(next) = slots
            .get_mut(name)
            .and_then(|mut slot| slot.remove_waiter(waiter))
        else {
            return;
        };
        let taker = Taker {
            lease_id: next.lease_id,
            holder: next.holder,
            lock_delay_ms: next.lock_delay_ms,
            value: &next.value,
            mode: next.mode,
            permits: next.permits,
        };
        let (grant, holding) = self.hold(kind, name, taker, 0, Some(next.waiter), events);
        self.replace_attachment(
            next.lease_id,
            &kind.waiting(name, next.waiter),
            kind.holding(name),
        );
        let limit = kind.slots(self).get(name).map_or(0, |slot| slot.limit);
        let answer = kind.granted(grant, &holding, limit);
        self.record_wait_end(next.idempotency, Ok(answer));
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
        let left = self.drop_waiter(kind, name, waiter, EndReason::Released, events);
        for (kind, name) in &left {
            self.detach(lease_id, &kind.waiting(name, waiter), events);
        }
        for (kind, name) in left {
            self.promote_next(kind, &name, events);
        }
        Ok(Reply::WaitCancelled)
    }

    /// Takes a waiter out of its line (cancelled, or its lease ended), or out of
    /// every line when it is a multi-acquire, and remembers the final answer of
    /// its wait. Returns the lines it left: the caller hands them on (after
    /// every wait of an ending lease is gone) and detaches the places.
    pub(crate) fn drop_waiter(
        &mut self,
        kind: SlotKind,
        name: &str,
        waiter: WaiterId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) -> Vec<(SlotKind, String)> {
        if kind == SlotKind::Lock && self.groups.contains_key(&waiter) {
            return self.drop_group(waiter, reason, events);
        }
        let (slots, leases) = kind.slots_mut(self);
        let Some(mut slot) = slots.get_mut(name) else {
            return Vec::new();
        };
        let Some(removed) = slot.remove_waiter(waiter) else {
            return Vec::new();
        };
        let refusal = kind.taken(&slot, leases);
        drop(slot);
        self.emit(events, kind.wait_ended_event(name, waiter, reason));
        self.record_wait_end(removed.idempotency, wait_end_answer(reason, refusal));
        vec![(kind, name.to_owned())]
    }
}

/// The final answer remembered for a wait that ended without a grant.
pub(crate) fn wait_end_answer(reason: EndReason, refusal: CoreError) -> Result<Reply, CoreError> {
    match reason {
        EndReason::Released => Err(refusal),
        // Only holdings are force-released, never a wait: grouped for completeness.
        EndReason::Revoked | EndReason::Expired | EndReason::ForceReleased => {
            Err(CoreError::LeaseNotFound)
        }
    }
}
