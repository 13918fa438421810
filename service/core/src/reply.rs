//! The proposer's answer for an accepted command, and typed accessors for it.
//!
//! [`Reply`] is one enum because it is stored (remembered answers for retried
//! idempotency keys, in the log and the snapshot) and sent between nodes. Callers
//! never match on all of it: each asks for the one shape its command can answer
//! with (`into_lock_released`, `into_claim`, ...), and gets the reply back as
//! `Err` when it had another shape, which is a bug in Baton, never bad input.
//!
//! The payload structs are serialized exactly like the struct variants they
//! replaced (postcard and JSON write a newtype variant's struct as the variant's
//! fields), so remembered answers written by earlier builds still read back:
//! `tests::payload_structs_keep_the_stored_layout` keeps it that way.

use serde::{Deserialize, Serialize};

use crate::ids::{LeaseId, WaiterId};
use crate::outcome::{Grant, Released};
use crate::slot::LockMode;

/// The proposer's answer for a command that was accepted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// A lease was created.
    LeaseCreated(LeaseCreated),
    /// A lease was revoked or expired, with what it took along, as builds
    /// before semaphores answered (kept so that their remembered answers read
    /// back; [`Reply::LeaseClosed`] is what is answered now).
    LeaseEnded {
        /// What was released.
        released: StoredReleased,
    },
    /// The lock was granted now (or was already held by this lease).
    LockGranted(Grant),
    /// The lock is held; the request waits in the queue.
    LockQueued {
        /// The queued request.
        waiter: WaiterId,
        /// The lease it hangs on (created by the command, perhaps).
        lease_id: LeaseId,
        /// The current holder's identity.
        holder: Option<String>,
        /// The current holder's token.
        token: Option<u64>,
    },
    /// The lock was released.
    LockReleased,
    /// A queued request left the queue.
    WaitCancelled,
    /// The candidate is the leader.
    Elected {
        /// The grant.
        grant: Grant,
        /// The published value (JSON text).
        value: String,
    },
    /// Another candidate leads; this candidacy waits in the queue.
    CampaignQueued {
        /// The queued candidacy.
        waiter: WaiterId,
        /// The lease it hangs on.
        lease_id: LeaseId,
        /// The current leader's candidate name.
        leader: Option<String>,
    },
    /// The leader's value was updated.
    Proclaimed(Proclaimed),
    /// The leader stepped down.
    Resigned,
    /// A name was registered (`created`) or its value updated by its owner.
    NameRegistered(NameRegistered),
    /// The name was unregistered.
    NameUnregistered,
    /// Time-driven rules ran.
    Ticked,
    /// The cluster's id (the one already set, if any).
    ClusterId {
        /// The id that stands.
        cluster_id: String,
    },
    /// An admin ended this holding.
    ForceReleased(ForceReleased),
    /// Every lock of an `AcquireLocks` was granted now (or was already held by
    /// this lease), in the order the request named them. Added last: remembered
    /// answers of older builds decode unchanged.
    LocksGranted(Vec<HeldLock>),
    /// At least one lock of an `AcquireLocks` cannot be granted now; the
    /// request waits in every line. Added last.
    LocksQueued {
        /// The queued request (its id in every line).
        waiter: WaiterId,
        /// The lease it hangs on.
        lease_id: LeaseId,
        /// The first lock that blocks it.
        name: String,
        /// That lock's first holder.
        holder: Option<String>,
        /// That holder's token.
        token: Option<u64>,
    },
    /// Permits of a semaphore were granted (or were already held by this lease).
    /// Added last.
    PermitsGranted(PermitGrant),
    /// Not enough permits are free, or others are in line first: the request
    /// waits. Added last.
    PermitsQueued {
        /// The queued request.
        waiter: WaiterId,
        /// The lease it hangs on.
        lease_id: LeaseId,
        /// Permits out now.
        in_use: u64,
        /// The semaphore's limit.
        limit: u32,
    },
    /// A semaphore holding gave its permits back. Added last.
    PermitsReleased,
    /// A lease was revoked or expired, with what it took along. Added last.
    LeaseClosed(Released),
    /// Leases expired together ([`crate::Command::ExpireLeasesOfTerm`]): how
    /// many were still there to end. What they held is in the events. Added last.
    LeasesExpired {
        /// Leases ended (the others were already gone).
        ended: u64,
    },
}

/// [`Released`] as builds before semaphores stored it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredReleased {
    /// Locks it held.
    pub locks: Vec<String>,
    /// Names it had registered.
    pub names: Vec<String>,
    /// Elections it led or stood in.
    pub elections: Vec<String>,
}

/// A granted lock of an `AcquireLocks`, with how it is held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldLock {
    /// The grant (its own token).
    pub grant: Grant,
    /// Exclusive or shared.
    pub mode: LockMode,
}

/// Answer to `AcquirePermits`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitGrant {
    /// The grant (its own token).
    pub grant: Grant,
    /// Permits held.
    pub permits: u32,
    /// The semaphore's limit.
    pub limit: u32,
}

