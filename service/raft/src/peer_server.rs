//! The peer listener: openraft's RPCs, leader calls from followers and the
//! status bootstrap asks for. Served on its own address, never on the client
//! API, and only to callers presenting the cluster secret when one is set.
//!
//! It is served by hyper on the node's own tokio runtime, where the Raft core
//! runs, rather than on actix workers like the client API: a follower's append
//! is read, handed to the core, written and answered without a wake-up of
//! another thread on the way in and out (ARCHITECTURE.md, "The peer listener
//! on the runtime").

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_store::TypeConfig;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body as _, Incoming};
use hyper::header::{HeaderMap, HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use crate::leader_call::LeaderCall;
use crate::log_versions::LOG_VERSION_HEADER;
use crate::network::CLUSTER_SECRET_HEADER;
use crate::node::{Node, MAX_PAYLOAD_ENTRIES};

/// Largest peer request body: a catching-up append of 64 full batches, or a
/// 1 MiB snapshot chunk, as JSON, with room to spare.
const MAX_PEER_BODY: usize = 128 << 20;

/// Bodies at least this large are parsed off the runtime (see [`parse`]): an
/// append of a few hundred commands parses in well under a millisecond.
const PARSE_ON_RUNTIME_BELOW: usize = 256 << 10;

/// How long a connection may take to send a request's headers (or its TLS
/// handshake): a peer sends them at once, anything slower is not a peer.
/// hyper starts this timer whenever it waits for a request head, so it also
/// closes a keep-alive connection idle this long (the peer client lets go first:
/// [`crate::network::PEER_IDLE_TIMEOUT`]).
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the listener rests after `accept` fails (out of file descriptors,
/// say) before it tries again, so the failure does not spin a core.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Whether `presented` (the value of the cluster-secret header, if any) is one
/// of the `accepted` secrets (see [`crate::NodeConfig::accepted_secrets`]), each
/// compared in constant time and all of them compared. Always true when
/// `accepted` is empty (no secret set).
pub fn secret_matches(presented: Option<&[u8]>, accepted: &[String]) -> bool {
    if accepted.is_empty() {
        return true;
    }
    let presented = presented.unwrap_or_default();
    accepted.iter().fold(false, |matched, secret| {
        matched | bool::from(presented.ct_eq(secret.as_bytes()))
    })
}

/// The running peer listener; [`PeerServer::stop`] ends it.
pub struct PeerServer {
    accepting: JoinHandle<()>,
}

impl PeerServer {
    /// Serves the peer routes of `node` on `listener` (already bound, so its
    /// address could be advertised), over TLS with `tls` when given. Must be
    /// called on the runtime the node runs on.
    pub fn start(
        listener: std::net::TcpListener,
        node: Arc<Node>,
        tls: Option<rustls::ServerConfig>,
    ) -> std::io::Result<Self> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let routes = Arc::new(PeerRoutes::new(node));
        let tls = tls.map(|config| TlsAcceptor::from(Arc::new(config)));
        Ok(PeerServer {
            accepting: tokio::spawn(accept(listener, routes, tls)),
        })
    }

    /// Stops accepting and ends every open connection (the node has stopped
    /// by then: nothing a peer sends would be answered).
    pub async fn stop(self) {
        self.accepting.abort();
        let _ = self.accepting.await;
    }
}

/// Accepts connections until aborted; the connections are tasks of a set the
/// loop owns, so aborting it ends them too.
async fn accept(listener: TcpListener, routes: Arc<PeerRoutes>, tls: Option<TlsAcceptor>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, routes.clone(), tls.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "the peer listener could not accept a connection");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, routes: Arc<PeerRoutes>, tls: Option<TlsAcceptor>) {
    // Replies are small and each is awaited by the leader: never hold one back.
    let _ = stream.set_nodelay(true);
    match tls {
        None => serve_http(stream, routes).await,
        Some(acceptor) => match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await
        {
            Ok(Ok(stream)) => serve_http(stream, routes).await,
            Ok(Err(error)) => tracing::debug!(%error, "TLS handshake on the peer listener failed"),
            Err(_) => tracing::debug!("TLS handshake on the peer listener timed out"),
        },
    }
}

/// Serves HTTP/1.1 requests on `io` until the peer closes it.
async fn serve_http<I>(io: I, routes: Arc<PeerRoutes>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let routes = routes.clone();
        async move { Ok::<_, Infallible>(routes.answer(request).await) }
    });
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(error) = served {
        tracing::debug!(%error, "peer connection ended with an error");
    }
}

/// The routes under `/raft`, and what every answer carries.
struct PeerRoutes {
    node: Arc<Node>,
    accepted: Vec<String>,
    log_version: HeaderValue,
}

impl PeerRoutes {
    fn new(node: Arc<Node>) -> Self {
        PeerRoutes {
            accepted: node.config.accepted_secrets(),
            log_version: HeaderValue::from(node.config.log_version),
            node,
        }
    }

