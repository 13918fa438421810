//! Building success responses and proposing commands.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use baton_core::{Command, Outcome, Reply, Request};
use serde::Serialize;

use crate::error::ApiError;
use crate::request::idempotency_key;
use crate::state::ApiState;

/// Header with the revision a response reflects.
pub const REVISION_HEADER: &str = "baton-revision";
/// Header with the fencing token of a grant.
pub const TOKEN_HEADER: &str = "baton-fencing-token";
/// Header set on a response replayed for a retried `Idempotency-Key`.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// A successful answer.
pub struct Answer<T: Serialize> {
    /// HTTP status.
    pub status: StatusCode,
    /// JSON body.
    pub body: T,
    /// Revision the answer reflects.
    pub revision: u64,
    /// Fencing token, for grants.
    pub token: Option<u64>,
    /// Replayed for a retried idempotency key.
    pub replayed: bool,
}

impl<T: Serialize> Answer<T> {
    /// A 200 answer.
    pub fn ok(body: T, revision: u64) -> Self {
        Answer {
            status: StatusCode::OK,
            body,
            revision,
            token: None,
            replayed: false,
        }
    }

    /// Sets the fencing token header.
    pub fn with_token(mut self, token: u64) -> Self {
        self.token = Some(token);
        self
    }

    /// Marks the answer as replayed for a retried idempotency key.
    pub fn replay(mut self, replayed: bool) -> Self {
        self.replayed = replayed;
        self
    }

    /// Renders the response.
    pub fn into_response(self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        response.insert_header((REVISION_HEADER, self.revision.to_string()));
        if let Some(token) = self.token {
            response.insert_header((TOKEN_HEADER, token.to_string()));
        }
        if self.replayed {
            response.insert_header((REPLAYED_HEADER, "true"));
        }
        response.json(self.body)
    }
}

/// A command's outcome, reduced to what handlers need.
pub struct Applied {
    /// The reply.
    pub reply: Reply,
    /// Revision after the command (or of the first answer, when replayed).
    pub revision: u64,
    /// Replayed for a retried idempotency key.
    pub replayed: bool,
}

/// Splits an outcome into its reply or its error.
pub fn applied(outcome: Outcome) -> Result<Applied, ApiError> {
    let Outcome {
        revision,
        result,
        replayed,
        ..
    } = outcome;
    Ok(Applied {
        reply: result?,
        revision,
        replayed,
    })
}

/// Proposes `command`, keyed by the request's `Idempotency-Key` if it has one.
pub async fn propose(
    state: &ApiState,
    http: &HttpRequest,
    body: &[u8],
    command: Command,
) -> Result<Outcome, ApiError> {
    let request = Request {
        idempotency: idempotency_key(http, body)?,
        command: crate::auth::Caller::of(http).command(command, &state.settings.quota)?,
    };
    Ok(state.node.propose(request).await?)
}

/// The reply did not have the shape this endpoint expects: a bug, never input.
pub fn unexpected(reply: &Reply) -> ApiError {
    tracing::error!(?reply, "unexpected reply");
    ApiError::Internal("the state machine gave a reply this request cannot have".into())
}

/// The lease a new holding hangs on: the caller's, or one created for this holding
/// alone (revoked with it) when the request names none.
pub fn lease_ref(
    state: &ApiState,
    lease_id: Option<&str>,
    ttl_ms: Option<u64>,
) -> Result<baton_core::LeaseRef, ApiError> {
    Ok(match lease_id {
        Some(text) => baton_core::LeaseRef::Existing(crate::request::parse_lease_id(text)?),
        None => baton_core::LeaseRef::New {
            lease_id: baton_raft::Node::new_lease_id(),
            ttl_ms: ttl_ms.unwrap_or(state.settings.default_ttl_ms),
        },
    })
}

/// Proposes a request that may queue (`waiter` is `Some` when `wait_ms > 0`) and
/// waits for its grant; a client that goes away while queued ends the wait
/// (`ApiError::ClientGone`), which leaves the queue through the log.
pub async fn propose_waiting(
    state: &ApiState,
    http: &HttpRequest,
    request: Request,
    kind: baton_raft::QueueKind,
    waiter: Option<baton_core::WaiterId>,
    wait_ms: u64,
) -> Result<baton_raft::Waited, ApiError> {
    let request = Request {
        command: crate::auth::Caller::of(http).command(request.command, &state.settings.quota)?,
        ..request
    };
    let Some(waiter) = waiter else {
        return Ok(baton_raft::Waited::Immediate(
            state.node.propose(request).await?,
        ));
    };
    let waited = state
        .node
        .propose_and_wait(
            request,
            kind,
            waiter,
            std::time::Duration::from_millis(wait_ms),
            crate::disconnect::client_gone(http),
        )
        .await?;
    match waited {
        baton_raft::Waited::Abandoned => Err(ApiError::ClientGone),
        other => Ok(other),
    }
}
