//! The FIFO-queued, single-holder slot that both locks and elections are made of.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::ids::{LeaseId, WaiterId};
use crate::lease::Leases;

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
    /// Election value (JSON text); empty for locks.
    pub value: String,
    /// Revision of the last change to this holding (grant or proclaim).
    pub modified_revision: u64,
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
    pub idempotency: Option<(String, String)>,
}

/// A lock or an election: at most one holder, a FIFO queue, and maybe a lock delay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Slot {
    pub holding: Option<Holding>,
    pub queue: VecDeque<Waiting>,
    /// While set, the slot is not granted to anyone (Chubby's lock delay).
    pub delay_until_ms: Option<u64>,
}

impl Slot {
    /// Nothing worth keeping: free locks are not stored.
    pub fn is_idle(&self) -> bool {
        self.holding.is_none() && self.queue.is_empty() && self.delay_until_ms.is_none()
    }

    pub fn held_by(&self, lease_id: LeaseId) -> Option<&Holding> {
        self.holding.as_ref().filter(|h| h.lease_id == lease_id)
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

    pub fn grantable(&self) -> bool {
        self.holding.is_none() && self.delay_until_ms.is_none()
    }
}
