//! Bounds that the state machine enforces on every command.

use serde::{Deserialize, Serialize};

/// Limits the leader stamps into every batch, so that every replica judges a command
/// against the same bounds even if the nodes' configurations differ for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Smallest lease TTL accepted, in milliseconds.
    pub min_ttl_ms: u64,
    /// Largest lease TTL accepted, in milliseconds.
    pub max_ttl_ms: u64,
    /// Largest JSON value (election value, name value) in bytes.
    pub max_value_bytes: u32,
    /// Largest free-text holder identity in bytes.
    pub max_holder_bytes: u32,
    /// Most requests queued on one lock or election.
    pub max_waiters_per_lock: u32,
    /// Most holdings (held locks, queued waits, names, candidacies) on one lease.
    pub max_holdings_per_lease: u32,
    /// Largest lock delay accepted, in milliseconds.
    pub max_lock_delay_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_ttl_ms: 1_000,
            max_ttl_ms: 3_600_000,
            max_value_bytes: 4_096,
            max_holder_bytes: 256,
            max_waiters_per_lock: 10_000,
            max_holdings_per_lease: 10_000,
            max_lock_delay_ms: 60_000,
        }
    }
}