    /// Answers one request. Under `/raft` only with the cluster secret, and
    /// every answer there says this node's log version (a peer of another
    /// version learns it even from a refusal).
    async fn answer(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        if !request.uri().path().starts_with("/raft/") {
            return text(StatusCode::NOT_FOUND, "");
        }
        let presented = request
            .headers()
            .get(CLUSTER_SECRET_HEADER)
            .map(|value| value.as_bytes());
        if !secret_matches(presented, &self.accepted) {
            return text(StatusCode::UNAUTHORIZED, "missing or wrong cluster secret");
        }
        let mut response = self.route(request).await;
        response
            .headers_mut()
            .insert(LOG_VERSION_HEADER, self.log_version.clone());
        response
    }

    async fn route(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let node = &self.node;
        let path = request.uri().path();
        let Some(route) = PeerRoute::of(path) else {
            return text(StatusCode::NOT_FOUND, "");
        };
        if request.method() != *route.method() {
            let mut refused = text(StatusCode::METHOD_NOT_ALLOWED, "");
            refused
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static(route.method().as_str()));
            return refused;
        }
        match route {
            PeerRoute::Append => with_body(request, |_, body| append(node, body)).await,
            PeerRoute::Vote => with_body(request, |_, body| vote(node, body)).await,
            PeerRoute::Snapshot => with_body(request, |_, body| snapshot(node, body)).await,
            PeerRoute::Leader => {
                with_body(request, |headers, body| leader(node, headers, body)).await
            }
            PeerRoute::Status => json(&node.peer_status()),
        }
    }
}

/// The peer listener's paths, each served for one method only.
#[derive(Clone, Copy)]
enum PeerRoute {
    Append,
    Vote,
    Snapshot,
    Leader,
    Status,
}

impl PeerRoute {
    /// The route `path` names, if any.
    fn of(path: &str) -> Option<PeerRoute> {
        Some(match path {
            "/raft/append" => PeerRoute::Append,
            "/raft/vote" => PeerRoute::Vote,
            "/raft/snapshot" => PeerRoute::Snapshot,
            "/raft/leader" => PeerRoute::Leader,
            "/raft/status" => PeerRoute::Status,
            _ => return None,
        })
    }

    /// The one method the route answers; any other gets 405 naming it in `Allow`.
    fn method(self) -> &'static Method {
        static GET: Method = Method::GET;
        static POST: Method = Method::POST;
        match self {
            PeerRoute::Status => &GET,
            _ => &POST,
        }
    }
}

/// Reads the whole body (at most [`MAX_PEER_BODY`]) and answers with `f` of
/// the headers and body.
async fn with_body<F, Fut>(request: Request<Incoming>, f: F) -> Response<Full<Bytes>>
where
    F: FnOnce(HeaderMap, Bytes) -> Fut,
    Fut: Future<Output = Response<Full<Bytes>>>,
{
    let (parts, body) = request.into_parts();
    let too_large = || {
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("a peer request is at most {MAX_PEER_BODY} bytes"),
        )
    };
    // A declared length over the limit is refused before its bytes are read;
    // `Limited` still stops a body without one (chunked) at the limit.
    if body.size_hint().lower() > MAX_PEER_BODY as u64 {
        return too_large();
    }
    match Limited::new(body, MAX_PEER_BODY).collect().await {
        Ok(body) => f(parts.headers, body.to_bytes()).await,
        Err(error) if error.is::<http_body_util::LengthLimitError>() => too_large(),
        Err(error) => text(
            StatusCode::BAD_REQUEST,
            &format!("reading the request failed: {error}"),
        ),
    }
}

/// Parses the body as `T`, runs `f` on it and answers its result as JSON; a body
/// that does not parse is a 400 (a peer of another version, or not a peer).
async fn handle<T, R, F, Fut>(body: Bytes, f: F) -> Response<Full<Bytes>>
where
    T: DeserializeOwned + Send + 'static,
    R: Serialize,
    F: FnOnce(T) -> Fut,
    Fut: Future<Output = R>,
{
    match parse::<T>(body).await {
        Ok(request) => json(&f(request).await),
        Err(error) => text(
            StatusCode::BAD_REQUEST,
            &format!("bad peer request: {error}"),
        ),
    }
}

/// `body` parsed as JSON. A large one (a snapshot chunk, a catching-up
/// append: milliseconds of parsing) is parsed on the blocking pool, so the
/// runtime's worker, which the Raft core shares, stays free meanwhile.
async fn parse<T>(body: Bytes) -> Result<T, String>
where
    T: DeserializeOwned + Send + 'static,
{
    if body.len() < PARSE_ON_RUNTIME_BELOW {
        return serde_json::from_slice(&body).map_err(|error| error.to_string());
    }
    tokio::task::spawn_blocking(move || serde_json::from_slice(&body))
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| error.to_string())
}

