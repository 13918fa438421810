//! Errors of the Raft layer.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why the Raft layer could not serve a request. Serializable: a leader's
/// refusal travels back to the follower that forwarded the call.
#[derive(Debug, Clone, thiserror::Error, Serialize, Deserialize)]
pub enum RaftLayerError {
    /// This node is not the leader; `leader_api` is the current one's API address if known.
    #[error("this node is not the leader")]
    NotLeader {
        /// The leader's id, if known.
        leader_id: Option<u64>,
        /// The leader's client API address, if known.
        leader_api: Option<String>,
    },
    /// An answer that cannot happen (a bug, not an outage): never retried.
    #[error("internal error: {0}")]
    Internal(String),
    /// No quorum, shutting down, or storage failure: retry later.
    #[error("unavailable: {reason}")]
    Unavailable {
        /// What went wrong.
        reason: String,
        /// A hint for the client's retry.
        retry_after: Duration,
    },
    /// The leader's proposal queue is full: the request was refused before it
    /// was queued, so it was certainly not applied and a retry is safe.
    #[error("overloaded: {queued} requests are already waiting to be proposed")]
    Overloaded {
        /// The queue's capacity.
        queued: usize,
    },
    /// `DELETE /v1/cluster/members/{id}` for a node that is not a member.
    #[error("node {0} is not a member of the cluster")]
    MemberNotFound(u64),
    /// A membership change the cluster refuses (for example removing the last voter).
    #[error("membership change refused: {0}")]
    MembershipRefused(String),
    /// A `min_revision` read waited too long.
    #[error("revision {wanted} not reached (applied {applied})")]
    RevisionNotReached {
        /// Requested.
        wanted: u64,
        /// Applied at the deadline.
        applied: u64,
    },
}

impl RaftLayerError {
    /// The request may or may not have taken effect.
    pub(crate) fn outcome_unknown(reason: impl std::fmt::Display) -> Self {
        RaftLayerError::Unavailable {
            reason: format!(
                "{reason}; the request may or may not have taken effect: retry with the same Idempotency-Key"
            ),
            retry_after: Duration::from_secs(1),
        }
    }

    pub(crate) fn unavailable(reason: impl std::fmt::Display) -> Self {
        RaftLayerError::Unavailable {
            reason: reason.to_string(),
            retry_after: Duration::from_secs(1),
        }
    }
}
