//! Read-only views of the state, for GET endpoints, validation and the lease clock.

use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::ids::LeaseId;
use crate::lease::{Attachment, Leases};
use crate::lease_ttls::LeaseTtlCounts;
use crate::machine::StateMachine;
use crate::slot::{LockMode, Slot};

/// A lock as readers see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockView {
    /// Lock name.
    pub name: String,
    /// Whether someone holds it.
    pub held: bool,
    /// The holder's identity.
    pub holder: Option<String>,
    /// The holder's fencing token.
    pub token: Option<u64>,
    /// Revision since which the current holder holds it.
    pub since_revision: Option<u64>,
    /// Requests waiting in the queue.
    pub waiters: usize,
    /// Who waits, in line order (the first [`QUEUE_SHOWN`] of them).
    pub queue: Vec<String>,
    /// The lock is in lock delay until this leader-stamped time.
    pub delay_until_ms: Option<u64>,
    /// How it is held now (`None` when free).
    pub mode: Option<LockMode>,
    /// Every holder, in grant order (one when exclusive).
    pub holders: Vec<HolderView>,
}

/// One holder of a lock or a semaphore.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderView {
    /// The holder's identity.
    pub holder: String,
    /// Its fencing token.
    pub token: u64,
    /// Exclusive or shared (always exclusive for a semaphore's holders).
    pub mode: LockMode,
    /// Permits it holds (1 for a lock).
    pub permits: u32,
    /// Revision since which it holds.
    pub since_revision: u64,
}

/// A semaphore as readers see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SemaphoreView {
    /// Semaphore name.
    pub name: String,
    /// Its limit (set by its first acquirer); `None` when nobody holds or waits.
    pub limit: Option<u32>,
    /// Permits out.
    pub in_use: u64,
    /// Every holder, in grant order.
    pub holders: Vec<HolderView>,
    /// Requests waiting in the queue.
    pub waiters: usize,
    /// Who waits and for how many permits, in line order (the first
    /// [`QUEUE_SHOWN`] of them).
    pub queue: Vec<QueuedView>,
}

/// A request waiting in a semaphore's line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedView {
    /// Who waits.
    pub holder: String,
    /// Permits it asks for.
    pub permits: u32,
}

/// How many waiters a lock's view names (its `waiters` counts them all).
pub const QUEUE_SHOWN: usize = 32;

/// A lease as its creator sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseView {
    /// The lease.
    pub lease_id: LeaseId,
    /// Its TTL.
    pub ttl_ms: u64,
    /// Its holder.
    pub holder: String,
    /// Locks it holds, in name order.
    pub locks: Vec<String>,
    /// Names it owns, in name order.
    pub names: Vec<String>,
    /// Elections it leads, in name order.
    pub elections: Vec<String>,
    /// Semaphores it holds permits of, in name order.
    pub semaphores: Vec<String>,
    /// Queued lock and semaphore waits and candidacies (a multi-acquire counts
    /// once per lock).
    pub waiting: usize,
    /// Created for one holding and revoked with it.
    pub ephemeral: bool,
}

/// An election's leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderView {
    /// The leader's candidate identity.
    pub candidate: String,
    /// Its published value (JSON text).
    pub value: String,
    /// Its fencing token (the revision at which it was elected).
    pub token: u64,
    /// Revision of the last change (election or proclaim).
    pub since_revision: u64,
}

/// An election as readers see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionView {
    /// Election name.
    pub name: String,
    /// The leader, if any.
    pub leader: Option<LeaderView>,
    /// Candidates waiting in line.
    pub candidates: usize,
}

/// A registered name as readers see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameView {
    /// The name.
    pub name: String,
    /// Its value (JSON text).
    pub value: String,
    /// The owner's identity.
    pub holder: String,
    /// The registration's token.
    pub token: u64,
    /// Revision of the last change (registration or value update).
    pub since_revision: u64,
}

fn holder_views(slot: &Slot, leases: &Leases) -> Vec<HolderView> {
    slot.holders
        .iter()
        .map(|h| HolderView {
            holder: h.holder(leases),
            token: h.token,
            mode: h.mode,
            permits: h.permits,
            since_revision: h.token,
        })
        .collect()
}

fn lock_view(name: &str, slot: &Slot, leases: &Leases) -> LockView {
    let first = slot.first_holder();
    LockView {
        name: name.to_owned(),
        held: first.is_some(),
        holder: first.map(|h| h.holder(leases)),
        token: first.map(|h| h.token),
        since_revision: first.map(|h| h.token),
        waiters: slot.queue.len(),
        queue: slot
            .queue
            .iter()
            .take(QUEUE_SHOWN)
            .map(|waiting| waiting.holder.clone())
            .collect(),
        delay_until_ms: slot.delay_until_ms,
        mode: first.map(|h| h.mode),
        holders: holder_views(slot, leases),
    }
}

