//! Cluster status, health, readiness and Prometheus metrics.

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use baton_metrics::Exposition;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::respond::Answer;
use crate::state::ApiState;

/// A cluster member.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemberInfo {
    /// Raft node id.
    pub id: u64,
    /// Client API address.
    pub api_addr: String,
    /// Raft peer address.
    pub raft_addr: String,
    /// Voter (true) or learner.
    pub voter: bool,
}

/// The cluster as this node sees it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClusterInfo {
    /// Identifies the cluster (the same on every node; empty for the first moments
    /// of a new cluster, until its id is committed).
    pub cluster_id: String,
    /// This node.
    pub node_id: u64,
    /// The current Raft leader, if known.
    pub leader_id: Option<u64>,
    /// Current Raft term.
    pub term: u64,
    /// Members.
    pub members: Vec<MemberInfo>,
    /// Revision applied on this node.
    pub applied_revision: u64,
    /// Raft commit index known to this node.
    pub commit_index: u64,
}

/// Liveness or readiness.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or `not_ready`.
    pub status: String,
}

/// The cluster: members, leader, term, applied revision.
#[utoipa::path(get, operation_id = "get_cluster", path = "/v1/cluster", tag = "cluster", responses((status = 200, body = ClusterInfo)))]
pub async fn cluster(state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    let status = state.node.cluster();
    let commit_index = state.node.commit_index().await;
    let info = ClusterInfo {
        cluster_id: state
            .node
            .read(|sm| sm.cluster_id().unwrap_or_default().to_owned()),
        node_id: status.node_id,
        leader_id: status.leader_id,
        term: status.term,
        members: status
            .members
            .into_iter()
            .map(|m| MemberInfo {
                id: m.id,
                api_addr: m.api_addr,
                raft_addr: m.raft_addr,
                voter: m.voter,
            })
            .collect(),
        applied_revision: status.applied_revision,
        commit_index,
    };
    Ok(Answer::ok(info, status.applied_revision).into_response())
}

/// The process is alive.
#[utoipa::path(get, operation_id = "healthz", path = "/healthz", tag = "health", responses((status = 200, body = Health)))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok".into(),
    })
}

/// The node knows a leader and keeps up with the commit index.
///
/// 200 when everything committed at the time of asking is applied within
/// 1 s; 503 with no leader, a stopped raft, or a replica still restoring a
/// snapshot or with more than a second of committed entries left to apply.
#[utoipa::path(get, operation_id = "readyz", path = "/readyz", tag = "health",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
pub async fn readyz(state: web::Data<ApiState>) -> HttpResponse {
    if state.node.is_ready().await {
        HttpResponse::Ok().json(Health {
            status: "ok".into(),
        })
    } else {
        HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
            .insert_header(("retry-after", "1"))
            .json(Health {
                status: "not_ready".into(),
            })
    }
}

/// Prometheus text exposition of the node's metrics.
///
/// Text format 0.0.4: gauges of the applied state and Raft; counters and
/// histograms of requests (by OpenAPI operation, status and error code), waits,
/// hold times, expiries, proposals, the log and snapshots. README, "Metrics",
/// lists them. No label value is ever a lock's or a lease's name.
#[utoipa::path(get, operation_id = "metrics", path = "/metrics", tag = "health",
    responses((status = 200, content_type = "text/plain; version=0.0.4", body = String)))]
pub async fn metrics(state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    // The gauges walk the whole state (a copy of it: see `Node::view`), tens
    // of milliseconds at a million holdings: on the blocking pool, not on this
    // HTTP worker, whose other requests would wait for the walk.
    let body = web::block(move || exposition(&state))
        .await
        .map_err(|e| ApiError::Internal(format!("metrics: {e}")))?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(body))
}

/// The text of `/metrics`.
fn exposition(state: &ApiState) -> String {
    let status = state.node.cluster();
    let counts = state.node.read(|machine| machine.counts());
    let lines = [
        (
            "baton_applied_revision",
            "Revision applied on this node.",
            status.applied_revision as f64,
        ),
        ("baton_raft_term", "Current Raft term.", status.term as f64),
        (
            "baton_raft_applied_index",
            "Last applied Raft log index.",
            status.applied_index as f64,
        ),
        (
            "baton_raft_is_leader",
            "1 when this node is the Raft leader.",
            f64::from(u8::from(state.node.is_leader())),
        ),
        ("baton_leases", "Live leases.", counts.leases as f64),
        (
            "baton_locks_held",
            "Locks currently held.",
            counts.held_locks as f64,
        ),
        (
            "baton_lock_waiters",
            "Requests queued on locks.",
            counts.lock_waiters as f64,
        ),
        (
            "baton_elections_led",
            "Elections with a leader.",
            counts.elections as f64,
        ),
        (
            "baton_names_registered",
            "Registered names.",
            counts.names as f64,
        ),
        (
            "baton_snapshots_installed",
            "Snapshots received from a leader since this process started.",
            state.node.snapshots_installed() as f64,
        ),
        (
            "baton_waiting_requests",
            "HTTP requests waiting for a queued grant on this node.",
            state.node.waiters().len() as f64,
        ),
    ];
    let mut out = Exposition::new();
    for (name, help, value) in lines {
        out.gauge(name, help, value);
    }
    out.counter_value(
        "baton_internal_errors_total",
        "Answers of 500 internal (a bug in Baton) since this process started.",
        crate::error::INTERNAL_ERRORS.load(std::sync::atomic::Ordering::Relaxed),
    );
    state.node.write_metrics(&mut out);
    state.metrics.write(&mut out);
    out.finish()
}
