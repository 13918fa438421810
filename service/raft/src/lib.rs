//! # baton-raft
//!
//! Owns the openraft handle: node start-up and bootstrap, the peer network,
//! proposal batching (many requests, one log entry, one fsync), the leader's lease
//! clock (keepalives in memory, expiries as replicated commands), linearizable
//! reads (ReadIndex), the registry of requests waiting for queued grants and the
//! watch hub that feeds watch streams.
//!
//! ## Modules
//!
//! The modules are private; everything public is re-exported here.
//!
//! - `node`: [`Node`], a running node: opens the store, starts openraft, the proposer and
//!   the lease-clock ticker, and routes applied events to the clock, the waiters and the
//!   watch hub.
//! - `config`: [`NodeConfig`], what a node needs to know to start.
//! - `bootstrap`: how a node finds its cluster (initialize alone, the lowest id of static
//!   peers, or ask to join) and gets its recorded addresses fixed.
//! - `routing`: leader-only work from any node: run here on the leader, else sent to the
//!   leader, retried across leader changes only when a retry cannot apply twice.
//! - `leader_call`: [`LeaderCall`] and [`LeaderAnswer`], what a follower asks of the
//!   leader instead of forwarding HTTP.
//! - `leader_link`: [`LeaderLink`], the follower's side of those calls, with the cluster
//!   secret.
//! - `peer_server`: the peer listener ([`PeerServer`], hyper on the runtime): openraft's RPCs, leader calls
//!   and the status bootstrap asks for, never on the client API's address.
//! - `network`: [`HttpNetwork`], openraft's RPCs as JSON over HTTP, one keep-alive
//!   connection per replication stream.
//! - `peer_connection`: a peer client's connection (hyper's HTTP/1.1 client, TLS).
//! - `proposer`: [`Proposer`], batching requests into log entries, one fsync for many.
//! - `lease_clock`: [`LeaseClock`], the leader's lease deadlines in memory; expiries are
//!   proposed as commands.
//! - `waiters`: [`WaiterRegistry`], requests waiting for a queued grant, woken by apply.
//! - `waiting`: [`Node::propose_and_wait`], proposing a request that may queue and waiting
//!   for its grant; a wait that ends early leaves the queue through the log.
//! - `watch_hub`: [`WatchHub`], the bounded history of events that every watch stream
//!   reads from its own cursor.
//! - `watch_event`: [`WatchEvent`], one change as watch streams publish it, its SSE frame
//!   encoded once.
//! - `idle_poll`: [`IdlePoll`], threads that poll briefly before they sleep, so a lone
//!   client's write does not wait for idle threads to wake (`--idle-poll-us`).
//! - `metrics`: [`NodeMetrics`], what a node counts (grants, releases, waits, hold
//!   times, proposals, leader changes, calls to the leader) and [`Node::write_metrics`].
//! - `snapshot_schedule`: [`SnapshotSchedule`], when a node builds a snapshot: after
//!   `snapshot_every` entries, once as much log was written as the last snapshot holds.
//! - `membership`: adding members (learner first, voter once caught up) and removing
//!   them, on the leader.
//! - `handover`: a leader handing over to a caught-up voter before it shuts down.
//! - `tls`: [`Tls`], rustls on both listeners and on calls to peers, reloaded when its
//!   files change.
//! - `error`: [`RaftLayerError`], why the Raft layer could not serve a request.
//! - `trace_context` (public): trace spans (target `baton_trace`, only when sampled) and
//!   the W3C trace context on leader calls; see ARCHITECTURE.md, "Traces".

mod bootstrap;
mod config;
mod error;
mod handover;
mod idle_poll;
mod leader_call;
mod leader_contact;
mod leader_link;
mod lease_clock;
mod log_versions;
mod membership;
mod metrics;
mod network;
mod node;
mod peer_connection;
mod peer_server;
mod proposer;
mod routing;
mod snapshot_schedule;
mod stored_leadership;
mod tls;
pub mod trace_context;
mod waiters;
mod waiting;
mod watch_event;
mod watch_hub;

pub use baton_store::{active_wal_size, BatonNode, Durability, MAX_WAL_PREWRITE_MIB};
pub use config::NodeConfig;
pub use error::RaftLayerError;
pub use idle_poll::IdlePoll;
pub use leader_call::{LeaderAnswer, LeaderCall, LeaderResult, PeerStatus};
pub use leader_link::{LeaderLink, LinkError};
pub use lease_clock::LeaseClock;
pub use log_versions::{check_log_version, PeerLogVersions, LOG_VERSION_HEADER};
pub use metrics::NodeMetrics;
pub use network::{peer_http_client, HttpNetwork, CLUSTER_SECRET_HEADER};
pub use node::{ClusterStatus, Member, Node, StartError};
pub use peer_server::{secret_matches, PeerServer};
pub use proposer::{wall_clock_ms, InFlight, Lane, Proposer};
pub use snapshot_schedule::SnapshotSchedule;
pub use tls::{client_config_trusting, Tls, TlsError, TlsFiles};
pub use waiters::{WaitEnd, WaiterRegistry};
pub use waiting::{QueueKind, Waited};
pub use watch_event::{sse_frame, stored_value, WatchEvent, WatchKind};
pub use watch_hub::{
    Step, StreamEnd, Subscription, WatchConfig, WatchError, WatchFilter, WatchHub,
};
