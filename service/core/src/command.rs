//! What replicas apply: batches of requests, each a command with an optional
//! idempotency key.

use serde::{Deserialize, Serialize};

use crate::ids::{LeaseId, WaiterId};
use crate::limits::Limits;
use crate::quota::Quota;
use crate::slot::LockMode;

/// One Raft log entry's worth of work: many client requests sharing one fsync.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// Wall-clock milliseconds since the Unix epoch, stamped by the leader that
    /// proposed the batch. The only notion of time the state machine ever sees.
    pub now_ms: u64,
    /// The bounds every request in this batch is judged against.
    pub limits: Limits,
    /// The requests, applied in order; each gets its own [`crate::Outcome`].
    pub requests: Vec<Request>,
}

/// A command plus what makes a retry of it safe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Present when the client sent an `Idempotency-Key`.
    pub idempotency: Option<IdempotencyKey>,
    /// The mutation itself.
    pub command: Command,
}

impl Request {
    /// A request without an idempotency key.
    pub fn plain(command: Command) -> Self {
        Request {
            idempotency: None,
            command,
        }
    }
}

/// Identifies a client's retries of one mutation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyKey {
    /// Who sent it (the authenticated principal; `""` when auth is off).
    pub principal: String,
    /// The client's key, 1..=128 printable characters.
    pub key: String,
    /// A hash of the request (method, path, body), so that reusing the key for a
    /// different request is detected.
    pub fingerprint: u64,
}

/// Which lease a holding hangs on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseRef {
    /// An existing lease, named by the caller.
    Existing(LeaseId),
    /// A lease created by this very command for this holding alone; it is revoked
    /// when the holding goes (release, resign, unregister, cancelled wait).
    New {
        /// Chosen by the proposer from a CSPRNG.
        lease_id: LeaseId,
        /// Requested TTL.
        ttl_ms: u64,
    },
}

/// One lock of a multi-acquire, and how it is to be held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRequest {
    /// Lock name.
    pub name: String,
    /// Exclusive or shared.
    pub mode: LockMode,
}

impl LeaseRef {
    /// The lease id either way.
    pub fn id(&self) -> LeaseId {
        match self {
            LeaseRef::Existing(id) => *id,
            LeaseRef::New { lease_id, .. } => *lease_id,
        }
    }
}

