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

/// A command's typed reply, with what every answer carries.
pub struct Applied<T> {
    /// The reply, in the shape the command answers with.
    pub reply: T,
    /// Revision after the command (or of the first answer, when replayed).
    pub revision: u64,
    /// Replayed for a retried idempotency key.
    pub replayed: bool,
}

/// Splits an outcome into its typed reply or its error. `expect` is the reply
/// accessor of the command that was proposed (`Reply::into_lock_released`, ...):
/// a reply of another shape is a bug in Baton, answered 500 `internal`.
pub fn applied<T>(
    outcome: Outcome,
    expect: fn(Reply) -> Result<T, Reply>,
) -> Result<Applied<T>, ApiError> {
    let Outcome {
        revision,
        result,
        replayed,
        ..
    } = outcome;
    let reply = expect(result?).map_err(|other| unexpected(&other))?;
    Ok(Applied {
        reply,
        revision,
        replayed,
    })
}

/// Proposes `command`, keyed by the request's `Idempotency-Key` if it has one,
/// and returns its reply through `expect` (see [`applied`]).
pub async fn propose<T>(
    state: &ApiState,
    http: &HttpRequest,
    body: &[u8],
    command: Command,
    expect: fn(Reply) -> Result<T, Reply>,
) -> Result<Applied<T>, ApiError> {
    let request = Request {
        idempotency: idempotency_key(http, body)?,
        command: crate::auth::Caller::of(http).command(command, &state.settings.quota)?,
    };
    applied(state.node.propose(request).await?, expect)
}

/// The reply did not have the shape this endpoint expects: a bug, never input.
fn unexpected(reply: &Reply) -> ApiError {
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
