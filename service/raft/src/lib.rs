//! # baton-raft
//!
//! Owns the openraft handle: node start-up and bootstrap, the peer network,
//! proposal batching (many requests, one log entry, one fsync), the leader's lease
//! clock (keepalives in memory, expiries as replicated commands), linearizable
//! reads (ReadIndex), the registry of requests waiting for queued grants and the
//! watch hub that feeds watch streams.

mod config;
mod error;
mod lease_clock;
mod network;
mod node;
mod proposer;
mod waiters;
mod waiting;
mod watch_event;
mod watch_hub;

pub use config::NodeConfig;
pub use error::RaftLayerError;
pub use lease_clock::LeaseClock;
pub use network::{HttpNetwork, CLUSTER_SECRET_HEADER};
pub use node::{ClusterStatus, Member, Node, StartError};
pub use proposer::{wall_clock_ms, Proposer};
pub use waiters::{WaitEnd, WaiterRegistry};
pub use waiting::{QueueKind, Waited};
pub use watch_event::{sse_frame, WatchEvent, WatchKind};
pub use watch_hub::{
    Step, StreamEnd, Subscription, WatchConfig, WatchError, WatchFilter, WatchHub,
};
