//! Snapshots of formats 1 to 3, written before shared locks and semaphores: a
//! slot then had at most one holder. postcard is positional, so the old slot
//! layout is spelled out here and converted; every other part of the state is
//! read with today's types, which decode the old bytes unchanged (enums only
//! gained variants at their end).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Deserialize;

use crate::idempotency::IdempotencyTable;
use crate::ids::{LeaseId, WaiterId};
use crate::lease::Leases;
use crate::machine::{NameEntry, StateMachine};
use crate::slot::{Holding, LockMode, Slot, Waiting};
use crate::slots::Slots;

/// The state as format 3 wrote it (formats 1 and 2 lack trailing fields).
#[derive(Deserialize)]
pub(crate) struct StateV3 {
    revision: u64,
    clock_ms: u64,
    #[serde(deserialize_with = "crate::persistent::hash_map")]
    leases: Leases,
    locks: BTreeMap<String, Box<SlotV3>>,
    elections: BTreeMap<String, Box<SlotV3>>,
    names: BTreeMap<String, NameEntry>,
    delayed: BTreeSet<(u64, String)>,
    idempotency: IdempotencyTable,
    cluster_id: Option<String>,
    lease_owners: BTreeMap<LeaseId, String>,
}

#[derive(Deserialize)]
struct SlotV3 {
    holding: Option<HoldingV3>,
    queue: VecDeque<WaitingV3>,
    delay_until_ms: Option<u64>,
}

#[derive(Deserialize)]
struct HoldingV3 {
    lease_id: LeaseId,
    token: u64,
    holder: Option<String>,
    lock_delay_ms: u64,
    value: String,
    modified_revision: u64,
}

#[derive(Deserialize)]
struct WaitingV3 {
    waiter: WaiterId,
    lease_id: LeaseId,
    holder: String,
    lock_delay_ms: u64,
    value: String,
    idempotency: Option<(String, String)>,
}

impl SlotV3 {
    fn upgrade(self) -> Box<Slot> {
        let holders = self
            .holding
            .into_iter()
            .map(|h| Holding {
                lease_id: h.lease_id,
                token: h.token,
                holder: h.holder,
                lock_delay_ms: h.lock_delay_ms,
                value: h.value,
                modified_revision: h.modified_revision,
                mode: LockMode::Exclusive,
                permits: 1,
            })
            .collect();
        let queue = self
            .queue
            .into_iter()
            .map(|w| Waiting {
                waiter: w.waiter,
                lease_id: w.lease_id,
                holder: w.holder,
                lock_delay_ms: w.lock_delay_ms,
                value: w.value,
                idempotency: w.idempotency,
                mode: LockMode::Exclusive,
                permits: 1,
            })
            .collect();
        Box::new(Slot {
            holders,
            queue,
            delay_until_ms: self.delay_until_ms,
            limit: 0,
        })
    }
}

impl StateV3 {
    /// Today's state holding exactly what the old one held.
    pub(crate) fn upgrade(self) -> StateMachine {
        let slots = |old: BTreeMap<String, Box<SlotV3>>| -> Slots {
            old.into_iter()
                .map(|(name, slot)| (name, slot.upgrade()))
                .collect()
        };
        StateMachine {
            revision: self.revision,
            clock_ms: self.clock_ms,
            leases: self.leases,
            locks: slots(self.locks),
            elections: slots(self.elections),
            names: self.names.into_iter().collect(),
            delayed: self.delayed.into_iter().collect(),
            idempotency: self.idempotency,
            cluster_id: self.cluster_id,
            lease_owners: self.lease_owners.into_iter().collect(),
            ..StateMachine::default()
        }
    }
}
