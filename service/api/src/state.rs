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
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            default_ttl_ms: 15_000,
            max_wait_ms: 300_000,
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
}
