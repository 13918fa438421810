//! What every handler shares.

use std::sync::Arc;

use baton_raft::Node;

/// Settings of the HTTP API that are not the state machine's.
#[derive(Clone, Debug)]
pub struct ApiSettings {
    /// TTL of leases created without `ttl_ms`.
    pub default_ttl_ms: u64,
    /// Largest `wait_ms` accepted.
    pub max_wait_ms: u64,
    /// How long a `min_revision` read waits for this replica to apply the
    /// revision before it answers 504 `revision_not_reached`.
    pub min_revision_wait_ms: u64,
    /// Caps every write is judged by (a principal's auth-file entry may
    /// override the per-principal ones).
    pub quota: baton_core::Quota,
    /// Requests per second each principal may send to this node (all requests
    /// share one bucket with auth off); `per_second: 0` for no limit.
    pub rate: crate::rate_limit::RateLimit,
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            default_ttl_ms: 15_000,
            max_wait_ms: 300_000,
            min_revision_wait_ms: 3_000,
            quota: baton_core::Quota::default(),
            rate: crate::rate_limit::RateLimit::UNLIMITED,
        }
    }
}

/// The application state handed to every handler.
#[derive(Clone)]
pub struct ApiState {
    /// The local node.
    pub node: Arc<Node>,
    /// API settings.
    pub settings: ApiSettings,
    /// The auth file in force; `None` when auth is off.
    pub auth: Option<Arc<crate::auth::Authenticator>>,
    /// The request-rate buckets of this node (shared by every worker).
    pub rate_limiter: Arc<crate::rate_limit::RateLimiter>,
    /// Request counts and latencies of this node's API (shared by every worker).
    pub metrics: Arc<crate::request_metrics::RequestMetrics>,
}
