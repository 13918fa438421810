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
        command,
    };
    Ok(state.node.propose(request).await?)
}

/// The reply did not have the shape this endpoint expects: a bug, never input.
pub fn unexpected(reply: &Reply) -> ApiError {
    tracing::error!(?reply, "unexpected reply");
    ApiError::Raft(baton_raft::RaftLayerError::Unavailable {
        reason: "unexpected reply from the state machine".into(),
        retry_after: std::time::Duration::from_secs(1),
    })
}
