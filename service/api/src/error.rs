//! The one place where errors become HTTP: every refusal is an RFC 9457
//! `application/problem+json` body with a stable `code`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use baton_core::CoreError;
use baton_raft::{RaftLayerError, WatchError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An RFC 9457 problem document, as every error response carries it: error
/// bodies are this type serialized, so the documented schema is the wire format.
/// The fields after `code` are present only where the `code` names them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// `https://baton.dev/errors/<code>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short, human-readable summary of the problem type.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
    /// Stable machine-readable error code (the table in README.md, "Errors").
    pub code: String,
    /// The current holder's identity (`lock_held`, `name_taken`); absent while
    /// the lock is free but in lock delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The current holder's or leader's fencing token (`lock_held`,
    /// `name_taken`, `not_elected`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// The token that holds now (`lock_lost` when someone else holds the lock,
    /// `token_mismatch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_token: Option<u64>,
    /// The current leader's candidate name (`not_elected`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// The Raft leader's node id, when known (`unavailable` from a node that is
    /// not the leader).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_id: Option<u64>,
    /// The revision the read asked for (`revision_not_reached`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
    /// The revision this node has applied (`revision_not_reached`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<u64>,
    /// The revision the watch asked to resume from (`revision_compacted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// The oldest revision a watch can still resume from (`revision_compacted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_revision: Option<u64>,
    /// The cap that was reached (`quota_exceeded`): leases, holdings, waiters or
    /// idempotency keys per principal, leases in the cluster, watch streams, or
    /// requests per second. A semaphore's limit (`semaphore_full`,
    /// `limit_mismatch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Permits out (`semaphore_full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_use: Option<u64>,
    /// The lock that blocks a multi-acquire (`lock_held` from `POST /v1/locks:acquire`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Answers of 500 `internal` since this process started (`/metrics`).
pub static INTERNAL_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Every way an API request can fail.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not valid JSON for this endpoint.
    #[error("{0}")]
    InvalidBody(String),
    /// The body is over the size limit.
    #[error("the request body is over {0} bytes")]
    BodyTooLarge(usize),
    /// A query parameter is malformed.
    #[error("{0}")]
    InvalidQuery(String),
    /// The `Idempotency-Key` header is malformed.
    #[error("Idempotency-Key must be 1 to 128 printable ASCII characters")]
    InvalidIdempotencyKey,
    /// `wait_ms` out of bounds.
    #[error("wait_ms must be between 0 and {max_ms}, got {wait_ms}")]
    InvalidWait {
        /// Requested.
        wait_ms: u64,
        /// Upper bound.
        max_ms: u64,
    },
    /// No election leader.
    #[error("the election has no leader")]
    NoLeader,
    /// The client closed its connection while its request waited.
    #[error("the client went away")]
    ClientGone,
    /// No valid credential: no token, an unknown token, or (membership) no
    /// cluster secret.
    #[error("{0}")]
    Unauthenticated(String),
    /// A valid credential without the right to do this.
    #[error("{0}")]
    Forbidden(String),
    /// An admin request to a node that has no admin credential configured: nobody
    /// may make it, so membership is never open by default.
    #[error(
        "membership changes are disabled: this node has neither --cluster-secret nor --auth-file"
    )]
    AdminDisabled,
    /// No route for this path.
    #[error("no such endpoint: {0}")]
    RouteNotFound(String),
    /// A known path asked with a method it does not serve.
    #[error("{method} is not allowed here; allowed: {allowed}")]
    MethodNotAllowed {
        /// The method asked.
        method: String,
        /// The methods the path serves (the `Allow` header).
        allowed: String,
    },
    /// The caller's request-rate bucket on this node is empty.
    #[error("quota exceeded: at most {per_second} requests a second (with a burst allowance) on this node")]
    RateLimited {
        /// The rate.
        per_second: u32,
        /// When the next request will pass.
        retry_after: Duration,
    },
    /// An answer that cannot happen: a bug in Baton, not an outage. Logged and
    /// counted (`baton_internal_errors_total`); no `Retry-After`, since
    /// retrying a bug does not help.
    #[error("internal error: {0}")]
    Internal(String),
    /// A refusal by the state machine.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The Raft layer could not serve the request.
    #[error(transparent)]
    Raft(#[from] RaftLayerError),
    /// A watch stream could not be opened.
    #[error(transparent)]
    Watch(#[from] WatchError),
}

struct Mapping {
    status: StatusCode,
    code: &'static str,
    title: &'static str,
}

const fn map(status: StatusCode, code: &'static str, title: &'static str) -> Mapping {
    Mapping {
        status,
        code,
        title,
    }
}

impl ApiError {
    /// The error table: status, stable code and title for every error.
    fn mapping(&self) -> Mapping {
        use CoreError as C;
        match self {
            ApiError::InvalidBody(_) => map(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                "Invalid request body",
            ),
            ApiError::BodyTooLarge(_) => map(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "Request body too large",
            ),
            ApiError::InvalidQuery(_) => map(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                "Invalid query parameter",
            ),
            ApiError::InvalidIdempotencyKey => map(
                StatusCode::BAD_REQUEST,
                "invalid_idempotency_key",
                "Invalid Idempotency-Key",
            ),
            ApiError::InvalidWait { .. } => {
                map(StatusCode::BAD_REQUEST, "invalid_wait", "Invalid wait")
            }
            ApiError::NoLeader => map(StatusCode::NOT_FOUND, "no_leader", "No leader"),
            ApiError::RateLimited { .. } => map(
                StatusCode::TOO_MANY_REQUESTS,
                "quota_exceeded",
                "Quota exceeded",
            ),
            ApiError::Internal(_) => map(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
            ),
            ApiError::MethodNotAllowed { .. } => map(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "Method not allowed",
            ),
            ApiError::RouteNotFound(_) => {
                map(StatusCode::NOT_FOUND, "route_not_found", "No such endpoint")
            }
            ApiError::Forbidden(_) => map(StatusCode::FORBIDDEN, "forbidden", "Forbidden"),
            ApiError::Unauthenticated(_) => map(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "Unauthenticated",
            ),
            ApiError::AdminDisabled => map(StatusCode::FORBIDDEN, "forbidden", "Forbidden"),
            // Nobody reads this answer; 499 is the conventional log entry for it.
            ApiError::ClientGone => map(
                StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
                "client_closed_request",
                "Client closed request",
            ),
            ApiError::Core(core) => match core {
                C::InvalidName { .. } => {
                    map(StatusCode::BAD_REQUEST, "invalid_name", "Invalid name")
                }
                C::InvalidTtl { .. } => map(StatusCode::BAD_REQUEST, "invalid_ttl", "Invalid TTL"),
                C::InvalidLockDelay { .. } => map(
                    StatusCode::BAD_REQUEST,
                    "invalid_lock_delay",
                    "Invalid lock delay",
                ),
                C::ValueTooLarge { .. } => map(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "value_too_large",
                    "Value too large",
                ),
                C::HolderTooLong { .. } => {
                    map(StatusCode::BAD_REQUEST, "invalid_holder", "Invalid holder")
                }
                C::LeaseNotFound => {
                    map(StatusCode::NOT_FOUND, "lease_not_found", "Lease not found")
                }
                // 128 random bits collided: a retry draws new ones.
                C::LeaseNotOwned => map(StatusCode::FORBIDDEN, "forbidden", "Forbidden"),
                C::LeaseExists => map(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "Retry"),
                C::LockHeld { .. } => map(StatusCode::CONFLICT, "lock_held", "Lock is held"),
                C::LockLost { .. } => map(StatusCode::CONFLICT, "lock_lost", "Lock lost"),
                C::NotElected { .. } => map(StatusCode::CONFLICT, "not_elected", "Not elected"),
                C::NotLeader => map(StatusCode::CONFLICT, "not_leader", "Not the leader"),
                C::NameTaken { .. } => map(StatusCode::CONFLICT, "name_taken", "Name is taken"),
                C::NotOwner => map(StatusCode::CONFLICT, "not_owner", "Not the owner"),
                C::NotFound => map(StatusCode::NOT_FOUND, "not_found", "Not found"),
                C::WaiterNotFound => map(StatusCode::CONFLICT, "lock_held", "Wait ended"),
                C::QuotaExceeded { .. } | C::QuotaReached { .. } => map(
                    StatusCode::TOO_MANY_REQUESTS,
                    "quota_exceeded",
                    "Quota exceeded",
                ),
                C::TokenMismatch { .. } => {
                    map(StatusCode::CONFLICT, "token_mismatch", "Token mismatch")
                }
                C::IdempotencyKeyReused => map(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "idempotency_key_reused",
                    "Idempotency key reused",
                ),
                // Only the leader's own clock proposes expiries; no client sees this.
                C::ExpiryOutdated { .. } => map(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "Internal error",
                ),
                C::LimitMismatch { .. } => {
                    map(StatusCode::CONFLICT, "limit_mismatch", "Limit mismatch")
                }
                C::InvalidLimit { .. } => {
                    map(StatusCode::BAD_REQUEST, "invalid_limit", "Invalid limit")
                }
                // 422, not 400: "more than the limit" relates two valid fields,
                // which a schema cannot say, so schema-valid input can meet it.
                C::InvalidPermits { .. } => map(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_permits",
                    "Invalid permits",
                ),
                // 422 for the same reason: "a name twice" is not a schema rule.
                C::InvalidLockList { .. } => map(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_lock_list",
                    "Invalid list of locks",
                ),
                C::SemaphoreFull { .. } => {
                    map(StatusCode::CONFLICT, "semaphore_full", "Semaphore is full")
                }
                C::PermitsLost => map(StatusCode::CONFLICT, "permits_lost", "Permits lost"),
                C::LocksHeld { .. } => map(StatusCode::CONFLICT, "lock_held", "Lock is held"),
            },
            ApiError::Raft(raft) => match raft {
                RaftLayerError::NotLeader { .. } | RaftLayerError::Unavailable { .. } => map(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "Unavailable",
                ),
                RaftLayerError::Overloaded { .. } => {
                    map(StatusCode::SERVICE_UNAVAILABLE, "overloaded", "Overloaded")
                }
                RaftLayerError::RevisionNotReached { .. } => map(
                    StatusCode::GATEWAY_TIMEOUT,
                    "revision_not_reached",
                    "Revision not reached",
                ),
                RaftLayerError::Internal(_) => map(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "Internal error",
                ),
                RaftLayerError::MemberNotFound(_) => {
                    map(StatusCode::NOT_FOUND, "member_not_found", "No such member")
                }
                RaftLayerError::MembershipRefused(_) => map(
                    StatusCode::CONFLICT,
                    "membership_refused",
                    "Membership change refused",
                ),
            },
            ApiError::Watch(watch) => match watch {
                WatchError::Compacted { .. } => {
                    map(StatusCode::GONE, "revision_compacted", "Revision compacted")
                }
                WatchError::TooManyWatchers { .. } => map(
                    StatusCode::TOO_MANY_REQUESTS,
                    "quota_exceeded",
                    "Quota exceeded",
                ),
                WatchError::Closed => map(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "Unavailable",
                ),
            },
        }
    }

    /// The problem document this error is sent as.
    pub fn problem(&self) -> Problem {
        let mapping = self.mapping();
        let mut problem = Problem {
            kind: format!("https://baton.dev/errors/{}", mapping.code),
            title: mapping.title.to_owned(),
            status: mapping.status.as_u16(),
            detail: self.to_string(),
            code: mapping.code.to_owned(),
            ..Problem::default()
        };
        match self {
            ApiError::Core(CoreError::LockHeld { holder, token }) => {
                problem.holder = holder.clone();
                problem.token = *token;
            }
            ApiError::Core(CoreError::TokenMismatch { current_token }) => {
                problem.current_token = Some(*current_token);
            }
            ApiError::Core(CoreError::LockLost { current_token }) => {
                problem.current_token = *current_token;
            }
            ApiError::Core(CoreError::NotElected { leader, token }) => {
                problem.leader = leader.clone();
                problem.token = *token;
            }
            ApiError::Core(CoreError::NameTaken { holder, token }) => {
                problem.holder = Some(holder.clone());
                problem.token = Some(*token);
            }
            ApiError::Raft(RaftLayerError::NotLeader { leader_id, .. }) => {
                problem.leader_id = *leader_id;
            }
            ApiError::Raft(RaftLayerError::RevisionNotReached { wanted, applied }) => {
                problem.min_revision = Some(*wanted);
                problem.applied_revision = Some(*applied);
            }
            ApiError::Watch(WatchError::Compacted { since, oldest }) => {
                problem.since = Some(*since);
                problem.oldest_revision = Some(*oldest);
            }
            ApiError::Core(CoreError::QuotaReached { limit, .. }) => {
                problem.limit = Some(*limit);
            }
            ApiError::Core(CoreError::LocksHeld {
                name,
                holder,
                token,
            }) => {
                problem.name = Some(name.clone());
                problem.holder = holder.clone();
                problem.token = *token;
            }
            ApiError::Core(CoreError::SemaphoreFull { in_use, limit, .. }) => {
                problem.in_use = Some(*in_use);
                problem.limit = Some(u64::from(*limit));
            }
            ApiError::Core(CoreError::LimitMismatch { limit }) => {
                problem.limit = Some(u64::from(*limit));
            }
            ApiError::Watch(WatchError::TooManyWatchers { limit, .. }) => {
                problem.limit = Some(*limit as u64);
            }
            ApiError::RateLimited { per_second, .. } => {
                problem.limit = Some(u64::from(*per_second));
            }
            _ => {}
        }
        problem
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::Raft(RaftLayerError::Unavailable { retry_after, .. }) => Some(*retry_after),
            ApiError::Raft(RaftLayerError::NotLeader { .. })
            | ApiError::Raft(RaftLayerError::Overloaded { .. })
            | ApiError::Core(CoreError::LeaseExists)
            | ApiError::Watch(WatchError::Closed) => Some(Duration::from_secs(1)),
            // Whole seconds, rounded up: never an invitation to retry too early.
            ApiError::RateLimited { retry_after, .. } => Some(Duration::from_secs(
                retry_after.as_secs_f64().ceil().max(1.0) as u64,
            )),
            _ => None,
        }
    }

    /// The stable error code.
    pub fn code(&self) -> &'static str {
        self.mapping().code
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.mapping().status
    }

    fn error_response(&self) -> HttpResponse {
        let problem = self.problem();
        if self.status_code() == StatusCode::INTERNAL_SERVER_ERROR {
            INTERNAL_ERRORS.fetch_add(1, Ordering::Relaxed);
            tracing::error!(detail = %problem.detail, "answered 500 internal");
        }
        let mut response = HttpResponse::build(self.status_code());
        response.insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        ));
        if let ApiError::MethodNotAllowed { allowed, .. } = self {
            response.insert_header((header::ALLOW, allowed.clone()));
        }
        if let ApiError::Unauthenticated(_) = self {
            response.insert_header((header::WWW_AUTHENTICATE, "Bearer realm=\"baton\""));
        }
        if let Some(after) = self.retry_after() {
            response.insert_header((header::RETRY_AFTER, after.as_secs().max(1).to_string()));
        }
        response.body(serde_json::to_string(&problem).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_impossible_reply_is_a_counted_500_that_invites_no_retry() {
        for error in [
            ApiError::Internal("a reply this request cannot have".into()),
            ApiError::Raft(RaftLayerError::Internal(
                "the leader answered a different call".into(),
            )),
        ] {
            let before = INTERNAL_ERRORS.load(Ordering::Relaxed);
            let response = error.error_response();
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
            assert!(response.headers().get(header::RETRY_AFTER).is_none());
            assert_eq!(error.code(), "internal");
            assert!(INTERNAL_ERRORS.load(Ordering::Relaxed) > before);
        }
        // An outage still invites a retry.
        let outage = ApiError::Raft(RaftLayerError::Overloaded { queued: 1 });
        assert!(outage
            .error_response()
            .headers()
            .get(header::RETRY_AFTER)
            .is_some());
    }
}
