//! The FIFO-queued slot that locks, elections and semaphores are made of: a set
//! of holders, a queue, and who may hold beside whom.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::ids::{LeaseId, WaiterId};
use crate::lease::Leases;

/// How a lock is held: alone, or beside other shared holders.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum LockMode {
    /// One holder at a time (a writer). Elections are always exclusive.
    #[default]
    Exclusive,
    /// Any number of shared holders at a time, and no exclusive one (readers).
    Shared,
}

/// Who holds a slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Holding {
    pub lease_id: LeaseId,
    /// Fencing token: the revision of the grant.
    pub token: u64,
    /// `None` when it is the lease's holder (the usual case, stored once, on the
    /// lease); see [`Holding::holder`].
    pub holder: Option<String>,
    /// Lock delay to impose if this holding's lease expires.
    pub lock_delay_ms: u64,
    /// Election value (JSON text); empty for locks and semaphores.
    pub value: String,
    /// Revision of the last change to this holding (grant or proclaim).
    pub modified_revision: u64,
    /// Exclusive or shared (locks); exclusive for elections and semaphores.
    pub mode: LockMode,
    /// Permits taken of a semaphore; 1 for locks and elections.
    pub permits: u32,
}

impl Holding {
    /// Records `holder` unless it is the lease's own holder (a lease's holder never
    /// changes, and a holding's lease lives as long as the holding).
    pub fn holder_to_store(leases: &Leases, lease_id: LeaseId, holder: &str) -> Option<String> {
        match leases.get(&lease_id) {
            Some(lease) if lease.holder == holder => None,
            _ => Some(holder.to_owned()),
        }
    }

    /// Who holds it.
    pub fn holder(&self, leases: &Leases) -> String {
        match &self.holder {
            Some(holder) => holder.clone(),
            None => leases
                .get(&self.lease_id)
                .map(|lease| lease.holder.clone())
                .unwrap_or_default(),
        }
    }
}

/// A request waiting in a slot's queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Waiting {
    pub waiter: WaiterId,
    pub lease_id: LeaseId,
    pub holder: String,
    pub lock_delay_ms: u64,
    pub value: String,
    /// The idempotency record to update when this wait ends: `(principal, key)`.
    /// `None` for the places of a multi-acquire, whose record is its group's.
    pub idempotency: Option<(String, String)>,
    /// The mode it asks for (locks).
    pub mode: LockMode,
    /// The permits it asks for (semaphores; 1 otherwise).
    pub permits: u32,
}

/// A lock, an election or a semaphore: holders, a FIFO queue, maybe a lock delay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Slot {
    /// In grant order. At most one for an election or an exclusive holder.
    pub holders: Vec<Holding>,
    pub queue: VecDeque<Waiting>,
    /// While set, the slot is not granted to anyone (Chubby's lock delay).
    pub delay_until_ms: Option<u64>,
    /// A semaphore's permits, set by its first acquirer; 0 for a lock or an
    /// election, whose holders are judged by their mode instead.
    pub limit: u32,
}

/// What a slot's holders, and the requests counted with them, take of it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Occupancy {
    exclusive: bool,
    shared: bool,
    permits: u64,
}

impl Occupancy {
    /// Counts one more holder (or request ahead) of `mode` taking `permits`.
    pub fn add(&mut self, mode: LockMode, permits: u32) {
        match mode {
            LockMode::Exclusive => self.exclusive = true,
            LockMode::Shared => self.shared = true,
        }
        self.permits += u64::from(permits);
    }

    /// Whether a request of `mode` for `permits` may hold beside everything
    /// counted: a semaphore (`limit` > 0) by permits, a lock or election by mode.
    pub fn admits(&self, mode: LockMode, permits: u32, limit: u32) -> bool {
        if limit > 0 {
            return self.permits + u64::from(permits) <= u64::from(limit);
        }
        match mode {
            LockMode::Exclusive => !self.exclusive && !self.shared,
            LockMode::Shared => !self.exclusive,
        }
    }

