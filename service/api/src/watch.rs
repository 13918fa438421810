//! `GET /v1/watch` and `GET /v1/elections/{name}:observe`: Server-Sent Events
//! streams of state changes, read from this replica's watch hub.
//!
//! A stream sends, in revision order, one frame per matching change
//! (`id: <revision>`, `event: <kind>.<what>`, `data: <json>`), a
//! `event: bookmark` frame (`id:` = every change up to it was sent) when it
//! starts and at least every bookmark interval, and, when it cannot go on, a
//! final `event: resync` frame (`id:` = where to resume, `data.reason` =
//! `lagged`, `compacted`, `snapshot`, `shutdown` or `unauthorized`) before it
//! closes.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header;
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use baton_raft::{sse_frame, Step, Subscription, WatchFilter, WatchKind};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::IntoParams;

use crate::auth::{AuthPolicy, Caller, Kind};
use crate::disconnect::hand_over_to_stream;
use crate::error::{ApiError, Problem};
use crate::request::checked_name;
use crate::request_metrics::RequestMetrics;
use crate::respond::REVISION_HEADER;
use crate::state::ApiState;

/// Most events a stream takes from the hub at a time.
const BATCH: usize = 64;

/// Query of `GET /v1/watch`.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    /// Only changes of locks, elections and names starting with this prefix
    /// (lease events have no name and are left out when a prefix is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Comma-separated resource kinds: `lock`, `election`, `name`, `lease`,
    /// `semaphore` (default: all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kinds: Option<String>,
    /// Send the changes after this revision (default: only new ones). A
    /// `Last-Event-ID` header takes precedence, so a reconnecting `EventSource`
    /// resumes where it stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// Bookmark interval for this stream, in milliseconds (100 up to the
    /// server's interval, default 10000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bookmark_ms: Option<u64>,
}

/// Query of `GET /v1/elections/{name}:observe`.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ObserveQuery {
    /// As for `/v1/watch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// As for `/v1/watch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bookmark_ms: Option<u64>,
}

/// Who a stream counts against (watch quotas): the principal when auth is on,
/// else the client's IP address as seen on the socket (never a header a client
/// could set; behind a proxy, every client of that proxy shares it).
fn principal(request: &HttpRequest) -> String {
    if let Some(name) = Caller::of(request).name() {
        return format!("principal:{name}");
    }
    request
        .peer_addr()
        .map(|addr| addr.ip().to_string())
        .unwrap_or_default()
}

/// `Last-Event-ID` if present, else `since`.
fn start_revision(request: &HttpRequest, since: Option<u64>) -> Result<Option<u64>, ApiError> {
    match request.headers().get("last-event-id") {
        None => Ok(since),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| ApiError::InvalidQuery("Last-Event-ID must be a revision".into())),
    }
}

fn parse_kinds(text: Option<&str>) -> Result<Vec<WatchKind>, ApiError> {
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        return Ok(WatchKind::ALL.to_vec());
    };
    text.split(',')
        .map(|part| {
            WatchKind::parse(part.trim()).ok_or_else(|| {
                let known = WatchKind::ALL.map(|kind| kind.as_str()).join(", ");
                ApiError::InvalidQuery(format!("kinds: unknown kind '{part}' ({known})"))
            })
        })
        .collect()
}

fn bookmark_interval(state: &ApiState, asked_ms: Option<u64>) -> Result<Duration, ApiError> {
    let server = state.node.watch_hub().config().bookmark_interval;
    let Some(asked_ms) = asked_ms else {
        return Ok(server);
    };
    let max_ms = server.as_millis() as u64;
    let min_ms = max_ms.min(100);
    if !(min_ms..=max_ms).contains(&asked_ms) {
        return Err(ApiError::InvalidQuery(format!(
            "bookmark_ms must be between {min_ms} and {max_ms}, got {asked_ms}"
        )));
    }
    Ok(Duration::from_millis(asked_ms))
}

