//! The system under load: Baton or etcd, behind one set of operations.

use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;

use crate::baton::BatonClient;
use crate::error::OpError;
use crate::etcd::EtcdClient;
use crate::http::HttpClient;

/// Which kind of server the target URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    /// Baton's `/v1` API.
    Baton,
    /// etcd 3.4's HTTP/JSON gateway (`/v3/...`).
    Etcd,
}

impl TargetKind {
    /// Lower-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Baton => "baton",
            TargetKind::Etcd => "etcd",
        }
    }
}

/// A lease held by the load generator.
#[derive(Debug, Clone)]
pub struct Lease {
    /// Baton's opaque `lease_id`, or etcd's int64 lease ID as a decimal string.
    pub id: String,
}

/// A granted lock or won election.
#[derive(Debug, Clone)]
pub struct Held {
    /// Lock or election name.
    pub name: String,
    /// Fencing token (Baton) or the grant's revision (etcd).
    pub token: u64,
    /// etcd's lock key (base64) or leader key (JSON); empty for Baton.
    pub key: String,
    /// Revision of the grant (what a watcher sees as the event id on Baton).
    pub revision: u64,
}

/// One target, with the operations both kinds offer.
#[derive(Debug, Clone)]
pub enum Target {
    /// A Baton node.
    Baton(BatonClient),
    /// An etcd member.
    Etcd(EtcdClient),
}

/// Wait bound of a queued acquire or campaign on Baton (etcd's waits are unbounded).
pub const WAIT_MS: u64 = 60_000;

impl Target {
    /// A target of `kind` at `base`, with one pool of HTTP/1.1 connections sized
    /// for `connections` concurrent requests (and a reqwest client for streams).
    pub fn new(kind: TargetKind, base: &str, connections: usize) -> anyhow::Result<Self> {
        // Idle connections are dropped before Baton closes them
        // (`pooled_http_client`); kept longer, one of them failed 11
        // keepalives of a `make bench` run (BENCHMARKS.md, session 58).
        // Above every wait this tool asks for, so a timeout means a stuck server.
        let request_timeout = Duration::from_millis(WAIT_MS + 30_000);
        let connect_timeout = Duration::from_secs(5);
        let http = baton_chaos::client::pooled_http_client()
            .pool_max_idle_per_host(connections.max(1))
            .connect_timeout(connect_timeout)
            .timeout(request_timeout)
            .build()?;
        let calls = HttpClient::new(base, connections.max(1), connect_timeout, request_timeout)?;
        Ok(match kind {
            TargetKind::Baton => Target::Baton(BatonClient::new(http, calls)),
            TargetKind::Etcd => Target::Etcd(EtcdClient::new(http, calls)),
        })
    }

    /// Creates a lease.
    pub async fn grant(&self, ttl_ms: u64, holder: &str) -> Result<Lease, OpError> {
        match self {
            Target::Baton(c) => c.grant(ttl_ms, holder).await,
            Target::Etcd(c) => c.grant(ttl_ms).await,
        }
    }

    /// Keeps a lease alive; `lease_not_found` when it is gone.
    pub async fn keepalive(&self, lease: &Lease) -> Result<(), OpError> {
        match self {
            Target::Baton(c) => c.keepalive(lease).await,
            Target::Etcd(c) => c.keepalive(lease).await,
        }
    }

    /// Revokes a lease.
    pub async fn revoke(&self, lease: &Lease) -> Result<(), OpError> {
        match self {
            Target::Baton(c) => c.revoke(lease).await,
            Target::Etcd(c) => c.revoke(lease).await,
        }
    }

    /// Acquires a lock on `lease`, waiting for it (up to [`WAIT_MS`] on Baton).
    pub async fn acquire(&self, name: &str, lease: &Lease) -> Result<Held, OpError> {
        match self {
            Target::Baton(c) => c.acquire(&format!("locks/{name}"), lease, WAIT_MS).await,
            Target::Etcd(c) => c.acquire(&format!("locks/{name}"), lease).await,
        }
    }