/// The immediate answer to an `AcquireLocks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocksClaimed {
    /// Every lock granted now.
    Granted(Vec<HeldLock>),
    /// Queued (or refused, when it asked not to wait): the first lock in the way.
    Queued {
        /// That lock.
        name: String,
        /// Its first holder.
        holder: Option<String>,
        /// That holder's token.
        token: Option<u64>,
    },
}

/// The immediate answer to an `AcquirePermits`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PermitsClaimed {
    /// Granted now.
    Granted(PermitGrant),
    /// Queued (or refused, when it asked not to wait).
    Queued {
        /// Permits out.
        in_use: u64,
        /// The semaphore's limit.
        limit: u32,
    },
}

/// Answer to `CreateLease`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseCreated {
    /// Its id.
    pub lease_id: LeaseId,
    /// Its TTL.
    pub ttl_ms: u64,
    /// Its holder.
    pub holder: String,
}

/// Answer to `Proclaim`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proclaimed {
    /// Election name.
    pub name: String,
    /// The leader's token.
    pub token: u64,
    /// The new value (JSON text).
    pub value: String,
}

/// Answer to `Register`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameRegistered {
    /// The grant (token is the first registration's revision).
    pub grant: Grant,
    /// The registered value (JSON text).
    pub value: String,
    /// `true` for a new registration, `false` for an update by its owner.
    pub created: bool,
}

/// Answer to `ForceRelease`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForceReleased {
    /// The ended holding's token.
    pub token: u64,
    /// Its holder.
    pub holder: String,
}

/// The immediate answer to a claim (`Acquire` or `Campaign`): held now, or queued
/// behind someone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// Granted (or elected) now; `value` is the leader's value for an election.
    Granted {
        /// The grant.
        grant: Grant,
        /// The published value of an election; `None` for a lock.
        value: Option<String>,
    },
    /// Held by another; the request is queued (or was refused, when it asked
    /// not to wait and the queue entry ended at once).
    Queued {
        /// The current holder (lock) or leader (election).
        holder: Option<String>,
        /// The current holder's token (locks only).
        token: Option<u64>,
    },
}

impl Reply {
    /// The answer to `CreateLease`.
    pub fn into_lease_created(self) -> Result<LeaseCreated, Reply> {
        match self {
            Reply::LeaseCreated(created) => Ok(created),
            other => Err(other),
        }
    }

    /// The answer to `RevokeLease`: what the lease took along.
    pub fn into_lease_ended(self) -> Result<Released, Reply> {
        match self {
            Reply::LeaseClosed(released) => Ok(released),
            Reply::LeaseEnded { released } => Ok(Released {
                locks: released.locks,
                names: released.names,
                elections: released.elections,
                semaphores: Vec::new(),
            }),
            other => Err(other),
        }
    }

    /// The answer to `AcquireLocks`.
    pub fn into_locks_claim(self) -> Result<LocksClaimed, Reply> {
        match self {
            Reply::LocksGranted(held) => Ok(LocksClaimed::Granted(held)),
            Reply::LocksQueued {
                name,
                holder,
                token,
                ..
            } => Ok(LocksClaimed::Queued {
                name,
                holder,
                token,
            }),
            other => Err(other),
        }
    }

    /// The answer to `AcquirePermits`.
    pub fn into_permits_claim(self) -> Result<PermitsClaimed, Reply> {
        match self {
            Reply::PermitsGranted(grant) => Ok(PermitsClaimed::Granted(grant)),
            Reply::PermitsQueued { in_use, limit, .. } => {
                Ok(PermitsClaimed::Queued { in_use, limit })
            }
            other => Err(other),
        }
    }

    /// The answer to `ReleasePermits`.
    pub fn into_permits_released(self) -> Result<(), Reply> {
        match self {
            Reply::PermitsReleased => Ok(()),
            other => Err(other),
        }
    }

    /// The answer to `Acquire` or `Campaign`.
    pub fn into_claim(self) -> Result<Claimed, Reply> {
        match self {
            Reply::LockGranted(grant) => Ok(Claimed::Granted { grant, value: None }),
            Reply::Elected { grant, value } => Ok(Claimed::Granted {
                grant,
                value: Some(value),
            }),
            Reply::LockQueued { holder, token, .. } => Ok(Claimed::Queued { holder, token }),
            Reply::CampaignQueued { leader, .. } => Ok(Claimed::Queued {
                holder: leader,
                token: None,
            }),
            other => Err(other),
        }
    }

    /// The answer to `Release`.
    pub fn into_lock_released(self) -> Result<(), Reply> {
        match self {
            Reply::LockReleased => Ok(()),
            other => Err(other),
        }
    }

    /// The answer to `Proclaim`.
    pub fn into_proclaimed(self) -> Result<Proclaimed, Reply> {
        match self {
            Reply::Proclaimed(proclaimed) => Ok(proclaimed),
            other => Err(other),
        }
    }

    /// The answer to `Resign`.
    pub fn into_resigned(self) -> Result<(), Reply> {
        match self {
            Reply::Resigned => Ok(()),
            other => Err(other),
        }
    }

