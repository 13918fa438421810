//! Examples of every success answer in the OpenAPI document, made by
//! serializing a value of the answer's own Rust type: an example cannot show a
//! field the server does not send, nor miss one it does.

use serde::Serialize;
use serde_json::{json, Value};

use baton_core::CoreError;
use baton_raft::{RaftLayerError, WatchError};

use crate::cluster::{ClusterInfo, Health, MemberInfo};
use crate::elections::{Elected, ElectionInfo, LeaderInfo, Proclaimed, Resigned};
use crate::error::ApiError;
use crate::force_release::ForceReleased;
use crate::leases::{LeaseCreated, LeaseInfo, LeaseKeptAlive, LeaseRevoked, ReleasedSet};
use crate::locks::{
    HolderInfo, LockGrant, LockInfo, LockPage, LockReleased, LockRenewed, Mode, Validation,
};
use crate::members::MembershipChanged;
use crate::multi_acquire::{GrantedLock, LocksGranted};
use crate::names::{NameInfo, NamePage, Registered, Unregistered};
use crate::semaphores::{
    PermitHolder, PermitsGranted, PermitsRenewed, QueuedPermits, SemaphoreInfo, SemaphorePage,
};

const LEASE: &str = "k3v7q2m4x6zd5r8a1b9c0e2f4g";