    /// Releases a lock; answers the revision of the release.
    pub async fn release(&self, lease: &Lease, held: &Held) -> Result<u64, OpError> {
        match self {
            Target::Baton(c) => c.release(lease, held).await,
            Target::Etcd(c) => c.release(held).await,
        }
    }

    /// Acquires lock `name` shared (a reader) or exclusive (a writer), waiting.
    /// Baton: `mode` on `:acquire`; etcd: the RWMutex recipe of
    /// `clientv3/experimental/recipes` over the gateway (`unique` names the key).
    pub async fn acquire_rw(
        &self,
        name: &str,
        lease: &Lease,
        shared: bool,
        unique: u64,
    ) -> Result<Held, OpError> {
        match self {
            Target::Baton(c) => {
                c.acquire_mode(&format!("locks/{name}"), lease, WAIT_MS, shared)
                    .await
            }
            Target::Etcd(c) => {
                c.rw_lock(&format!("rwlocks/{name}"), lease, shared, unique)
                    .await
            }
        }
    }

    /// Releases what [`Target::acquire_rw`] granted.
    pub async fn release_rw(&self, lease: &Lease, held: &Held) -> Result<(), OpError> {
        match self {
            Target::Baton(c) => c.release(lease, held).await.map(drop),
            Target::Etcd(c) => c.delete_key(held).await,
        }
    }

    /// Takes `permits` of semaphore `name` with `limit`, waiting. Baton:
    /// `/v1/semaphores`; etcd: the semaphore recipe over the gateway (one permit
    /// per key only).
    pub async fn acquire_permits(
        &self,
        name: &str,
        lease: &Lease,
        limit: u32,
        unique: u64,
    ) -> Result<Held, OpError> {
        match self {
            Target::Baton(c) => {
                c.acquire_permits(&format!("semaphores/{name}"), lease, limit, 1, WAIT_MS)
                    .await
            }
            Target::Etcd(c) => {
                c.semaphore_acquire(&format!("semaphores/{name}"), lease, limit, unique)
                    .await
            }
        }
    }

    /// Releases what [`Target::acquire_permits`] granted.
    pub async fn release_permits(&self, lease: &Lease, held: &Held) -> Result<(), OpError> {
        match self {
            Target::Baton(c) => c.release_permits(lease, held).await.map(drop),
            Target::Etcd(c) => c.delete_key(held).await,
        }
    }

    /// Campaigns in an election, waiting to be elected.
    pub async fn campaign(
        &self,
        name: &str,
        lease: &Lease,
        candidate: &str,
    ) -> Result<Held, OpError> {
        let name = format!("elections/{name}");
        match self {
            Target::Baton(c) => c.campaign(&name, lease, WAIT_MS, candidate).await,
            Target::Etcd(c) => c.campaign(&name, lease, candidate).await,
        }
    }

    /// Resigns leadership.
    pub async fn resign(&self, lease: &Lease, held: &Held) -> Result<(), OpError> {
        match self {
            Target::Baton(c) => c.resign(lease, held).await,
            Target::Etcd(c) => c.resign(held).await,
        }
    }

    /// Registers a cluster-unique name on the lease.
    pub async fn register(&self, name: &str, lease: &Lease, value: &str) -> Result<(), OpError> {
        let name = format!("names/{name}");
        match self {
            Target::Baton(c) => c.register(&name, lease, value).await,
            Target::Etcd(c) => c.register(&name, lease, value).await,
        }
    }

    /// Looks a name up.
    pub async fn whereis(&self, name: &str) -> Result<(), OpError> {
        let name = format!("names/{name}");
        match self {
            Target::Baton(c) => c.whereis(&name).await.map(drop),
            Target::Etcd(c) => c.whereis(&name).await.map(drop),
        }
    }

    /// Unregisters a name owned by the lease.
    pub async fn unregister(&self, name: &str, lease: &Lease) -> Result<(), OpError> {
        let name = format!("names/{name}");
        match self {
            Target::Baton(c) => c.unregister(&name, lease).await,
            Target::Etcd(c) => c.unregister(&name, lease).await,
        }
    }
}
