//! Why a command was refused. Every variant maps to one stable API error code.

use serde::{Deserialize, Serialize};

/// A refusal by the state machine. Refused commands change nothing (except that an
/// idempotency record may remember the refusal); the time-driven changes that every
/// apply starts with (lock delays that ended) happen all the same, see
/// [`crate::StateMachine::apply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CoreError {
    /// The resource name breaks the naming rules.
    #[error("invalid name: {reason}")]
    InvalidName {
        /// Which rule.
        reason: String,
    },
    /// TTL outside the configured bounds.
    #[error("ttl_ms must be between {min_ms} and {max_ms}, got {ttl_ms}")]
    InvalidTtl {
        /// Requested.
        ttl_ms: u64,
        /// Lower bound.
        min_ms: u64,
        /// Upper bound.
        max_ms: u64,
    },
    /// A lock delay above the configured bound.
    #[error("lock_delay_ms must be at most {max_ms}, got {lock_delay_ms}")]
    InvalidLockDelay {
        /// Requested.
        lock_delay_ms: u64,
        /// Upper bound.
        max_ms: u64,
    },
    /// A value above the size limit.
    #[error("value is {size} bytes, the limit is {max}")]
    ValueTooLarge {
        /// Size of the value.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A holder identity above the size limit.
    #[error("holder is {size} bytes, the limit is {max}")]
    HolderTooLong {
        /// Size of the holder text.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// No such lease (never existed, revoked or expired).
    #[error("lease not found")]
    LeaseNotFound,
    /// The lease belongs to another principal (auth on).
    #[error("the lease belongs to another principal")]
    LeaseNotOwned,
    /// A lease with this id already exists (a proposer's id collision).
    #[error("lease already exists")]
    LeaseExists,
    /// The lock is held by someone else (or is in its lock delay).
    #[error("lock is held")]
    LockHeld {
        /// The current holder, `None` when the lock is free but in lock delay.
        holder: Option<String>,
        /// The current holder's token.
        token: Option<u64>,
    },
    /// The token does not belong to the lock's current holder.
    #[error("lock lost: the token is not the current holder's")]
    LockLost {
        /// The current holder's token, if the lock is held.
        current_token: Option<u64>,
    },
    /// Another candidate is leader.
    #[error("not elected")]
    NotElected {
        /// The current leader's candidate name.
        leader: Option<String>,
        /// The current leader's token.
        token: Option<u64>,
    },
    /// The (lease, token) pair is not the election's current leader.
    #[error("not the leader")]
    NotLeader,
    /// The name is registered by another lease.
    #[error("name is taken")]
    NameTaken {
        /// The owner.
        holder: String,
        /// The registration's token.
        token: u64,
    },
    /// The name is registered by another lease.
    #[error("not the owner of this name")]
    NotOwner,
    /// Nothing registered under that name.
    #[error("not found")]
    NotFound,
    /// The queued request is no longer queued (granted, cancelled, or never was).
    #[error("no such waiter")]
    WaiterNotFound,
    /// A per-lock or per-lease quota is exhausted.
    #[error("quota exceeded: {what}")]
    QuotaExceeded {
        /// Which quota.
        what: String,
    },
    /// The idempotency key was used before for a different request.
    #[error("idempotency key was used for a different request")]
    IdempotencyKeyReused,
    /// A force-release named a token that is not the current holder's.
    #[error("the current holder's token is {current_token}")]
    TokenMismatch {
        /// The current holder's token.
        current_token: u64,
    },
    /// An admission quota ([`crate::Quota`]) would be exceeded. Added last, so
    /// that remembered answers in older snapshots decode unchanged.
    #[error("quota exceeded: {what}")]
    QuotaReached {
        /// Which quota, in words.
        what: String,
        /// The cap.
        limit: u64,
    },
    /// An expiry decided by the leader of one term reached the log in another
    /// ([`crate::Command::ExpireLeaseOfTerm`]); nothing changed. Added last.
    #[error("expiry decided in term {decided_in} reached the log in term {written_in}")]
    ExpiryOutdated {
        /// The term whose leader decided it.
        decided_in: u64,
        /// The term of the entry that carried it.
        written_in: u64,
    },
    /// A semaphore acquire stated another limit than the one that stands (set
    /// by its first acquirer while anyone holds or waits). Added last.
    #[error("the semaphore's limit is {limit}")]
    LimitMismatch {
        /// The limit that stands.
        limit: u32,
    },
    /// A semaphore limit of 0 or above the maximum. Added last.
    #[error("limit must be between 1 and {max}, got {limit}")]
    InvalidLimit {
        /// Requested.
        limit: u32,
        /// Upper bound.
        max: u32,
    },
    /// Permits of 0 or more than the limit. Added last.
    #[error("permits must be between 1 and the limit {limit}, got {permits}")]
    InvalidPermits {
        /// Requested.
        permits: u32,
        /// The limit.
        limit: u32,
    },
    /// A multi-acquire's list of locks is empty, too long, or names a lock twice.
    /// Added last.
    #[error("invalid list of locks: {reason}")]
    InvalidLockList {
        /// Which rule.
        reason: String,
    },
    /// Not enough permits are free (or others wait first). Added last.
    #[error("the semaphore has {in_use} of {limit} permits out and {waiters} requests waiting")]
    SemaphoreFull {
        /// Permits out.
        in_use: u64,
        /// The limit.
        limit: u32,
        /// Requests in line.
        waiters: u64,
    },
    /// The (lease, token) pair holds no permits of this semaphore. Added last.
    #[error("permits lost: the token is not a current holder's")]
    PermitsLost,
    /// A lock of a multi-acquire is held by someone else (or waited for first,
    /// or in lock delay, or held by the same lease alone). Added last.
    #[error("lock '{name}' is held")]
    LocksHeld {
        /// The first lock that blocks.
        name: String,
        /// Its first holder, `None` while it is free but in lock delay or queued for.
        holder: Option<String>,
        /// That holder's token.
        token: Option<u64>,
    },
}