fn to_value<T: Serialize>(value: T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn lock_info() -> LockInfo {
    LockInfo {
        name: "team-a/db/migrate".into(),
        held: true,
        holder: Some("migrator-1".into()),
        token: Some(42),
        since_revision: Some(42),
        mode: Some(Mode::Exclusive),
        holders: vec![HolderInfo {
            holder: "migrator-1".into(),
            token: 42,
            mode: Mode::Exclusive,
            since_revision: 42,
        }],
        waiters: 1,
        queue: vec!["migrator-2".into()],
        delay_until_ms: None,
    }
}

fn semaphore_info() -> SemaphoreInfo {
    SemaphoreInfo {
        name: "render-farm".into(),
        limit: Some(8),
        in_use: 8,
        holders: vec![
            PermitHolder {
                holder: "render-1".into(),
                token: 70,
                permits: 5,
                since_revision: 70,
            },
            PermitHolder {
                holder: "render-2".into(),
                token: 73,
                permits: 3,
                since_revision: 73,
            },
        ],
        waiters: 1,
        queue: vec![QueuedPermits {
            holder: "render-3".into(),
            permits: 2,
        }],
    }
}

fn name_info() -> NameInfo {
    NameInfo {
        name: "svc/payments".into(),
        value: json!({"addr": "10.0.0.9:8443"}),
        holder: "payments-7".into(),
        token: 51,
        since_revision: 51,
    }
}

/// Schema name -> an example of it, for every success answer with a JSON body.
pub(crate) fn by_schema() -> Vec<(&'static str, Value)> {
    vec![
        (
            "Health",
            to_value(Health {
                status: "ok".into(),
            }),
        ),
        (
            "ClusterInfo",
            to_value(ClusterInfo {
                cluster_id: "c0f3a9d2".into(),
                node_id: 1,
                leader_id: Some(1),
                term: 3,
                members: (1..=3)
                    .map(|id| MemberInfo {
                        id,
                        api_addr: format!("http://10.0.0.{id}:7878"),
                        raft_addr: format!("http://10.0.0.{id}:7879"),
                        voter: true,
                    })
                    .collect(),
                applied_revision: 1187,
                commit_index: 1190,
            }),
        ),
        (
            "MembershipChanged",
            to_value(MembershipChanged {
                id: 4,
                status: "added".into(),
            }),
        ),
        (
            "LeaseCreated",
            to_value(LeaseCreated {
                lease_id: LEASE.into(),
                ttl_ms: 15_000,
                holder: "worker-1".into(),
                revision: 40,
            }),
        ),
        (
            "LeaseKeptAlive",
            to_value(LeaseKeptAlive {
                lease_id: LEASE.into(),
                ttl_ms: 15_000,
            }),
        ),
        (
            "LeaseInfo",
            to_value(LeaseInfo {
                lease_id: LEASE.into(),
                ttl_ms: 15_000,
                remaining_ms: 11_200,
                holder: "worker-1".into(),
                locks: vec!["team-a/db/migrate".into()],
                names: vec![],
                elections: vec![],
                semaphores: vec![],
            }),
        ),
        (
            "LeaseRevoked",
            to_value(LeaseRevoked {
                revoked: true,
                released: ReleasedSet {
                    locks: vec!["team-a/db/migrate".into()],
                    names: vec![],
                    elections: vec![],
                    semaphores: vec![],
                },
            }),
        ),
        (
            "LockGrant",
            to_value(LockGrant {
                name: "team-a/db/migrate".into(),
                token: 42,
                lease_id: LEASE.into(),
                ttl_ms: 15_000,
                holder: "migrator-1".into(),
                revision: 42,
                mode: Mode::Exclusive,
            }),
        ),
        (
            "LocksGranted",
            to_value(LocksGranted {
                locks: vec![
                    GrantedLock {
                        name: "accounts/42".into(),
                        token: 81,
                        mode: Mode::Exclusive,
                    },
                    GrantedLock {
                        name: "accounts/7".into(),
                        token: 82,
                        mode: Mode::Exclusive,
                    },
                    GrantedLock {
                        name: "config/rates".into(),
                        token: 83,
                        mode: Mode::Shared,
                    },
                ],
                lease_id: LEASE.into(),
                ttl_ms: 15_000,
                holder: "transfer-9".into(),
                revision: 83,
            }),
        ),
        (
            "PermitsGranted",
            to_value(PermitsGranted {
                name: "render-farm".into(),
                token: 73,
                permits: 3,
                limit: 8,
                lease_id: LEASE.into(),
                ttl_ms: 15_000,
                holder: "render-2".into(),
                revision: 73,
            }),
        ),
        (
            "PermitsRenewed",
            to_value(PermitsRenewed {
                name: "render-farm".into(),
                token: 73,
                ttl_ms: 15_000,
            }),
        ),
        ("SemaphoreInfo", to_value(semaphore_info())),
        (
            "SemaphorePage",
            to_value(SemaphorePage {
                items: vec![semaphore_info()],
                next_page_token: None,
            }),
        ),
        (
            "LockRenewed",
            to_value(LockRenewed {
                name: "team-a/db/migrate".into(),
                token: 42,
                ttl_ms: 15_000,
            }),
        ),
        (
            "LockReleased",
            to_value(LockReleased {
                released: true,
                revision: 57,
            }),
        ),
        (
            "Validation",
            to_value(Validation {
                valid: true,
                current_token: Some(42),
            }),
        ),
        ("LockInfo", to_value(lock_info())),
        (
            "LockPage",
            to_value(LockPage {
                items: vec![lock_info()],
                next_page_token: None,
            }),
        ),
        (
            "ForceReleased",
            to_value(ForceReleased {
                name: "team-a/db/migrate".into(),
                token: 42,
                holder: "migrator-1".into(),
            }),
        ),
        (
            "Elected",
            to_value(Elected {
                name: "db-primary".into(),
                leader: true,
                token: 12,
                lease_id: LEASE.into(),
                value: json!({"addr": "10.0.0.7:5432"}),
            }),
        ),
        (
            "Proclaimed",
            to_value(Proclaimed {
                name: "db-primary".into(),
                token: 12,
                value: json!({"addr": "10.0.0.8:5432"}),
                revision: 60,
            }),
        ),
        ("Resigned", to_value(Resigned { resigned: true })),
        (
            "ElectionInfo",
            to_value(ElectionInfo {
                name: "db-primary".into(),
                leader: LeaderInfo {
                    candidate: "db-1".into(),
                    value: json!({"addr": "10.0.0.7:5432"}),
                    token: 12,
                    since_revision: 12,
                },
                candidates: 2,
            }),
        ),
        (
            "Registered",
            to_value(Registered {
                name: "svc/payments".into(),
                value: json!({"addr": "10.0.0.9:8443"}),
                token: 51,
                lease_id: LEASE.into(),
                revision: 51,
            }),
        ),
        (
            "Unregistered",
            to_value(Unregistered { unregistered: true }),
        ),
        ("NameInfo", to_value(name_info())),
        (
            "NamePage",
            to_value(NamePage {
                items: vec![name_info()],
                next_page_token: Some("7376632f7061796d656e7473".into()),
            }),
        ),
    ]
}

/// One event of a `text/event-stream` answer, as the item schema reads it.
pub(crate) fn event_stream_item() -> Value {
    json!({
        "id": "42",
        "event": "lock.acquired",
        "data": "{\"holder\":\"migrator-1\",\"name\":\"team-a/db/migrate\",\"revision\":42,\"token\":42,\"ttl_ms\":15000}"
    })
}

/// A few lines of `/metrics`.
pub(crate) fn metrics() -> Value {
    json!("# HELP baton_applied_revision Revision applied on this node.\n# TYPE baton_applied_revision gauge\nbaton_applied_revision 1187\n# HELP baton_raft_is_leader 1 when this node is the Raft leader.\n# TYPE baton_raft_is_leader gauge\nbaton_raft_is_leader 1\n# HELP baton_requests_total HTTP requests answered, by OpenAPI operation, status and stable error code (ok below 400).\n# TYPE baton_requests_total counter\nbaton_requests_total{operation=\"acquire_lock\",status=\"200\",code=\"ok\"} 412\nbaton_requests_total{operation=\"acquire_lock\",status=\"409\",code=\"lock_held\"} 7\n")
}

/// An error the server sends with `code`, for the example of a problem answer.
pub(crate) fn problem(code: &str) -> Option<ApiError> {
    let samples = [
        ApiError::InvalidBody("missing field `lease_id` at line 1 column 2".into()),
        ApiError::InvalidQuery("limit must be between 1 and 1000".into()),
        ApiError::Unauthenticated(crate::auth::NO_TOKEN.into()),
        ApiError::Forbidden("principal 'ci' may not use locks named 'team-b/deploy'".into()),
        ApiError::NoLeader,
        ApiError::Core(CoreError::InvalidName {
            reason: "names are 1 to 256 bytes of A-Z a-z 0-9 . _ - / @ + = ~".into(),
        }),
        ApiError::Core(CoreError::InvalidTtl {
            ttl_ms: 10,
            min_ms: 1_000,
            max_ms: 3_600_000,
        }),
        ApiError::Core(CoreError::ValueTooLarge {
            size: 5_000,
            max: 4_096,
        }),
        ApiError::Core(CoreError::LeaseNotFound),
        ApiError::Core(CoreError::NotFound),
        ApiError::Core(CoreError::LockLost {
            current_token: Some(57),
        }),
        ApiError::Core(CoreError::NotElected {
            leader: Some("db-1".into()),
            token: Some(12),
        }),
        ApiError::Core(CoreError::NotLeader),
        ApiError::Core(CoreError::NameTaken {
            holder: "payments-7".into(),
            token: 51,
        }),
        ApiError::Core(CoreError::NotOwner),
        ApiError::Core(CoreError::TokenMismatch { current_token: 57 }),
        ApiError::Core(CoreError::LimitMismatch { limit: 8 }),
        ApiError::Core(CoreError::InvalidLimit {
            limit: 0,
            max: baton_core::MAX_SEMAPHORE_LIMIT,
        }),
        ApiError::Core(CoreError::InvalidPermits {
            permits: 9,
            limit: 8,
        }),
        ApiError::Core(CoreError::InvalidLockList {
            reason: "'accounts/7' is named twice".into(),
        }),
        ApiError::Core(CoreError::SemaphoreFull {
            in_use: 8,
            limit: 8,
            waiters: 2,
        }),
        ApiError::Core(CoreError::PermitsLost),
        ApiError::Core(CoreError::QuotaReached {
            what: "a principal owns at most 100000 leases".into(),
            limit: 100_000,
        }),
        ApiError::Raft(RaftLayerError::Unavailable {
            reason: "the node is shutting down".into(),
            retry_after: std::time::Duration::from_secs(1),
        }),
        ApiError::Raft(RaftLayerError::RevisionNotReached {
            wanted: 1200,
            applied: 1187,
        }),
        ApiError::Raft(RaftLayerError::MemberNotFound(4)),
        ApiError::Raft(RaftLayerError::MembershipRefused(
            "node 4 does not answer on http://10.0.0.4:7879".into(),
        )),
        ApiError::Watch(WatchError::Compacted {
            since: 10,
            oldest: 1_000,
        }),
    ];
    samples.into_iter().find(|error| error.code() == code)
}
