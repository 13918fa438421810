//! # baton-raft
//!
//! Owns the openraft handle: node start-up and bootstrap, the peer network,
//! proposal batching (many requests, one log entry, one fsync), the leader's lease
//! clock (keepalives in memory, expiries as replicated commands), linearizable
//! reads (ReadIndex) and the registry of requests waiting for queued grants.

mod config;
mod error;
mod lease_clock;
mod network;
mod node;
mod proposer;
mod waiters;
mod waiting;

pub use config::NodeConfig;
pub use error::RaftLayerError;
pub use lease_clock::LeaseClock;
pub use network::{HttpNetwork, CLUSTER_SECRET_HEADER};
pub use node::{ClusterStatus, Member, Node, StartError};
pub use proposer::{wall_clock_ms, Proposer};
pub use waiters::{WaitEnd, WaiterRegistry};
pub use waiting::{QueueKind, Waited};
