//! # baton-raft
//!
//! Owns the openraft handle: node start-up and bootstrap, the peer network,
//! proposal batching (many requests, one log entry, one fsync), the leader's lease
//! clock (keepalives in memory, expiries as replicated commands), linearizable
//! reads (ReadIndex), the registry of requests waiting for queued grants and the
//! watch hub that feeds watch streams.

mod bootstrap;
mod config;
mod error;
mod handover;
mod leader_call;
mod leader_link;
mod lease_clock;
mod membership;
mod network;
mod node;
mod peer_server;
mod proposer;
mod routing;
mod tls;
mod waiters;
mod waiting;
mod watch_event;
mod watch_hub;

pub use baton_store::{BatonNode, Durability};
pub use config::NodeConfig;
pub use error::RaftLayerError;
pub use leader_call::{LeaderAnswer, LeaderCall, LeaderResult, PeerStatus};
pub use leader_link::{LeaderLink, LinkError};
pub use lease_clock::LeaseClock;
pub use network::{peer_http_client, HttpNetwork, CLUSTER_SECRET_HEADER};
pub use node::{ClusterStatus, Member, Node, StartError};
pub use peer_server::{peer_routes, secret_matches};
pub use proposer::{wall_clock_ms, InFlight, Proposer};
pub use tls::{client_config_trusting, Tls, TlsError, TlsFiles};
pub use waiters::{WaitEnd, WaiterRegistry};
pub use waiting::{QueueKind, Waited};
pub use watch_event::{sse_frame, stored_value, WatchEvent, WatchKind};
pub use watch_hub::{
    Step, StreamEnd, Subscription, WatchConfig, WatchError, WatchFilter, WatchHub,
};
