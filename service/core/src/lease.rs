//! A lease and what hangs on it.

use std::hash::BuildHasherDefault;

use serde::{Deserialize, Serialize};

use crate::ids::{LeaseId, LeaseIdHasher, WaiterId};

/// Live leases by id. A persistent map, like the slots: a snapshot's copy of the
/// state shares it.
pub(crate) type Leases = imbl::GenericHashMap<
    LeaseId,
    Lease,
    BuildHasherDefault<LeaseIdHasher>,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// Something attached to a lease, released when the lease goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Attachment {
    /// Holds this lock.
    Lock(String),
    /// Waits in this lock's queue.
    LockWait(String, WaiterId),
    /// Owns this registered name.
    Name(String),
    /// Leads this election.
    Leader(String),
    /// Waits in this election's candidate queue.
    Candidacy(String, WaiterId),
    /// Holds permits of this semaphore. Added last (snapshots store attachments).
    Permits(String),
    /// Waits in this semaphore's queue. Added last.
    PermitWait(String, WaiterId),
}

impl Attachment {
    /// Whether it is a place in a queue rather than a holding.
    pub fn is_wait(&self) -> bool {
        matches!(
            self,
            Attachment::LockWait(..) | Attachment::Candidacy(..) | Attachment::PermitWait(..)
        )
    }
}

/// A lease as the state machine keeps it. The deadline is not here: it lives in the
/// leader's memory (keepalives cost no log write); only expiry is replicated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lease {
    pub ttl_ms: u64,
    pub holder: String,
    /// Created by an acquire/campaign/register for that holding alone: revoked when
    /// its last attachment goes.
    pub ephemeral: bool,
    /// A `Vec`, not a set: leases usually carry one to a few holdings, and a small
    /// vector costs a fraction of a tree node's memory.
    pub attachments: Vec<Attachment>,
}

impl Lease {
    pub fn attach(&mut self, attachment: Attachment) {
        // Most leases carry one holding: room for exactly one at first (a `Vec`
        // grows to four at its first push, 160 bytes where 40 do).
        if self.attachments.capacity() == 0 {
            self.attachments.reserve_exact(1);
        }
        self.attachments.push(attachment);
    }

    /// Removes `attachment`; false if the lease did not have it.
    pub fn detach(&mut self, attachment: &Attachment) -> bool {
        match self.attachments.iter().position(|a| a == attachment) {
            Some(index) => {
                self.attachments.swap_remove(index);
                true
            }
            None => false,
        }
    }

    /// Puts `new` in the place of `old` (or adds it); true if `old` was there.
    pub fn replace(&mut self, old: &Attachment, new: Attachment) -> bool {
        match self.attachments.iter_mut().find(|a| *a == old) {
            Some(slot) => {
                *slot = new;
                true
            }
            None => {
                self.attach(new);
                false
            }
        }
    }
}