fn semaphore_view(name: &str, slot: &Slot, leases: &Leases) -> SemaphoreView {
    SemaphoreView {
        name: name.to_owned(),
        limit: (slot.limit > 0).then_some(slot.limit),
        in_use: slot.in_use(),
        holders: holder_views(slot, leases),
        waiters: slot.queue.len(),
        queue: slot
            .queue
            .iter()
            .take(QUEUE_SHOWN)
            .map(|waiting| QueuedView {
                holder: waiting.holder.clone(),
                permits: waiting.permits,
            })
            .collect(),
    }
}

/// Keys of `map` starting with `prefix`, strictly after `after`, at most `limit`.
fn page<'a, K, V>(
    map: &'a imbl::OrdMap<K, V>,
    prefix: &'a str,
    after: Option<&'a str>,
    limit: usize,
) -> impl Iterator<Item = (&'a K, &'a V)> + 'a
where
    K: Ord + Clone + std::borrow::Borrow<str>,
    V: Clone,
{
    let start = match after {
        Some(after) if after >= prefix => Bound::Excluded(after),
        _ => Bound::Included(prefix),
    };
    map.range::<_, str>((start, Bound::Unbounded))
        .take_while(move |(name, _)| name.borrow().starts_with(prefix))
        .take(limit)
}

impl StateMachine {
    /// The lock, or a free lock's view (`held: false`) when nothing is recorded.
    pub fn lock(&self, name: &str) -> LockView {
        match self.locks.get(name) {
            Some(slot) => lock_view(name, slot, &self.leases),
            None => lock_view(name, &Slot::default(), &self.leases),
        }
    }

    /// Locks that are held, queued on or delayed, in name order.
    pub fn locks(&self, prefix: &str, after: Option<&str>, limit: usize) -> Vec<LockView> {
        page(self.locks.map(), prefix, after, limit)
            .map(|(name, slot)| lock_view(name, slot, &self.leases))
            .collect()
    }

    /// Whether `token` is a current holder's token of lock `name`, and the
    /// newest holder's token (the only holder's, when exclusive).
    pub fn validate(&self, name: &str, token: u64) -> (bool, Option<u64>) {
        let Some(slot) = self.locks.get(name) else {
            return (false, None);
        };
        let valid = slot.holders.iter().any(|h| h.token == token);
        (valid, slot.newest_token())
    }

    /// The semaphore, or a free semaphore's view (no limit, nothing out).
    pub fn semaphore(&self, name: &str) -> SemaphoreView {
        match self.semaphores.get(name) {
            Some(slot) => semaphore_view(name, slot, &self.leases),
            None => semaphore_view(name, &Slot::default(), &self.leases),
        }
    }

    /// Semaphores that are held or queued on, in name order.
    pub fn semaphores(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Vec<SemaphoreView> {
        page(self.semaphores.map(), prefix, after, limit)
            .map(|(name, slot)| semaphore_view(name, slot, &self.leases))
            .collect()
    }

    /// Checks that `(lease_id, token)` holds permits of semaphore `name` (what a
    /// renew verifies); the lease's TTL when it does.
    pub fn check_permits_holder(
        &self,
        name: &str,
        lease_id: LeaseId,
        token: u64,
    ) -> Result<u64, CoreError> {
        let lease = self.leases.get(&lease_id).ok_or(CoreError::LeaseNotFound)?;
        if self
            .semaphores
            .get(name)
            .is_some_and(|s| s.held_with(lease_id, token))
        {
            Ok(lease.ttl_ms)
        } else {
            Err(CoreError::PermitsLost)
        }
    }

    /// Checks that `(lease_id, token)` holds lock `name` (what a renew verifies).
    pub fn check_lock_holder(
        &self,
        name: &str,
        lease_id: LeaseId,
        token: u64,
    ) -> Result<u64, CoreError> {
        let lease = self.leases.get(&lease_id).ok_or(CoreError::LeaseNotFound)?;
        let slot = self.locks.get(name);
        if slot.is_some_and(|s| s.held_with(lease_id, token)) {
            Ok(lease.ttl_ms)
        } else {
            Err(CoreError::LockLost {
                current_token: slot.and_then(|s| s.newest_token()),
            })
        }
    }

    /// A lease with everything attached to it.
    pub fn lease(&self, lease_id: LeaseId) -> Option<LeaseView> {
        let lease = self.leases.get(&lease_id)?;
        let mut view = LeaseView {
            lease_id,
            ttl_ms: lease.ttl_ms,
            holder: lease.holder.clone(),
            locks: Vec::new(),
            names: Vec::new(),
            elections: Vec::new(),
            semaphores: Vec::new(),
            waiting: 0,
            ephemeral: lease.ephemeral,
        };
        for attachment in &lease.attachments {
            match attachment {
                Attachment::Lock(name) => view.locks.push(name.clone()),
                Attachment::Name(name) => view.names.push(name.clone()),
                Attachment::Leader(name) => view.elections.push(name.clone()),
                Attachment::Permits(name) => view.semaphores.push(name.clone()),
                Attachment::LockWait(..)
                | Attachment::Candidacy(..)
                | Attachment::PermitWait(..) => {
                    view.waiting += 1;
                }
            }
        }
        view.locks.sort();
        view.names.sort();
        view.elections.sort();
        view.semaphores.sort();
        Some(view)
    }

    /// Checks that `principal` may act through `lease_id`: leases created with auth
    /// off have no owner and serve anyone; `None` (auth off) passes every lease.
    /// An unknown lease passes too: whatever uses it then finds it missing.
    pub fn check_lease_owner(
        &self,
        lease_id: LeaseId,
        principal: Option<&str>,
    ) -> Result<(), CoreError> {
        match (principal, self.lease_owners.get(&lease_id)) {
            (Some(principal), Some(owner)) if owner != principal => Err(CoreError::LeaseNotOwned),
            _ => Ok(()),
        }
    }

    /// The TTL of a live lease.
    pub fn lease_ttl_ms(&self, lease_id: LeaseId) -> Option<u64> {
        self.leases.get(&lease_id).map(|l| l.ttl_ms)
    }

    /// Every live lease with its TTL (for the leader's lease clock).
    pub fn leases(&self) -> impl Iterator<Item = (LeaseId, u64)> + '_ {
        self.leases.iter().map(|(id, lease)| (*id, lease.ttl_ms))
    }