/// Watch changes.
///
/// A `text/event-stream` of every state change on this replica, in revision
/// order: `id: <revision>`, `event: <kind>.<what>`, `data: <JSON>`. Events:
/// `lock.acquired`, `lock.released`, `lock.revoked`, `lock.expired`,
/// `lock.queued`, `lock.wait_ended`; `election.elected`, `election.proclaimed`,
/// `election.resigned`, `election.revoked`, `election.expired`,
/// `election.candidate_queued`, `election.candidate_left`; `name.registered`,
/// `name.updated`, `name.unregistered`, `name.revoked`, `name.expired`;
/// `lease.created`, `lease.revoked`, `lease.expired`. Lease ids never appear.
///
/// `event: bookmark` (`id:` and `data.revision` = every change up to there was
/// sent) comes first and at least every `bookmark_ms`. A final `event: resync`
/// (`id:` = the revision to resume from, `data.reason`) ends a stream that
/// cannot go on: `lagged` (the client read too slowly: resume with
/// `since=<id>`), `compacted` or `snapshot` (history is gone: re-list, then
/// watch from the listed `Baton-Revision`), `shutdown` (the server stops:
/// resume elsewhere or later), `unauthorized` (the auth file was reloaded and
/// the stream's token was revoked or its rights changed: reconnect with a valid
/// token, resuming with `since=<id>`).
#[utoipa::path(get, operation_id = "watch", path = "/v1/watch", tag = "watch",
    params(WatchQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this revision (takes precedence over `since`)")),
    responses(
        (status = 200, content_type = "text/event-stream", body = String, description = "Server-Sent Events; Baton-Revision is the revision the stream starts after"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_query"),
        (status = 410, body = Problem, content_type = "application/problem+json", description = "revision_compacted (with oldest_revision): re-list, then watch from the listed revision"),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "quota_exceeded (too many watch streams)"),
        (status = 503, body = Problem, content_type = "application/problem+json", description = "unavailable: the node is shutting down (with Retry-After)"),
    ))]
pub async fn watch(
    state: web::Data<ApiState>,
    request: HttpRequest,
    query: web::Query<WatchQuery>,
) -> Result<HttpResponse, ApiError> {
    let kinds = parse_kinds(query.kinds.as_deref())?;
    Caller::of(&request).require_any(Kind::Watch)?;
    let filter = WatchFilter::new(&kinds, query.prefix.clone());
    // A principal sees only events of names under its watch prefixes (and no
    // lease events, which carry other principals' holders).
    let filter = match Caller::of(&request).watch_prefixes() {
        Some(allowed) => filter.within(allowed),
        None => filter,
    };
    let since = start_revision(&request, query.since)?;
    let interval = bookmark_interval(&state, query.bookmark_ms)?;
    open(&state, &request, since, filter, interval)
}

/// Observe an election.
///
/// A `text/event-stream` of this election's leader changes and proclaimed
/// values: `election.elected`, `election.proclaimed`, `election.resigned`,
/// `election.revoked`, `election.expired`, with bookmarks and the final
/// `resync` event as for `/v1/watch`. To know the leader first, `GET` the
/// election and observe with `since=<its Baton-Revision>`.
#[utoipa::path(get, operation_id = "observe_election", path = "/v1/elections/{name}:observe", tag = "elections",
    params(("name" = String, Path), ObserveQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this revision (takes precedence over `since`)")),
    responses(
        (status = 200, content_type = "text/event-stream", body = String, description = "Server-Sent Events"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "invalid_name, invalid_query"),
        (status = 410, body = Problem, content_type = "application/problem+json", description = "revision_compacted"),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "quota_exceeded"),
        (status = 503, body = Problem, content_type = "application/problem+json", description = "unavailable: the node is shutting down"),
    ))]
pub async fn observe(
    state: web::Data<ApiState>,
    request: HttpRequest,
    path: web::Path<String>,
    query: web::Query<ObserveQuery>,
) -> Result<HttpResponse, ApiError> {
    let name = checked_name(&path)?;
    Caller::of(&request).require(Kind::Election, &name)?;
    let since = start_revision(&request, query.since)?;
    let interval = bookmark_interval(&state, query.bookmark_ms)?;
    open(
        &state,
        &request,
        since,
        WatchFilter::election(&name),
        interval,
    )
}

