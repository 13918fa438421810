//! What each principal holds, counted as the state changes: the quotas judge
//! by it in constant time. Derived from the leases and their owners, so it is
//! not part of a snapshot; it is rebuilt when one is restored.

use std::collections::BTreeMap;

use crate::ids::LeaseId;
use crate::lease::{Attachment, Lease};
use crate::machine::StateMachine;

/// One principal's live leases and what hangs on them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Live leases it owns.
    pub leases: u64,
    /// Held locks, leaderships, registered names and semaphore holdings on those
    /// leases.
    pub holdings: u64,
    /// Queued lock and semaphore waits and candidacies on those leases (a
    /// multi-acquire counts once per lock it waits for).
    pub waiters: u64,
}

impl Usage {
    /// What one attachment counts for.
    fn of_attachment(attachment: &Attachment) -> Usage {
        if attachment.is_wait() {
            Usage {
                waiters: 1,
                ..Usage::default()
            }
        } else {
            Usage {
                holdings: 1,
                ..Usage::default()
            }
        }
    }

    /// What a lease and everything on it count for.
    fn of_lease(lease: &Lease) -> Usage {
        let mut usage = Usage {
            leases: 1,
            ..Usage::default()
        };
        for attachment in &lease.attachments {
            usage.add(Usage::of_attachment(attachment));
        }
        usage
    }

    fn add(&mut self, other: Usage) {
        self.leases = self.leases.saturating_add(other.leases);
        self.holdings = self.holdings.saturating_add(other.holdings);
        self.waiters = self.waiters.saturating_add(other.waiters);
    }

    fn sub(&mut self, other: Usage) {
        self.leases = self.leases.saturating_sub(other.leases);
        self.holdings = self.holdings.saturating_sub(other.holdings);
        self.waiters = self.waiters.saturating_sub(other.waiters);
    }
}

/// Usage by principal; principals with no lease have no entry.
pub(crate) type UsageTable = BTreeMap<String, Usage>;

impl StateMachine {
    /// What `principal` holds now.
    pub fn principal_usage(&self, principal: &str) -> Usage {
        self.usage.get(principal).copied().unwrap_or_default()
    }

    /// Whether the running counts equal a count from scratch. For tests: the
    /// property tests check it after every step.
    #[doc(hidden)]
    pub fn usage_is_consistent(&self) -> bool {
        self.usage == self.counted_usage()
    }

    fn counted_usage(&self) -> UsageTable {
        let mut table = UsageTable::new();
        for (lease_id, owner) in &self.lease_owners {
            if let Some(lease) = self.leases.get(lease_id) {
                table
                    .entry(owner.clone())
                    .or_default()
                    .add(Usage::of_lease(lease));
            }
        }
        table
    }

    /// Rebuilds the counts (after a snapshot is restored).
    pub(crate) fn recount_usage(&mut self) {
        self.usage = self.counted_usage();
    }

    /// `principal` now owns `lease_id`, with whatever is attached to it already.
    pub(crate) fn record_owner(&mut self, lease_id: LeaseId, principal: &str) {
        let Some(usage) = self.leases.get(&lease_id).map(Usage::of_lease) else {
            return;
        };
        if let Some(previous) = self.lease_owners.insert(lease_id, principal.to_owned()) {
            self.uncount(&previous, usage);
        }
        self.usage
            .entry(principal.to_owned())
            .or_default()
            .add(usage);
    }

    /// `lease`, just removed from the leases, no longer counts for its owner.
    pub(crate) fn forget_owner(&mut self, lease_id: LeaseId, lease: &Lease) {
        if let Some(owner) = self.lease_owners.remove(&lease_id) {
            self.uncount(&owner, Usage::of_lease(lease));
        }
    }

    /// `attachment` was added to (`add`) or taken from the lease `lease_id`.
    pub(crate) fn count_attachment(
        &mut self,
        lease_id: LeaseId,
        attachment: &Attachment,
        add: bool,
    ) {
        // No allocation on this path (every attach and detach of an owned
        // lease): an owner of a live lease always has an entry.
        let Some(owner) = self.lease_owners.get(&lease_id) else {
            return;
        };
        let Some(usage) = self.usage.get_mut(owner) else {
            return;
        };
        let change = Usage::of_attachment(attachment);
        if add {
            usage.add(change);
        } else {
            usage.sub(change);
        }
    }

    /// Takes `change` off `owner`'s counts; an owner left with no lease has no entry.
    fn uncount(&mut self, owner: &str, change: Usage) {
        if let Some(usage) = self.usage.get_mut(owner) {
            usage.sub(change);
            if usage.leases == 0 {
                self.usage.remove(owner);
            }
        }
    }
}