    /// Whether nothing more can hold beside what is counted.
    pub fn is_full(&self, limit: u32) -> bool {
        if limit > 0 {
            self.permits >= u64::from(limit)
        } else {
            self.exclusive
        }
    }
}

impl Slot {
    /// Nothing worth keeping: free locks are not stored.
    pub fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty() && self.delay_until_ms.is_none()
    }

    pub fn held_by(&self, lease_id: LeaseId) -> Option<&Holding> {
        self.holders.iter().find(|h| h.lease_id == lease_id)
    }

    pub fn held_with(&self, lease_id: LeaseId, token: u64) -> bool {
        self.held_by(lease_id).is_some_and(|h| h.token == token)
    }

    pub fn queued_by(&self, lease_id: LeaseId) -> Option<&Waiting> {
        self.queue.iter().find(|w| w.lease_id == lease_id)
    }

    pub fn remove_waiter(&mut self, waiter: WaiterId) -> Option<Waiting> {
        let index = self.queue.iter().position(|w| w.waiter == waiter)?;
        self.queue.remove(index)
    }

    /// Takes the holding of `lease_id` out of the holders.
    pub fn remove_holder(&mut self, lease_id: LeaseId) -> Option<Holding> {
        let index = self.holders.iter().position(|h| h.lease_id == lease_id)?;
        Some(self.holders.remove(index))
    }

    /// The first (oldest) holder; the only one of an election or an exclusive lock.
    pub fn first_holder(&self) -> Option<&Holding> {
        self.holders.first()
    }

    /// The newest holder's token: what a fenced resource has seen last.
    pub fn newest_token(&self) -> Option<u64> {
        self.holders.iter().map(|h| h.token).max()
    }

    /// Permits out (semaphores), or holders (locks).
    pub fn in_use(&self) -> u64 {
        self.holders.iter().map(|h| u64::from(h.permits)).sum()
    }

    /// What the holders take.
    pub fn held(&self) -> Occupancy {
        let mut occupancy = Occupancy::default();
        for holding in &self.holders {
            occupancy.add(holding.mode, holding.permits);
        }
        occupancy
    }

    /// Whether a new request of `mode` for `permits` may hold now without
    /// passing anyone in line: it must fit beside the holders and every queued
    /// request, as if they all held already.
    pub fn admits_newcomer(&self, mode: LockMode, permits: u32) -> bool {
        if self.delay_until_ms.is_some() {
            return false;
        }
        let mut occupancy = self.held();
        for waiting in &self.queue {
            occupancy.add(waiting.mode, waiting.permits);
        }
        occupancy.admits(mode, permits, self.limit)
    }

    /// Whether the queued request `waiter` may hold now: it fits beside the
    /// holders and every request ahead of it (as if they held already), so it
    /// never passes an incompatible request that came first.
    pub fn admits_queued(&self, waiter: WaiterId) -> bool {
        if self.delay_until_ms.is_some() {
            return false;
        }
        let mut occupancy = self.held();
        for waiting in &self.queue {
            if waiting.waiter == waiter {
                return occupancy.admits(waiting.mode, waiting.permits, self.limit);
            }
            if occupancy.is_full(self.limit) {
                return false;
            }
            occupancy.add(waiting.mode, waiting.permits);
        }
        false
    }

    /// The queued requests that may hold now, in line order (see
    /// [`Slot::admits_queued`]). Stops at the first point past which nobody fits.
    pub fn admitted_waiters(&self) -> Vec<WaiterId> {
        let mut admitted = Vec::new();
        if self.delay_until_ms.is_some() {
            return admitted;
        }
        let mut occupancy = self.held();
        for waiting in &self.queue {
            if occupancy.is_full(self.limit) {
                break;
            }
            if occupancy.admits(waiting.mode, waiting.permits, self.limit) {
                admitted.push(waiting.waiter);
            }
            occupancy.add(waiting.mode, waiting.permits);
        }
        admitted
    }
}
