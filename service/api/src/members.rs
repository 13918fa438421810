//! `/v1/cluster/members`: adding and removing nodes (admin).
//!
//! Until per-token auth exists, "admin" means presenting the cluster secret in the
//! `baton-cluster-secret` header. A node without a cluster secret refuses every
//! membership change (403): an open membership endpoint lets anyone add a voter
//! that stops every write.

use actix_web::{web, HttpRequest, HttpResponse};
use baton_raft::BatonNode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, Problem};
use crate::request::{parse_required_body, read_body};
use crate::respond::Answer;
use crate::state::ApiState;

/// Body of `POST /v1/cluster/members`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMemberBody {
    /// Raft node id (unique in the cluster).
    pub id: u64,
    /// The node's client API URL, e.g. `http://10.0.0.7:7878`.
    pub api_addr: String,
    /// The node's Raft peer URL, e.g. `http://10.0.0.7:7879`.
    pub raft_addr: String,
    /// Promote to voter once caught up (default true); false keeps a learner.
    #[serde(default = "default_voter")]
    pub voter: bool,
}

fn default_voter() -> bool {
    true
}

/// A membership change that completed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MembershipChanged {
    /// The node concerned.
    pub id: u64,
    /// `added` (or updated) or `removed`.
    pub status: String,
}

fn checked_url(field: &str, url: &str) -> Result<(), ApiError> {
    let ok = (url.starts_with("http://") || url.starts_with("https://"))
        && url.len() <= 256
        && url.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(ApiError::InvalidBody(format!(
            "{field} must be an http:// or https:// URL of at most 256 printable ASCII characters (no spaces)"
        )))
    }
}

/// Add a node: it must answer on its raft address; it joins as a learner and is
/// promoted to voter once it has caught up (within 60 s, else it stays a learner
/// and the request answers 409: repeat it to promote). Adding an existing member
/// updates its addresses. Answers once the change is committed. Needs the cluster
/// secret; a node without one refuses every membership change.
#[utoipa::path(post, operation_id = "add_member", path = "/v1/cluster/members", tag = "cluster",
    request_body = AddMemberBody,
    params(("baton-cluster-secret" = Option<String>, Header, description = "The cluster secret: required (a node without one refuses membership changes)")),
    responses(
        (status = 200, body = MembershipChanged),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_body"),
        (status = 401, body = Problem, content_type = "application/problem+json", description = "unauthenticated"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "forbidden: this node has no cluster secret, so membership changes are disabled"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "membership_refused: the node does not answer on its raft address, has not caught up within 60 s (it stays a learner), or the change would alter the leader's own addresses"),
        (status = 503, body = Problem, content_type = "application/problem+json", description = "unavailable"),
    ))]
pub async fn add(
    state: web::Data<ApiState>,
    http: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    crate::auth::require_admin_or_secret(&state, &http)?;
    let body = read_body(payload).await?;
    let input: AddMemberBody = parse_required_body(&body)?;
    if input.id == 0 {
        return Err(ApiError::InvalidBody(
            "id must be at least 1 (node ids are the StatefulSet ordinal + 1)".into(),
        ));
    }
    checked_url("api_addr", &input.api_addr)?;
    checked_url("raft_addr", &input.raft_addr)?;
    let node = BatonNode {
        api_addr: input.api_addr.trim_end_matches('/').to_owned(),
        raft_addr: input.raft_addr.trim_end_matches('/').to_owned(),
    };
    state.node.add_member(input.id, node, input.voter).await?;
    let changed = MembershipChanged {
        id: input.id,
        status: "added".into(),
    };
    Ok(Answer::ok(changed, state.node.revision()).into_response())
}

/// Remove a node from the cluster (voter or learner).
#[utoipa::path(delete, operation_id = "remove_member", path = "/v1/cluster/members/{id}", tag = "cluster",
    params(("id" = u64, Path), ("baton-cluster-secret" = Option<String>, Header, description = "The cluster secret: required (a node without one refuses membership changes)")),
    responses(
        (status = 200, body = MembershipChanged),
        (status = 401, body = Problem, content_type = "application/problem+json", description = "unauthenticated"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "forbidden: this node has no cluster secret, so membership changes are disabled"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "member_not_found"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "membership_refused"),
        (status = 503, body = Problem, content_type = "application/problem+json", description = "unavailable"),
    ))]
pub async fn remove(
    state: web::Data<ApiState>,
    http: HttpRequest,
    path: web::Path<u64>,
) -> Result<HttpResponse, ApiError> {
    crate::auth::require_admin_or_secret(&state, &http)?;
    let id = path.into_inner();
    state.node.remove_member(id).await?;
    let changed = MembershipChanged {
        id,
        status: "removed".into(),
    };
    Ok(Answer::ok(changed, state.node.revision()).into_response())
}
