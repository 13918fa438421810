//! What a follower asks of the leader over the peer listener, and the answers.
//!
//! Followers never proxy HTTP: they send the already-parsed [`Request`] (or a
//! read-index, keepalive or membership call) to the leader and build the client's
//! response locally from the leader's answer. Waiting requests therefore stay on
//! the node the client talks to and are woken by that node's own apply, so they
//! survive a change of leader.

use baton_core::{LeaseId, Outcome, Request};
use baton_store::BatonNode;
use serde::{Deserialize, Serialize};

use crate::error::RaftLayerError;

/// A call only the leader can answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum LeaderCall {
    /// Propose a client request through the log.
    Propose(Request),
    /// Confirm leadership with a quorum and return the index a linearizable read
    /// must wait for.
    ReadIndex,
    /// Move a lease's deadline to a full TTL from now; `None` when unknown.
    KeepAlive(LeaseId),
    /// Time left on a lease by the leader's clock, in milliseconds.
    Remaining(LeaseId),
    /// Add a node (learner, then voter once caught up), or update its addresses.
    AddMember {
        /// Raft id.
        id: u64,
        /// Where to reach it.
        node: BatonNode,
        /// Promote to voter once caught up.
        voter: bool,
    },
    /// Remove a node from the cluster.
    RemoveMember {
        /// Raft id.
        id: u64,
    },
    /// Sent by a leader handing over before it shuts down, to the voter it chose:
    /// start an election now. Answered by any node.
    Campaign,
}

/// The leader's answer to a [`LeaderCall`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum LeaderAnswer {
    /// The applied outcome of a proposal.
    Outcome(Outcome),
    /// The log index a linearizable read must wait for.
    ReadIndex(u64),
    /// The lease's TTL in milliseconds, if it exists.
    KeepAlive(Option<u64>),
    /// Remaining time in milliseconds, if the lease exists.
    Remaining(Option<u64>),
    /// A membership change completed.
    MembershipChanged,
    /// The election was started.
    Campaigning,
}

// The `Err` of each accessor hands back an answer of another shape, only to be
// logged as a bug; it is as large as the `Ok` path's answer and is moved once.
#[allow(clippy::result_large_err)]
impl LeaderAnswer {
    /// The answer to [`LeaderCall::Propose`].
    pub fn into_outcome(self) -> Result<Outcome, LeaderAnswer> {
        match self {
            LeaderAnswer::Outcome(outcome) => Ok(outcome),
            other => Err(other),
        }
    }

    /// The answer to [`LeaderCall::ReadIndex`].
    pub fn into_read_index(self) -> Result<u64, LeaderAnswer> {
        match self {
            LeaderAnswer::ReadIndex(index) => Ok(index),
            other => Err(other),
        }
    }

    /// The answer to [`LeaderCall::KeepAlive`].
    pub fn into_keep_alive(self) -> Result<Option<u64>, LeaderAnswer> {
        match self {
            LeaderAnswer::KeepAlive(ttl_ms) => Ok(ttl_ms),
            other => Err(other),
        }
    }

    /// The answer to [`LeaderCall::Remaining`].
    pub fn into_remaining(self) -> Result<Option<u64>, LeaderAnswer> {
        match self {
            LeaderAnswer::Remaining(ms) => Ok(ms),
            other => Err(other),
        }
    }

    /// The answer to [`LeaderCall::AddMember`] and [`LeaderCall::RemoveMember`].
    pub fn into_membership_changed(self) -> Result<(), LeaderAnswer> {
        match self {
            LeaderAnswer::MembershipChanged => Ok(()),
            other => Err(other),
        }
    }
}

/// The envelope on the wire: the answer, or the leader-side error.
pub type LeaderResult = Result<LeaderAnswer, RaftLayerError>;

/// What a node says about itself on `GET /raft/status` (used by bootstrap).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PeerStatus {
    /// Its Raft id.
    pub node_id: u64,
    /// Whether its log holds a membership (the cluster exists).
    pub initialized: bool,
    /// Its advertised client API URL.
    pub api_addr: String,
    /// Its advertised Raft URL.
    pub raft_addr: String,
    /// The leader it knows of.
    pub leader_id: Option<u64>,
}
