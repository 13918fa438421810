//! What applying a command produced: the reply for its proposer and the events
//! for everyone else (waiting requests, watch streams, the lease clock).

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::ids::{LeaseId, WaiterId};
use crate::reply::Reply;
use crate::slot::LockMode;

/// The result of applying one [`crate::Request`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The state machine's revision after this request.
    pub revision: u64,
    /// The answer for the proposer.
    pub result: Result<Reply, CoreError>,
    /// `true` when this is a recorded answer returned for a retried idempotency key.
    pub replayed: bool,
    /// Every state change this request caused, in order, each with its own revision.
    pub events: Vec<Event>,
}

/// A lock grant (or an election win): what the holder needs to use and keep it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// Lock or election name.
    pub name: String,
    /// Fencing token: the revision at which the grant happened.
    pub token: u64,
    /// The lease it hangs on.
    pub lease_id: LeaseId,
    /// That lease's TTL.
    pub ttl_ms: u64,
    /// Who holds it.
    pub holder: String,
}

/// Everything that was attached to a lease when it went away.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// Locks it held.
    pub locks: Vec<String>,
    /// Names it had registered.
    pub names: Vec<String>,
    /// Elections it led or stood in.
    pub elections: Vec<String>,
    /// Semaphores it held permits of.
    pub semaphores: Vec<String>,
}

/// Why a holding ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    /// Its holder released / resigned / unregistered it, or cancelled its wait.
    Released,
    /// Its lease was revoked.
    Revoked,
    /// Its lease expired.
    Expired,
    /// An admin force-released it (the lease lives on).
    ForceReleased,
}

/// One state change, with the revision it happened at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The revision this change created.
    pub revision: u64,
    /// What changed.
    pub kind: EventKind,
}

/// The kinds of state change. Lease ids appear here for the server's own use
/// (waking requests, the lease clock); watch streams must strip them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum EventKind {
    /// A lease was created.
    LeaseCreated {
        /// The lease.
        lease_id: LeaseId,
        /// Its TTL.
        ttl_ms: u64,
        /// Its holder.
        holder: String,
    },
    /// A lease ended.
    LeaseEnded {
        /// The lease.
        lease_id: LeaseId,
        /// Its holder.
        holder: String,
        /// Revoked or expired.
        reason: EndReason,
    },
    /// A lock was granted.
    LockAcquired {
        /// The grant (its token is this event's revision).
        grant: Grant,
        /// The queued request that got it, if it came from the queue.
        waiter: Option<WaiterId>,
        /// Exclusive or shared. (Outcomes travel between nodes as JSON: a node
        /// of an older build sends none, which is exclusive.)
        #[serde(default)]
        mode: LockMode,
    },
    /// A request joined a lock's queue.
    LockQueued {
        /// Lock name.
        name: String,
        /// The queued request.
        waiter: WaiterId,
    },
    /// A lock was released.
    LockReleased {
        /// Lock name.
        name: String,
        /// The released grant's token.
        token: u64,
        /// Why.
        reason: EndReason,
    },
    /// A request left a lock's queue without being granted.
    LockWaitEnded {
        /// Lock name.
        name: String,
        /// The queued request.
        waiter: WaiterId,
        /// Cancelled, or its lease went.
        reason: EndReason,
    },
    /// A candidate was elected.
    Elected {
        /// The grant (token = this event's revision).
        grant: Grant,
        /// The leader's value.
        value: String,
        /// The queued candidacy that won, if it came from the queue.
        waiter: Option<WaiterId>,
    },
    /// A candidacy joined an election's queue.
    CandidateQueued {
        /// Election name.
        name: String,
        /// The queued candidacy.
        waiter: WaiterId,
    },
    /// The leader published a new value.
    Proclaimed {
        /// Election name.
        name: String,
        /// The leader's token.
        token: u64,
        /// The new value.
        value: String,
    },
    /// A leader stepped down or lost its lease.
    LeaderEnded {
        /// Election name.
        name: String,
        /// The leader's token.
        token: u64,
        /// Why.
        reason: EndReason,
    },
    /// A candidacy left the queue without being elected.
    CampaignEnded {
        /// Election name.
        name: String,
        /// The queued candidacy.
        waiter: WaiterId,
        /// Cancelled, or its lease went.
        reason: EndReason,
    },
    /// A name was registered or its value updated.
    NameRegistered {
        /// The grant.
        grant: Grant,
        /// The value.
        value: String,
        /// New registration or update.
        created: bool,
    },
    /// Permits of a semaphore were granted.
    SemaphoreAcquired {
        /// The grant (token = this event's revision).
        grant: Grant,
        /// Permits it took.
        permits: u32,
        /// The semaphore's limit.
        limit: u32,
        /// The queued request that got them, if it came from the queue.
        waiter: Option<WaiterId>,
    },
    /// A request joined a semaphore's queue.
    SemaphoreQueued {
        /// Semaphore name.
        name: String,
        /// The queued request.
        waiter: WaiterId,
    },
    /// A holding of a semaphore ended and its permits were given back.
    SemaphoreReleased {
        /// Semaphore name.
        name: String,
        /// The holding's token.
        token: u64,
        /// The permits it gave back.
        permits: u32,
        /// Why.
        reason: EndReason,
    },
    /// A request left a semaphore's queue without being granted.
    SemaphoreWaitEnded {
        /// Semaphore name.
        name: String,
        /// The queued request.
        waiter: WaiterId,
        /// Cancelled, or its lease went.
        reason: EndReason,
    },
    /// A name was unregistered.
    NameUnregistered {
        /// The name.
        name: String,
        /// The registration's token.
        token: u64,
        /// Why.
        reason: EndReason,
    },
}