    /// Number of live leases.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// An election, if it has a leader or candidates.
    pub fn election(&self, name: &str) -> Option<ElectionView> {
        let slot = self.elections.get(name)?;
        Some(ElectionView {
            name: name.to_owned(),
            leader: slot.first_holder().map(|h| LeaderView {
                candidate: h.holder(&self.leases),
                value: h.value.clone(),
                token: h.token,
                since_revision: h.modified_revision,
            }),
            candidates: slot.queue.len(),
        })
    }

    /// A registered name.
    pub fn name(&self, name: &str) -> Option<NameView> {
        self.names.get(name).map(|entry| NameView {
            name: name.to_owned(),
            value: entry.value.clone(),
            holder: entry.holder.clone(),
            token: entry.token,
            since_revision: entry.modified_revision,
        })
    }

    /// Registered names starting with `prefix`, after `after`, in name order.
    pub fn names(&self, prefix: &str, after: Option<&str>, limit: usize) -> Vec<NameView> {
        page(&self.names, prefix, after, limit)
            .filter_map(|(name, _)| self.name(name))
            .collect()
    }

    /// The earliest leader-stamped time at which a [`crate::Command::Tick`] would
    /// change something (a lock delay ending), if any.
    pub fn next_timer_ms(&self) -> Option<u64> {
        self.delayed.get_min().map(|(until, _)| *until)
    }

    /// How many idempotency records are retained.
    pub fn idempotency_records(&self) -> usize {
        self.idempotency.len()
    }
}

/// Sizes of the state, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Live leases.
    pub leases: usize,
    /// Locks with a holder.
    pub held_locks: usize,
    /// Requests queued on locks.
    pub lock_waiters: usize,
    /// Elections with a leader.
    pub elections: usize,
    /// Registered names.
    pub names: usize,
    /// Semaphores with a holder.
    pub semaphores_held: usize,
    /// Permits out, over every semaphore.
    pub permits_out: u64,
    /// Requests queued on semaphores.
    pub semaphore_waiters: usize,
}

impl StateMachine {
    /// Sizes of the state, in O(1): the slot counts are kept with every change
    /// (a scrape once walked a million locks for them).
    pub fn counts(&self) -> Counts {
        let (locks, elections, semaphores) = (
            self.locks.tally(),
            self.elections.tally(),
            self.semaphores.tally(),
        );
        Counts {
            leases: self.leases.len(),
            names: self.names.len(),
            held_locks: locks.held,
            lock_waiters: locks.waiting,
            elections: elections.held,
            semaphores_held: semaphores.held,
            permits_out: semaphores.in_use,
            semaphore_waiters: semaphores.waiting,
        }
    }

    /// Whether the running slot counts equal a count from scratch. For tests:
    /// the property tests check it after every step.
    #[doc(hidden)]
    pub fn counts_are_consistent(&self) -> bool {
        [&self.locks, &self.elections, &self.semaphores]
            .iter()
            .all(|slots| slots.tally() == slots.counted_tally())
            && self.lease_ttls == LeaseTtlCounts::of(&self.leases)
    }

    /// Live leases by TTL bucket, in O(1) (kept with every change).
    pub fn lease_ttl_counts(&self) -> LeaseTtlCounts {
        self.lease_ttls
    }
}
