//! The openraft type configuration that every Baton crate shares.

use std::fmt;

use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// Baton's openraft type configuration: one log entry carries one
    /// [`baton_core::Batch`] and answers with one [`baton_core::Outcome`] per request.
    pub TypeConfig:
        D = baton_core::Batch,
        R = Vec<baton_core::Outcome>,
        NodeId = u64,
        Node = BatonNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// What the cluster membership records about a node: where to reach it.
///
/// Stored inside membership log entries and snapshots, so adding a field is a
/// storage format change (postcard has no field names or defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatonNode {
    /// Base URL of the node's client HTTP API, e.g. `http://10.0.0.5:7878`.
    pub api_addr: String,
    /// Address of the node's peer (Raft RPC) listener.
    pub raft_addr: String,
}

impl fmt::Display for BatonNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{api: {}, raft: {}}}", self.api_addr, self.raft_addr)
    }
}

/// A Raft node id.
pub type NodeId = u64;
/// A log id: the term (with its leader) and index of an entry.
pub type LogId = openraft::LogId<NodeId>;
/// A persisted vote.
pub type Vote = openraft::Vote<NodeId>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log entry's payload.
pub type EntryPayload = openraft::EntryPayload<TypeConfig>;
/// A cluster membership configuration.
pub type Membership = openraft::Membership<NodeId, BatonNode>;
/// A membership configuration together with the log id that carried it.
pub type StoredMembership = openraft::StoredMembership<NodeId, BatonNode>;
/// The description of a snapshot (last log id, membership, id).
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, BatonNode>;
/// A snapshot: its meta and a readable handle on its bytes.
pub type Snapshot = openraft::storage::Snapshot<TypeConfig>;
/// The error type openraft's storage traits return.
pub type StorageError = openraft::StorageError<NodeId>;
/// The result type openraft's storage traits return.
pub type StorageResult<T> = Result<T, StorageError>;
/// The log state (last purged and last present log id).
pub type LogState = openraft::storage::LogState<TypeConfig>;