fn open(
    state: &ApiState,
    request: &HttpRequest,
    since: Option<u64>,
    filter: WatchFilter,
    interval: Duration,
) -> Result<HttpResponse, ApiError> {
    let subscription = state
        .node
        .watch_hub()
        .subscribe(since, &principal(request), filter)?;
    let start = subscription.cursor();
    state.metrics.watch_opened();
    let mut bookmarks = tokio::time::interval(interval);
    bookmarks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let revocation = state.auth.as_ref().map(|auth| {
        let mut policies = auth.subscribe();
        // Judged once before the first batch: a reload may have come between
        // this request's admission and the subscription.
        policies.mark_changed();
        Revocation {
            caller: Caller::of(request),
            policies,
        }
    });
    let stream = EventStream {
        metrics: state.metrics.clone(),
        subscription,
        pending: VecDeque::new(),
        bookmarks,
        revocation,
        ended: false,
    };
    let mut response = HttpResponse::Ok();
    hand_over_to_stream(request, &mut response);
    Ok(response
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        // Tells nginx-style proxies not to buffer the stream.
        .insert_header(("x-accel-buffering", "no"))
        .insert_header((REVISION_HEADER, start.to_string()))
        .streaming(futures_util::stream::unfold(stream, EventStream::next)))
}

/// One open stream: its hub subscription and the frames ready to send.
struct EventStream {
    metrics: Arc<RequestMetrics>,
    subscription: Subscription,
    /// Frames taken from the hub, not yet sent (at most [`BATCH`] + 1); they
    /// share the hub's bytes.
    pending: VecDeque<Bytes>,
    bookmarks: tokio::time::Interval,
    /// With auth on: who opened the stream, and the reloads to judge them by.
    revocation: Option<Revocation>,
    ended: bool,
}

/// A stream's caller and the auth file's reloads: a reload that revokes the
/// caller's token or changes its rights ends the stream (`resync`, reason
/// `unauthorized`), since its filter was fixed when it opened.
struct Revocation {
    caller: Caller,
    policies: tokio::sync::watch::Receiver<(Arc<AuthPolicy>, Vec<u8>)>,
}

impl Revocation {
    /// Whether the policy now in force still grants what the stream was opened
    /// with (marks the current policy seen). Judged again only after a reload:
    /// this runs before every batch of events.
    fn still_valid(&mut self) -> bool {
        if !self.policies.has_changed().unwrap_or(false) {
            return true;
        }
        let policy = self.policies.borrow_and_update().0.clone();
        self.caller.still_valid_under(&policy)
    }

    /// Waits for the next reload; never returns once the authenticator is gone.
    async fn reloaded(&mut self) {
        if self.policies.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Waits for the next auth reload of `revocation`; forever without auth.
async fn reloaded(revocation: Option<&mut Revocation>) {
    match revocation {
        Some(revocation) => revocation.reloaded().await,
        None => std::future::pending().await,
    }
}

impl EventStream {
    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, EventStream)> {
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return Some((Ok(frame), self));
            }
            if self.ended {
                return None;
            }
            let revoked = self
                .revocation
                .as_mut()
                .is_some_and(|revocation| !revocation.still_valid());
            if revoked {
                self.metrics.watch_resynced(None);
                self.end("unauthorized");
                continue;
            }
            match self.subscription.next_step(BATCH) {
                Step::Events(events) => {
                    if events.is_empty() {
                        // A long run of filtered-out events: let others run.
                        tokio::task::yield_now().await;
                    }
                    self.pending
                        .extend(events.iter().map(|event| event.frame()));
                }
                Step::CaughtUp => {
                    tokio::select! {
                        _ = self.subscription.changed() => {}
                        _ = reloaded(self.revocation.as_mut()) => {}
                        _ = self.bookmarks.tick() => {
                            let revision = self.subscription.cursor();
                            self.pending.push_back(sse_frame(
                                revision,
                                "bookmark",
                                &json!({"revision": revision}),
                            ));
                        }
                    }
                }
                Step::End(reason) => {
                    self.metrics.watch_resynced(Some(reason));
                    self.end(reason.as_str());
                }
            }
        }
    }

    /// Queues the final `resync` frame (resume after the cursor) and ends.
    fn end(&mut self, reason: &str) {
        let revision = self.subscription.cursor();
        self.pending.push_back(sse_frame(
            revision,
            "resync",
            &json!({"revision": revision, "reason": reason}),
        ));
        self.ended = true;
    }
}
