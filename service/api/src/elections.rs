//! `/v1/elections`: campaign (with FIFO candidate queue), proclaim, resign, inspect.

use actix_web::web;
use actix_web::{HttpRequest, HttpResponse};
use baton_core::{Command, CoreError, Grant, Reply};
use baton_raft::QueueKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::{Caller, Kind};
use crate::claim::{claim, ClaimEnd, ClaimTerms, Single};
use crate::error::{ApiError, Problem};
use crate::request::{
    checked_name, parse_lease_id, parse_required_body, read_body, settle_read, ReadQuery,
};
use crate::respond::{propose, Answer};
use crate::state::ApiState;

/// Body of `:campaign`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CampaignBody {
    /// Stand on this lease; without it, a lease is created for this candidacy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// TTL of the lease created when `lease_id` is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The candidate's identity.
    pub candidate: String,
    /// What the leader publishes (any JSON, ≤ 4 KiB).
    pub value: Value,
    /// Wait in the candidate queue up to this long (0 = try once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// An election won.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Elected {
    /// Election name.
    pub name: String,
    /// Always true.
    pub leader: bool,
    /// Fencing token: the revision at which this leader was elected.
    pub token: u64,
    /// The lease the leadership hangs on.
    pub lease_id: String,
    /// The published value.
    pub value: Value,
}

/// Body of `:proclaim`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProclaimBody {
    /// The leader's lease.
    pub lease_id: String,
    /// The leader's token.
    pub token: u64,
    /// The new value (any JSON, ≤ 4 KiB).
    pub value: Value,
}

/// A proclaimed value.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Proclaimed {
    /// Election name.
    pub name: String,
    /// The leader's token.
    pub token: u64,
    /// The new value.
    pub value: Value,
    /// Revision of the proclamation.
    pub revision: u64,
}

/// Body of `:resign`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResignBody {
    /// The leader's lease.
    pub lease_id: String,
    /// The leader's token.
    pub token: u64,
}

/// A resignation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Resigned {
    /// Always true.
    pub resigned: bool,
}

/// The current leader.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaderInfo {
    /// The leader's candidate identity.
    pub candidate: String,
    /// The published value.
    pub value: Value,
    /// The leader's token.
    pub token: u64,
    /// Revision of the last change (election or proclaim).
    pub since_revision: u64,
}

/// An election.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ElectionInfo {
    /// Election name.
    pub name: String,
    /// The leader.
    pub leader: LeaderInfo,
    /// Candidates waiting in line.
    pub candidates: usize,
}

/// Values are stored as compact JSON text; they were valid JSON when stored.
fn json_value(text: &str) -> Value {
    baton_raft::stored_value(text)
}

fn elected_answer(grant: Grant, value: &str, replayed: bool) -> HttpResponse {
    let token = grant.token;
    let body = Elected {
        name: grant.name,
        leader: true,
        token,
        lease_id: grant.lease_id.to_string(),
        value: json_value(value),
    };
    let answer = Answer::ok(body, token).with_token(token).replay(replayed);
    answer.into_response()
}

fn not_elected(state: &ApiState, name: &str) -> ApiError {
    let view = state.node.read(|sm| sm.election(name));
    let leader = view.and_then(|v| v.leader);
    ApiError::Core(CoreError::NotElected {
        leader: leader.as_ref().map(|l| l.candidate.clone()),
        token: leader.map(|l| l.token),
    })
}

/// Campaign for leadership; candidates are elected in arrival order.
#[utoipa::path(post, operation_id = "campaign", path = "/v1/elections/{name}:campaign", tag = "elections",
    params(("name" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body = CampaignBody,
    responses(
        (status = 200, body = Elected, headers(("Baton-Fencing-Token" = u64, description = "The leader's token"))),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "not_elected (with leader)"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
        (status = 413, body = Problem, content_type = "application/problem+json", description = "value_too_large"),
    ))]
