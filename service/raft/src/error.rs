//! Errors of the Raft layer.

use std::time::Duration;

/// Why the Raft layer could not serve a request.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RaftLayerError {
    /// This node is not the leader; `leader` is the current one's API address if known.
    #[error("this node is not the leader")]
    NotLeader {
        /// The leader's id, if known.
        leader_id: Option<u64>,
        /// The leader's client API address, if known.
        leader_api: Option<String>,
    },
    /// No quorum, shutting down, or storage failure: retry later.
    #[error("unavailable: {reason}")]
    Unavailable {
        /// What went wrong.
        reason: String,
        /// A hint for the client's retry.
        retry_after: Duration,
    },
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
    pub(crate) fn unavailable(reason: impl std::fmt::Display) -> Self {
        RaftLayerError::Unavailable {
            reason: reason.to_string(),
            retry_after: Duration::from_secs(1),
        }
    }
}
