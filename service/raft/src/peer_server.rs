//! The peer listener: openraft's RPCs, leader calls from followers and the
//! status bootstrap asks for. Served on its own address, never on the client
//! API, and only to callers presenting the cluster secret when one is set.

use std::sync::Arc;
use std::time::Instant;

use actix_web::dev::Service;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use baton_store::TypeConfig;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use subtle::ConstantTimeEq;

use crate::leader_call::LeaderCall;
use crate::log_versions::LOG_VERSION_HEADER;
use crate::network::CLUSTER_SECRET_HEADER;
use crate::node::Node;

/// Largest peer request body: a catching-up append of 64 full batches, or a
/// 1 MiB snapshot chunk, as JSON, with room to spare.
const MAX_PEER_BODY: usize = 128 << 20;

/// Whether `request` carries one of the `accepted` secrets (see
/// [`crate::NodeConfig::accepted_secrets`]), each compared in constant time and
/// all of them compared. Always true when `accepted` is empty (no secret set).
pub fn secret_matches(request: &HttpRequest, accepted: &[String]) -> bool {
    if accepted.is_empty() {
        return true;
    }
    let presented = request
        .headers()
        .get(CLUSTER_SECRET_HEADER)
        .map(|value| value.as_bytes())
        .unwrap_or_default();
    accepted.iter().fold(false, |matched, secret| {
        matched | bool::from(presented.ct_eq(secret.as_bytes()))
    })
}

/// Registers the peer routes for `node`.
pub fn peer_routes(node: Arc<Node>) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        let accepted = node.config.accepted_secrets();
        let log_version = actix_web::http::header::HeaderValue::from(node.config.log_version);
        cfg.app_data(web::Data::from(node))
            .app_data(web::PayloadConfig::new(MAX_PEER_BODY))
            .service(
                web::scope("/raft")
                    .wrap_fn(move |request, service| {
                        let allowed = secret_matches(request.request(), &accepted);
                        let call = allowed.then(|| service.call(request));
                        let log_version = log_version.clone();
                        async move {
                            match call {
                                Some(call) => call.await.map(|mut response| {
                                    response.headers_mut().insert(
                                        actix_web::http::header::HeaderName::from_static(
                                            LOG_VERSION_HEADER,
                                        ),
                                        log_version,
                                    );
                                    response
                                }),
                                None => Err(actix_web::error::ErrorUnauthorized(
                                    "missing or wrong cluster secret",
                                )),
                            }
                        }
                    })
                    .route("/append", web::post().to(append))
                    .route("/vote", web::post().to(vote))
                    .route("/snapshot", web::post().to(snapshot))
                    .route("/leader", web::post().to(leader))
                    .route("/status", web::get().to(status)),
            )
            .default_service(web::to(|| async { HttpResponse::NotFound().finish() }));
    }
}

/// Parses the body as `T`, runs `f` on it and answers its result as JSON; a body
/// that does not parse is a 400 (a peer of another version, or not a peer).
async fn handle<T, R, F, Fut>(body: &[u8], f: F) -> HttpResponse
where
    T: DeserializeOwned,
    R: Serialize,
    F: FnOnce(T) -> Fut,
    Fut: std::future::Future<Output = R>,
{
    match serde_json::from_slice::<T>(body) {
        Ok(request) => HttpResponse::Ok().json(f(request).await),
        Err(error) => {
            HttpResponse::build(StatusCode::BAD_REQUEST).body(format!("bad peer request: {error}"))
        }
    }
}

async fn append(node: web::Data<Node>, body: web::Bytes) -> HttpResponse {
    handle(&body, |rpc: AppendEntriesRequest<TypeConfig>| async {
        let term = rpc.vote.leader_id().term;
        let received = Instant::now();
        let response = node.raft.append_entries(rpc).await;
        if matches!(&response, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
            warn_if_slow_to_answer(&node, term, received.elapsed());
            heard_from_leader(&node, term);
        }
        response
    })
    .await
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
fn warn_if_slow_to_answer(node: &Node, term: u64, took: std::time::Duration) {
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

async fn vote(node: web::Data<Node>, body: web::Bytes) -> HttpResponse {
    handle(&body, |rpc: VoteRequest<u64>| node.raft.vote(rpc)).await
}

async fn snapshot(node: web::Data<Node>, body: web::Bytes) -> HttpResponse {
    handle(&body, |rpc: InstallSnapshotRequest<TypeConfig>| async {
        let vote = rpc.vote;
        let response = node.raft.install_snapshot(rpc).await;
        // A chunk is refused with the follower's higher vote; accepted, the
        // answer carries the leader's own.
        if matches!(&response, Ok(r) if r.vote == vote) {
            heard_from_leader(&node, vote.leader_id().term);
        }
        response
    })
    .await
}

async fn leader(node: web::Data<Node>, http: HttpRequest, body: web::Bytes) -> HttpResponse {
    let span = crate::trace_context::serving_leader_call(http.headers());
    crate::trace_context::in_span(span, handle(&body, |call: LeaderCall| node.answer(call))).await
}

async fn status(node: web::Data<Node>) -> HttpResponse {
    HttpResponse::Ok().json(node.peer_status())
}