    /// The answer to `Register`.
    pub fn into_name_registered(self) -> Result<NameRegistered, Reply> {
        match self {
            Reply::NameRegistered(registered) => Ok(registered),
            other => Err(other),
        }
    }

    /// The answer to `Unregister`.
    pub fn into_name_unregistered(self) -> Result<(), Reply> {
        match self {
            Reply::NameUnregistered => Ok(()),
            other => Err(other),
        }
    }

    /// The answer to `ForceRelease`.
    pub fn into_force_released(self) -> Result<ForceReleased, Reply> {
        match self {
            Reply::ForceReleased(released) => Ok(released),
            other => Err(other),
        }
    }

    /// The answer to `SetClusterId`: the id that stands.
    pub fn into_cluster_id(self) -> Result<String, Reply> {
        match self {
            Reply::ClusterId { cluster_id } => Ok(cluster_id),
            other => Err(other),
        }
    }

    /// The queued request's id, when the reply says it waits in a queue.
    pub fn queued_waiter(&self) -> Option<WaiterId> {
        match self {
            Reply::LockQueued { waiter, .. }
            | Reply::CampaignQueued { waiter, .. }
            | Reply::LocksQueued { waiter, .. }
            | Reply::PermitsQueued { waiter, .. } => Some(*waiter),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shapes these variants had before they carried a payload struct. The
    /// variants never built here still count: their order sets the tags.
    #[derive(Serialize)]
    #[allow(dead_code)]
    enum StoredLayout {
        LeaseCreated {
            lease_id: LeaseId,
            ttl_ms: u64,
            holder: String,
        },
        LeaseEnded {
            released: Released,
        },
        LockGranted(Grant),
        LockQueued {
            waiter: WaiterId,
            lease_id: LeaseId,
            holder: Option<String>,
            token: Option<u64>,
        },
        LockReleased,
        WaitCancelled,
        Elected {
            grant: Grant,
            value: String,
        },
        CampaignQueued {
            waiter: WaiterId,
            lease_id: LeaseId,
            leader: Option<String>,
        },
        Proclaimed {
            name: String,
            token: u64,
            value: String,
        },
        Resigned,
        NameRegistered {
            grant: Grant,
            value: String,
            created: bool,
        },
        NameUnregistered,
        Ticked,
        ClusterId {
            cluster_id: String,
        },
        ForceReleased {
            token: u64,
            holder: String,
        },
    }

    fn grant() -> Grant {
        Grant {
            name: "n".into(),
            token: 7,
            lease_id: LeaseId(9),
            ttl_ms: 1000,
            holder: "h".into(),
        }
    }

    fn same_bytes(now: Reply, before: StoredLayout) {
        let encoded = postcard::to_allocvec(&now).expect("encode");
        assert_eq!(encoded, postcard::to_allocvec(&before).expect("encode"));
        assert_eq!(
            postcard::from_bytes::<Reply>(&encoded).expect("decode"),
            now
        );
        assert_eq!(
            serde_json::to_string(&now).expect("json"),
            serde_json::to_string(&before).expect("json")
        );
    }

    #[test]
    fn payload_structs_keep_the_stored_layout() {
        same_bytes(
            Reply::LeaseCreated(LeaseCreated {
                lease_id: LeaseId(3),
                ttl_ms: 500,
                holder: "h".into(),
            }),
            StoredLayout::LeaseCreated {
                lease_id: LeaseId(3),
                ttl_ms: 500,
                holder: "h".into(),
            },
        );
        same_bytes(
            Reply::Proclaimed(Proclaimed {
                name: "e".into(),
                token: 4,
                value: "{}".into(),
            }),
            StoredLayout::Proclaimed {
                name: "e".into(),
                token: 4,
                value: "{}".into(),
            },
        );
        same_bytes(
            Reply::NameRegistered(NameRegistered {
                grant: grant(),
                value: "1".into(),
                created: true,
            }),
            StoredLayout::NameRegistered {
                grant: grant(),
                value: "1".into(),
                created: true,
            },
        );
        same_bytes(
            Reply::ForceReleased(ForceReleased {
                token: 5,
                holder: "h".into(),
            }),
            StoredLayout::ForceReleased {
                token: 5,
                holder: "h".into(),
            },
        );
        // Variant order decides the tag: a unit variant after the changed ones.
        same_bytes(Reply::Ticked, StoredLayout::Ticked);
        same_bytes(
            Reply::LockGranted(grant()),
            StoredLayout::LockGranted(grant()),
        );
    }

    #[test]
    fn an_accessor_hands_back_a_reply_of_another_shape() {
        assert_eq!(Reply::Resigned.into_resigned(), Ok(()));
        assert_eq!(
            Reply::Resigned.into_lock_released(),
            Err(Reply::Resigned),
            "a reply for another command is returned, not dropped"
        );
        let queued = Reply::CampaignQueued {
            waiter: WaiterId(1),
            lease_id: LeaseId(2),
            leader: Some("a".into()),
        };
        assert_eq!(queued.queued_waiter(), Some(WaiterId(1)));
        assert_eq!(
            queued.into_claim(),
            Ok(Claimed::Queued {
                holder: Some("a".into()),
                token: None
            })
        );
    }
}