/// Every mutation the state machine knows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Name the cluster, unless it already has a name (the first one applied
    /// stays). Proposed by nodes that find the state without one.
    SetClusterId {
        /// A random id.
        cluster_id: String,
    },
    /// Create a lease.
    CreateLease {
        /// Chosen by the proposer from a CSPRNG.
        lease_id: LeaseId,
        /// Requested TTL.
        ttl_ms: u64,
        /// Free-text identity shown to others.
        holder: String,
    },
    /// Revoke a lease at its holder's request, releasing everything on it.
    RevokeLease {
        /// The lease.
        lease_id: LeaseId,
    },
    /// Expire a lease whose deadline passed on the leader's monotonic clock.
    ExpireLease {
        /// The lease.
        lease_id: LeaseId,
    },
    /// Acquire an exclusive lock, or queue for it.
    Acquire {
        /// Lock name.
        name: String,
        /// The lease the grant hangs on.
        lease: LeaseRef,
        /// Who holds it; defaults to the lease's holder.
        holder: Option<String>,
        /// `Some` to queue when the lock is held; `None` to fail at once.
        waiter: Option<WaiterId>,
        /// How long the lock stays ungrantable after this grant's lease expires.
        lock_delay_ms: u64,
    },
    /// Release a held lock.
    Release {
        /// Lock name.
        name: String,
        /// The holder's lease.
        lease_id: LeaseId,
        /// The holder's fencing token.
        token: u64,
    },
    /// Leave a lock's queue (wait timed out, or the client went away).
    CancelWait {
        /// Lock name.
        name: String,
        /// The queued request.
        waiter: WaiterId,
    },
    /// Stand for election, or queue as a candidate.
    Campaign {
        /// Election name.
        name: String,
        /// The lease the candidacy hangs on.
        lease: LeaseRef,
        /// The candidate's identity.
        candidate: String,
        /// The value the leader publishes (JSON text).
        value: String,
        /// `Some` to queue when another leader is elected; `None` to fail at once.
        waiter: Option<WaiterId>,
    },
    /// Publish a new value as the elected leader.
    Proclaim {
        /// Election name.
        name: String,
        /// The leader's lease.
        lease_id: LeaseId,
        /// The leader's token.
        token: u64,
        /// The new value (JSON text).
        value: String,
    },
    /// Step down as leader; the next candidate in line is elected.
    Resign {
        /// Election name.
        name: String,
        /// The leader's lease.
        lease_id: LeaseId,
        /// The leader's token.
        token: u64,
    },
    /// Leave an election's candidate queue.
    CancelCampaign {
        /// Election name.
        name: String,
        /// The queued candidacy.
        waiter: WaiterId,
    },
    /// Register a cluster-unique name (or update its value, by the same lease).
    Register {
        /// The name.
        name: String,
        /// The lease the registration hangs on.
        lease: LeaseRef,
        /// Who owns it; defaults to the lease's holder.
        holder: Option<String>,
        /// The registered value (JSON text).
        value: String,
    },
    /// Unregister a name owned by this lease.
    Unregister {
        /// The name.
        name: String,
        /// The owner's lease.
        lease_id: LeaseId,
    },
    /// Let time-driven rules run: grants held back by a lock delay that has passed,
    /// and forgetting idempotency records older than their retention. Every command
    /// runs these rules first; `Tick` is the command that does nothing else, which
    /// the leader proposes when [`crate::StateMachine::next_timer_ms`] comes.
    Tick,
    /// A command sent by an authenticated principal (auth on): the state machine
    /// records the principal as the owner of any lease the command creates, and
    /// refuses the command if it presents a lease another principal owns. Added
    /// after every other variant so that logs written before it decode unchanged.
    AsPrincipal {
        /// The principal's name from the auth file.
        principal: String,
        /// What it asks for (never another `AsPrincipal`).
        command: Box<Command>,
    },
    /// An admin ends the current holding of a lock, election or name.
    ForceRelease {
        /// Which kind of name.
        kind: crate::force_release::HoldingKind,
        /// The name.
        name: String,
        /// When set, only if this is the current holder's token.
        expected_token: Option<u64>,
    },
    /// A command admitted under quotas: by `principal` (as [`Command::AsPrincipal`]
    /// when set; `None` with auth off), refused if it would exceed `quota`. What
    /// nodes send since quotas exist; added last so that older logs decode
    /// unchanged.
    Within {
        /// The principal's name from the auth file; `None` with auth off.
        principal: Option<String>,
        /// The caps it is judged against.
        quota: Quota,
        /// What it asks for (never another wrapper).
        command: Box<Command>,
    },
    /// Expire a lease whose deadline passed on the clock of the leader of
    /// `term`. Applied only from a log entry of that same term: a new term
    /// restarts every lease at a full TTL, so an expiry decided before it and
    /// written after it (queued across a re-election of the same node) is stale
    /// and changes nothing. Added last, so that older logs decode unchanged.
    ExpireLeaseOfTerm {
        /// The lease.
        lease_id: LeaseId,
        /// The term whose leader's clock decided the expiry.
        term: u64,
    },
    /// Acquire several locks, each exclusive or shared, all together or none,
    /// or queue for all of them (one lock in shared mode is a list of one).
    /// Added last, so that older logs decode unchanged; an exclusive acquire of
    /// one lock is still [`Command::Acquire`].
    AcquireLocks {
        /// The locks, in the order the answer lists them (distinct names).
        locks: Vec<LockRequest>,
        /// The lease every grant hangs on.
        lease: LeaseRef,
        /// Who holds them; defaults to the lease's holder.
        holder: Option<String>,
        /// `Some` to queue when any of them cannot be granted; `None` to fail at once.
        waiter: Option<WaiterId>,
        /// How long each lock stays ungrantable after this lease expires.
        lock_delay_ms: u64,
    },
    /// Take `permits` of semaphore `name`, or queue for them. Added last.
    AcquirePermits {
        /// Semaphore name.
        name: String,
        /// The lease the permits hang on.
        lease: LeaseRef,
        /// Who holds them; defaults to the lease's holder.
        holder: Option<String>,
        /// The semaphore's limit as the caller knows it (the first acquirer's stands).
        limit: u32,
        /// Permits to take, 1..=limit.
        permits: u32,
        /// `Some` to queue when not enough are free; `None` to fail at once.
        waiter: Option<WaiterId>,
    },
    /// Give back permits of a semaphore. Added last.
    ReleasePermits {
        /// Semaphore name.
        name: String,
        /// The holder's lease.
        lease_id: LeaseId,
        /// The holder's fencing token.
        token: u64,
    },
    /// Leave a semaphore's queue. Added last.
    CancelPermitWait {
        /// Semaphore name.
        name: String,
        /// The queued request.
        waiter: WaiterId,
    },
    /// Expire several leases whose deadlines passed on the clock of the leader
    /// of `term`, in order, each as [`Command::ExpireLeaseOfTerm`] would; a
    /// lease already gone is skipped. The lease clock's proposal: one request
    /// for many expiries, its size bounded by the clock, so that an expiry
    /// storm is applied in slices between client requests rather than as one
    /// reply, one task and one proposal per lease (issue 19). Added last.
    ExpireLeasesOfTerm {
        /// The leases, most overdue first.
        lease_ids: Vec<LeaseId>,
        /// The term whose leader's clock decided the expiries.
        term: u64,
    },
}

/// The log version of this build: the newest commands it proposes and decodes.
///
/// Builds that differ only in what they can *read* share a version; a build that
/// adds a command a leader may propose raises it, and [`Command::log_version`]
/// names the version that command needs. Every node tells its peers its version
/// on each peer answer, and a leader proposes a command only when every member
/// has said it can decode it: an older follower cannot parse an entry with a
/// command it does not know, refuses every append that carries it, and with a
/// quorum of such followers nothing commits until they are upgraded.
///
/// - 0: builds before this field (and an answer that does not say).
/// - 1: [`Command::ExpireLeasesOfTerm`].
pub const LOG_VERSION: u32 = 1;

