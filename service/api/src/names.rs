//! `/v1/names`: the cluster-unique name registry.

use actix_web::http::StatusCode;
use actix_web::web;
use actix_web::{HttpRequest, HttpResponse};
use baton_core::{Command, CoreError, NameView, Reply, StateMachine};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::{Caller, Kind};
use crate::error::{ApiError, Problem};
use crate::paging::list_page;
use crate::request::{
    checked_name, parse_lease_id, parse_required_body, read_body, settle_read, ListQuery, ReadQuery,
};
use crate::respond::{lease_ref, propose, Answer};
use crate::state::ApiState;

/// Body of `PUT /v1/names/{name}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterBody {
    /// Register on this lease; without it, a lease is created for this name alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// TTL of the lease created when `lease_id` is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Owner identity (defaults to the lease's holder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The registered value (any JSON, ≤ 4 KiB).
    pub value: Value,
}

/// A registration.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Registered {
    /// The name.
    pub name: String,
    /// Its value.
    pub value: Value,
    /// The registration's token (unchanged by value updates).
    pub token: u64,
    /// The lease it hangs on.
    pub lease_id: String,
    /// Revision of this change.
    pub revision: u64,
}

/// Body of `DELETE /v1/names/{name}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnregisterBody {
    /// The owner's lease.
    pub lease_id: String,
}

/// An unregistration.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Unregistered {
    /// Always true.
    pub unregistered: bool,
}

/// A registered name as anyone may see it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct NameInfo {
    /// The name.
    pub name: String,
    /// Its value.
    pub value: Value,
    /// Owner identity.
    pub holder: String,
    /// The registration's token.
    pub token: u64,
    /// Revision of the last change.
    pub since_revision: u64,
}

impl From<NameView> for NameInfo {
    fn from(view: NameView) -> Self {
        NameInfo {
            name: view.name,
            value: baton_raft::stored_value(&view.value),
            holder: view.holder,
            token: view.token,
            since_revision: view.since_revision,
        }
    }
}

/// A page of names.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct NamePage {
    /// Registered names, in name order.
    pub items: Vec<NameInfo>,
    /// Pass as `page_token` for the next page; null on the last page.
    pub next_page_token: Option<String>,
}

/// Register a name (201), or update its value by the same lease (200).
#[utoipa::path(put, operation_id = "register_name", path = "/v1/names/{name}", tag = "names",
    params(("name" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body = RegisterBody,
    responses(
        (status = 201, body = Registered, description = "registered"),
        (status = 200, body = Registered, description = "value updated by the owning lease"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "name_taken (with holder, token)"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "lease_not_found"),
        (status = 413, body = Problem, content_type = "application/problem+json", description = "value_too_large"),
    ))]
pub async fn register(
    state: web::Data<ApiState>,
    http: HttpRequest,
    caller: Caller,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let name = checked_name(&path)?;
    caller.require(Kind::Name, &name)?;
    let input: RegisterBody = parse_required_body(&body)?;
    let lease = lease_ref(&state, input.lease_id.as_deref(), input.ttl_ms)?;
    let command = Command::Register {
        name,
        lease,
        holder: input.holder,
        value: input.value.to_string(),
    };
    let done = propose(&state, &http, &body, command, Reply::into_name_registered).await?;
    let baton_core::NameRegistered {
        grant,
        value,
        created,
    } = done.reply;
    let token = grant.token;
    let body = Registered {
        name: grant.name,
        value: baton_raft::stored_value(&value),
        token,
        lease_id: grant.lease_id.to_string(),
        revision: done.revision,
    };
    let mut answer = Answer::ok(body, done.revision)
        .with_token(token)
        .replay(done.replayed);
    if created {
        answer.status = StatusCode::CREATED;
    }
    Ok(answer.into_response())
}

/// Look a name up.
#[utoipa::path(get, operation_id = "get_name", path = "/v1/names/{name}", tag = "names",
    params(("name" = String, Path), ReadQuery),
    responses(
        (status = 200, body = NameInfo),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found"),
    ))]
pub async fn get(
    state: web::Data<ApiState>,
    path: web::Path<String>,
    query: web::Query<ReadQuery>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let name = checked_name(&path)?;
    caller.require(Kind::Name, &name)?;
    settle_read(&state, &query).await?;
    let (view, revision) = state.node.read(|sm| (sm.name(&name), sm.revision()));
    let view = view.ok_or(ApiError::Core(CoreError::NotFound))?;
    Ok(Answer::ok(NameInfo::from(view), revision).into_response())
}

/// Unregister a name owned by this lease.
#[utoipa::path(delete, operation_id = "unregister_name", path = "/v1/names/{name}", tag = "names",
    params(("name" = String, Path)),
    request_body = UnregisterBody,
    responses(
        (status = 200, body = Unregistered),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "not_owner"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "not_found"),
    ))]
pub async fn unregister(
    state: web::Data<ApiState>,
    http: HttpRequest,
    caller: Caller,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(payload).await?;
    let name = checked_name(&path)?;
    caller.require(Kind::Name, &name)?;
    let input: UnregisterBody = parse_required_body(&body)?;
    // A malformed id owns nothing: the name's absence (404) or ownership (409)
    // decides the answer, as for any other wrong id.
    let lease_id = parse_lease_id(&input.lease_id).unwrap_or(baton_core::LeaseId(0));
    let command = Command::Unregister { name, lease_id };
    let done = propose(&state, &http, &body, command, Reply::into_name_unregistered).await?;
    let answer =
        Answer::ok(Unregistered { unregistered: true }, done.revision).replay(done.replayed);
    Ok(answer.into_response())
}

/// List registered names by prefix, in name order.
#[utoipa::path(get, operation_id = "list_names", path = "/v1/names", tag = "names",
    params(ListQuery),
    responses(
        (status = 200, body = NamePage),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_query"),
    ))]
pub async fn list(
    state: web::Data<ApiState>,
    query: web::Query<ListQuery>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require_any(Kind::Name)?;
    let fetch =
        |sm: &StateMachine, prefix: &str, after: Option<&str>, n| sm.names(prefix, after, n);
    let listed = list_page(&state, &caller, Kind::Name, &query, fetch, |v| &v.name).await?;
    let page = NamePage {
        items: listed.items.into_iter().map(NameInfo::from).collect(),
        next_page_token: listed.next_page_token,
    };
    Ok(Answer::ok(page, listed.revision).into_response())
}