/// `value` as a JSON answer.
fn json<T: Serialize>(value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut response = Response::new(Full::new(Bytes::from(body)));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(error) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the answer could not be encoded: {error}"),
        ),
    }
}

/// A plain-text answer with `status`.
fn text(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::copy_from_slice(message.as_bytes())));
    *response.status_mut() = status;
    response
}

async fn append(node: &Node, body: Bytes) -> Response<Full<Bytes>> {
    handle(body, |rpc: AppendEntriesRequest<TypeConfig>| async {
        let term = rpc.vote.leader_id().term;
        let received = Instant::now();
        wait_for_the_append_ahead(node, rpc.prev_log_id.map(|id| id.index)).await;
        let response = node.raft.append_entries(rpc).await;
        if matches!(&response, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
            warn_if_slow_to_answer(node, term, received.elapsed());
            heard_from_leader(node, term);
        }
        response
    })
    .await
}

/// Waits, for half a heartbeat interval at most (the leader gives an append
/// one: it must still be answered in time), until this node's log reaches `prev`,
/// the index an append starts after, when it is at most one append's worth
/// of entries ahead of the log.
///
/// A leader that keeps two appends in flight (`max_inflight_appends`) sends
/// the second on another connection, so it can arrive before the first, which
/// ends at `prev`. Handed to Raft first, it would be refused as a conflict and
/// the leader would send both again from the matching position: a round trip
/// lost. Handed in order, both are taken. A larger gap is a leader probing
/// for where this log ends, and is answered at once.
async fn wait_for_the_append_ahead(node: &Node, prev: Option<u64>) {
    let Some(prev) = prev else {
        return;
    };
    let missing = |metrics: &openraft::RaftMetrics<u64, baton_store::BatonNode>| {
        let next = metrics.last_log_index.map_or(0, |last| last + 1);
        prev.checked_sub(next).map(|behind| behind + 1)
    };
    let mut metrics = node.raft.metrics();
    let gap = missing(&metrics.borrow());
    if gap.is_none_or(|gap| gap > MAX_PAYLOAD_ENTRIES) {
        return;
    }
    let caught_up = metrics.wait_for(|metrics| missing(metrics).is_none());
    let in_order = matches!(
        tokio::time::timeout(node.config.heartbeat / 2, caught_up).await,
        Ok(Ok(_))
    );
    node.metrics.append_ahead(in_order);
    if !in_order {
        tracing::debug!(
            prev,
            "the append ahead of this one did not come: Raft answers it"
        );
    }
}

/// Records an accepted leader RPC, and warns when the leader had been silent
/// for longer than `NodeConfig::late_leader_contact` (a quarter of the
/// election timeout with the defaults): heartbeats were late (a busy leader or
/// follower, a slow network), the step before an election.
fn heard_from_leader(node: &Node, term: u64) {
    let gap = node.metrics.leader_contact.heard(term, Instant::now());
    let allowed = node.config.late_leader_contact();
    if let Some(gap) = gap.filter(|gap| *gap > allowed) {
        tracing::warn!(
            gap_ms = gap.as_millis() as u64,
            allowed_ms = allowed.as_millis() as u64,
            term,
            "no RPC from the leader for longer than heartbeats allow (by default a quarter of the election timeout)"
        );
    }
}

/// Warns when this follower took longer to answer an append than heartbeats
/// allow: the leader sends a follower its next RPC (heartbeats included) only
/// after the answer, so the follower's own disk or CPU made the gap that
/// `heard_from_leader` will report, not the leader or the network.
fn warn_if_slow_to_answer(node: &Node, term: u64, took: Duration) {
    let allowed = node.config.late_leader_contact();
    if took > allowed {
        tracing::warn!(
            answer_ms = took.as_millis() as u64,
            allowed_ms = allowed.as_millis() as u64,
            term,
            "this follower answered the leader's append later than heartbeats allow (by default a quarter of the election timeout): its own disk or CPU was slow"
        );
    }
}

async fn vote(node: &Node, body: Bytes) -> Response<Full<Bytes>> {
    handle(body, |rpc: VoteRequest<u64>| node.raft.vote(rpc)).await
}

async fn snapshot(node: &Node, body: Bytes) -> Response<Full<Bytes>> {
    handle(body, |rpc: InstallSnapshotRequest<TypeConfig>| async {
        let vote = rpc.vote;
        let response = node.raft.install_snapshot(rpc).await;
        // A chunk is refused with the follower's higher vote; accepted, the
        // answer carries the leader's own.
        if matches!(&response, Ok(r) if r.vote == vote) {
            heard_from_leader(node, vote.leader_id().term);
        }
        response
    })
    .await
}

async fn leader(node: &Node, headers: HeaderMap, body: Bytes) -> Response<Full<Bytes>> {
    let span = crate::trace_context::serving_leader_call(&headers);
    crate::trace_context::in_span(span, handle(body, |call: LeaderCall| node.answer(call))).await
}