impl Command {
    /// The oldest log version ([`LOG_VERSION`]) whose builds decode this
    /// command: a leader proposes it only to a cluster all of that version or
    /// newer.
    pub fn log_version(&self) -> u32 {
        match self {
            Command::ExpireLeasesOfTerm { .. } => 1,
            Command::AsPrincipal { command, .. } | Command::Within { command, .. } => {
                command.log_version()
            }
            _ => 0,
        }
    }

    /// The lease this command creates, if any, with its TTL.
    pub fn created_lease(&self) -> Option<(LeaseId, u64)> {
        match self {
            Command::CreateLease {
                lease_id, ttl_ms, ..
            } => Some((*lease_id, *ttl_ms)),
            Command::Acquire { lease, .. }
            | Command::Campaign { lease, .. }
            | Command::Register { lease, .. }
            | Command::AcquireLocks { lease, .. }
            | Command::AcquirePermits { lease, .. } => match lease {
                LeaseRef::New { lease_id, ttl_ms } => Some((*lease_id, *ttl_ms)),
                LeaseRef::Existing(_) => None,
            },
            Command::AsPrincipal { command, .. } | Command::Within { command, .. } => {
                command.created_lease()
            }
            _ => None,
        }
    }

    /// The existing lease this command acts through, if any: the lease whose owner
    /// must be the caller. Expiry is the leader's doing, not a caller's.
    pub fn presented_lease(&self) -> Option<LeaseId> {
        match self {
            Command::RevokeLease { lease_id }
            | Command::Release { lease_id, .. }
            | Command::Proclaim { lease_id, .. }
            | Command::Resign { lease_id, .. }
            | Command::Unregister { lease_id, .. }
            | Command::ReleasePermits { lease_id, .. } => Some(*lease_id),
            Command::Acquire { lease, .. }
            | Command::Campaign { lease, .. }
            | Command::Register { lease, .. }
            | Command::AcquireLocks { lease, .. }
            | Command::AcquirePermits { lease, .. } => match lease {
                LeaseRef::Existing(id) => Some(*id),
                LeaseRef::New { .. } => None,
            },
            Command::AsPrincipal { command, .. } | Command::Within { command, .. } => {
                command.presented_lease()
            }
            _ => None,
        }
    }

    /// How many holdings (held locks, leaderships, names, semaphore holdings)
    /// this command adds, and whether it may queue for them instead:
    /// `(holdings, may_wait)`.
    pub fn adds_holdings(&self) -> (u64, bool) {
        match self {
            Command::Acquire { waiter, .. }
            | Command::Campaign { waiter, .. }
            | Command::AcquirePermits { waiter, .. } => (1, waiter.is_some()),
            Command::AcquireLocks { locks, waiter, .. } => (locks.len() as u64, waiter.is_some()),
            Command::Register { .. } => (1, false),
            Command::AsPrincipal { command, .. } | Command::Within { command, .. } => {
                command.adds_holdings()
            }
            _ => (0, false),
        }
    }

    /// Whether this command wraps another ([`Command::AsPrincipal`],
    /// [`Command::Within`]).
    pub fn is_wrapper(&self) -> bool {
        matches!(self, Command::AsPrincipal { .. } | Command::Within { .. })
    }

    /// The principal and quota of a [`Command::Within`].
    pub fn admission(&self) -> Option<(Option<&str>, &Quota)> {
        match self {
            Command::Within {
                principal, quota, ..
            } => Some((principal.as_deref(), quota)),
            _ => None,
        }
    }

    /// Wraps the command as admitted for `principal` (`None` with auth off)
    /// under `quota`.
    pub fn within(self, principal: Option<&str>, quota: Quota) -> Command {
        Command::Within {
            principal: principal.map(str::to_owned),
            quota,
            command: Box::new(self),
        }
    }

    /// Wraps the command as sent by `principal`; `None` (auth off) leaves it as is.
    pub fn by(self, principal: Option<&str>) -> Command {
        match principal {
            Some(principal) => Command::AsPrincipal {
                principal: principal.to_owned(),
                command: Box::new(self),
            },
            None => self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_batched_expiry_needs_a_newer_log_version_even_when_wrapped() {
        let batched = Command::ExpireLeasesOfTerm {
            lease_ids: vec![LeaseId(1)],
            term: 3,
        };
        assert_eq!(batched.log_version(), 1);
        let wrapped = Command::Within {
            principal: None,
            quota: Quota::default(),
            command: Box::new(batched),
        };
        assert_eq!(wrapped.log_version(), 1);
        let single = Command::ExpireLeaseOfTerm {
            lease_id: LeaseId(1),
            term: 3,
        };
        assert_eq!(single.log_version(), 0, "every build decodes it");
        assert!(
            wrapped.log_version() <= LOG_VERSION,
            "a build proposes nothing newer than it is"
        );
    }
}