pub async fn campaign(
    state: web::Data<ApiState>,
    caller: Caller,
    http: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let name = checked_name(&path)?;
    caller.require(Kind::Election, &name)?;
    let input: CampaignBody = parse_required_body(&body)?;
    let terms = ClaimTerms {
        lease_id: input.lease_id.as_deref(),
        ttl_ms: input.ttl_ms,
        wait_ms: input.wait_ms,
    };
    let queue = QueueKind::Election(name.clone());
    let end = claim::<Single>(&state, &http, &body, queue, terms, |lease, waiter| {
        Command::Campaign {
            name: name.clone(),
            lease,
            candidate: input.candidate.clone(),
            value: input.value.to_string(),
            waiter,
        }
    })
    .await?;
    match end {
        ClaimEnd::Won(won) => {
            let (grant, value) = won.granted;
            let value = value
                .ok_or_else(|| ApiError::Internal("an election was won without a value".into()))?;
            Ok(elected_answer(grant, &value, won.replayed))
        }
        ClaimEnd::Held(_) | ClaimEnd::NotGranted => Err(not_elected(&state, &name)),
    }
}

/// Publish a new value as the current leader.
#[utoipa::path(post, operation_id = "proclaim", path = "/v1/elections/{name}:proclaim", tag = "elections",
    params(("name" = String, Path)),
    request_body = ProclaimBody,
    responses(
        (status = 200, body = Proclaimed),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "not_leader"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
    ))]
pub async fn proclaim(
    state: web::Data<ApiState>,
    caller: Caller,
    http: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let name = checked_name(&path)?;
    caller.require(Kind::Election, &name)?;
    let input: ProclaimBody = parse_required_body(&body)?;
    let lease_id = parse_lease_id(&input.lease_id)?;
    let command = Command::Proclaim {
        name,
        lease_id,
        token: input.token,
        value: input.value.to_string(),
    };
    let done = propose(&state, &http, &body, command, Reply::into_proclaimed).await?;
    let baton_core::Proclaimed { name, token, value } = done.reply;
    let answer = Answer::ok(
        Proclaimed {
            name,
            token,
            value: json_value(&value),
            revision: done.revision,
        },
        done.revision,
    )
    .replay(done.replayed);
    Ok(answer.into_response())
}

/// Step down; the next candidate in line is elected.
#[utoipa::path(post, operation_id = "resign", path = "/v1/elections/{name}:resign", tag = "elections",
    params(("name" = String, Path)),
    request_body = ResignBody,
    responses(
        (status = 200, body = Resigned),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "not_leader"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
    ))]
pub async fn resign(
    state: web::Data<ApiState>,
    caller: Caller,
    http: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let name = checked_name(&path)?;
    caller.require(Kind::Election, &name)?;
    let input: ResignBody = parse_required_body(&body)?;
    let lease_id = parse_lease_id(&input.lease_id)?;
    let command = Command::Resign {
        name,
        lease_id,
        token: input.token,
    };
    let done = propose(&state, &http, &body, command, Reply::into_resigned).await?;
    let answer = Answer::ok(Resigned { resigned: true }, done.revision).replay(done.replayed);
    Ok(answer.into_response())
}

/// The current leader and its value.
#[utoipa::path(get, operation_id = "get_election", path = "/v1/elections/{name}", tag = "elections",
    params(("name" = String, Path), ReadQuery),
    responses(
        (status = 200, body = ElectionInfo),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "no_leader"),
    ))]
pub async fn get(
    state: web::Data<ApiState>,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<ReadQuery>,
) -> Result<HttpResponse, ApiError> {
    let name = checked_name(&path)?;
    caller.require(Kind::Election, &name)?;
    settle_read(&state, &query).await?;
    let (view, revision) = state.node.read(|sm| (sm.election(&name), sm.revision()));
    let view = view.ok_or(ApiError::NoLeader)?;
    let leader = view.leader.ok_or(ApiError::NoLeader)?;
    let info = ElectionInfo {
        name: view.name,
        leader: LeaderInfo {
            candidate: leader.candidate,
            value: json_value(&leader.value),
            token: leader.token,
            since_revision: leader.since_revision,
        },
        candidates: view.candidates,
    };
    Ok(Answer::ok(info, revision).into_response())
}
