//! The peer network: openraft RPCs as JSON over HTTP to each peer's Raft listener,
//! on keep-alive connections ([`crate::peer_connection`]), authenticated by the
//! cluster secret.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_store::{BatonNode, TypeConfig};
use bytes::Bytes;
use hyper::header::HeaderValue;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::log_versions::{version_in, PeerLogVersions, LOG_VERSION_HEADER};
use crate::peer_connection::{ExchangeError, PeerConnection, PeerConnector, PeerEndpoint, PeerRpc};
use crate::tls::Tls;

/// Header carrying the cluster secret on peer requests.
pub const CLUSTER_SECRET_HEADER: &str = "baton-cluster-secret";

/// How long a peer client (and the pool of [`peer_http_client`]) keeps an
/// unused connection: well under the peer listener's idle close
/// ([`crate::peer_server::HEADER_TIMEOUT`]), so that an RPC is rarely sent on a
/// connection the peer is closing at that moment (the peer client would send it
/// again on a new one; a leader call would fail). Connections that carry
/// heartbeats never idle that long; the second stream's, used only when two
/// appends are in flight, does. The pooled client also posts a joining node's
/// request to a member's client API, which closes idle connections after 5 s
/// (about 4.5 s at the earliest): 3 s is under both.
pub(crate) const PEER_IDLE_TIMEOUT: Duration = Duration::from_secs(3);

const _: () =
    assert!(PEER_IDLE_TIMEOUT.as_millis() + 1000 <= crate::peer_server::HEADER_TIMEOUT.as_millis());

/// Creates one [`PeerClient`] per target and append in flight, each with its
/// own connection.
#[derive(Clone)]
pub struct HttpNetwork {
    connector: PeerConnector,
    secret: Secret,
    dial_overrides: Arc<BTreeMap<u64, String>>,
    late_after: Duration,
    versions: PeerLogVersions,
    idle_since: IdleClocks,
}

/// For each peer, from when the leader's next append to it counts as the
/// leader's own delay (see [`idle_from`]). Shared by all clients to a peer:
/// openraft makes one per append it may keep in flight, and a client that sat
/// unused while the other carried the appends would otherwise see a gap that
/// was never there.
type IdleClocks = Arc<Mutex<BTreeMap<u64, Instant>>>;

/// The cluster secret as the header value peer requests carry, or why it cannot
/// be one (each call then fails saying so).
type Secret = Option<Result<HeaderValue, String>>;

/// The HTTP client for the calls that are not openraft's RPCs (a follower's
/// leader calls, a joining node's request): keep-alive connections, no Nagle,
/// and a connect timeout well under the election timeout so an unreachable peer
/// is reported in time for the next heartbeat.
/// A client that cannot be built is an error, never a default client: that
/// would drop the connect timeout the elections rely on.
/// With `tls` and its peer CA, https URLs are verified against the peer CA and
/// the node certificate is presented (a single node without a peer CA calls no
/// peer).
pub fn peer_http_client(
    connect_timeout: Duration,
    tls: Option<&Arc<Tls>>,
) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        // Peers are called directly, never through a proxy from the
        // environment (`HTTPS_PROXY`...), as openraft's RPCs are.
        .no_proxy()
        // A peer never redirects. Followed, a redirect took the
        // `baton-cluster-secret` header (and, on a 307 or 308, the append) to
        // whatever address it named; refused, the leader logs the status.
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(PEER_IDLE_TIMEOUT)
        .pool_max_idle_per_host(64)
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true);
    if let Some(tls) = tls.filter(|tls| tls.files().peer_ca.is_some()) {
        let config = tls.peer_client_config().map_err(|e| e.to_string())?;
        builder = builder.use_preconfigured_tls(config);
    }
    builder.build().map_err(|error| error.to_string())
}

impl HttpNetwork {
    /// A network whose requests, on connections `connector` opens, carry
    /// `secret`, dialing `dial_overrides` instead of the membership's address
    /// where given.
    /// `late_after` is the longest a follower may go without an append (the
    /// gap its own peer server warns about): the leader warns too, and says
    /// on which side of the wire the time went. Each peer's answers record
    /// its log version in `versions`.
    pub fn new(
        connector: PeerConnector,
        secret: Option<String>,
        dial_overrides: BTreeMap<u64, String>,
        late_after: Duration,
        versions: PeerLogVersions,
    ) -> Self {
        let secret = secret.map(|secret| {
            HeaderValue::from_str(&secret)
                .map_err(|_| "the cluster secret is not a valid header value".to_owned())
        });
        HttpNetwork {
            connector,
            secret,
            dial_overrides: Arc::new(dial_overrides),
            late_after,
            versions,
            idle_since: IdleClocks::default(),
        }
    }
}

/// Sends RPCs to one peer, one at a time, on a connection of its own.
pub struct PeerClient {
    connector: PeerConnector,
    connection: PeerConnection,
    secret: Secret,
    target: u64,
    /// The peer's address, parsed once when openraft makes the client. An
    /// address that does not parse fails each call as the request would have.
    endpoint: Result<PeerEndpoint, String>,
    late_after: Duration,
    versions: PeerLogVersions,
    /// The log version this peer said last: the shared table is written only
    /// when it changes, not on every append.
    said: Option<u32>,
    /// When the previous append to this peer ended or was given up, by any
    /// client to it (see [`idle_from`]): the time from there to the next send
    /// is the leader's own delay. While another append is in flight it lies
    /// ahead, at that append's time limit.
    idle_since: IdleClocks,
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BatonNode) -> PeerClient {
        PeerClient {
            connector: self.connector.clone(),
            connection: PeerConnection::default(),
            secret: self.secret.clone(),
            target,
            endpoint: PeerEndpoint::parse(&crate::config::dial_url(
                &self.dial_overrides,
                target,
                &node.raft_addr,
            )),
            late_after: self.late_after,
            versions: self.versions.clone(),
            said: None,
            idle_since: self.idle_since.clone(),
        }
    }
}

impl PeerClient {
    /// From when the next append to this peer counts as the leader's delay.
    fn idle_since(&self) -> Option<Instant> {
        let clocks = self
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        clocks.get(&self.target).copied()
    }

    fn set_idle_since(&self, since: Option<Instant>) {
        let mut clocks = self
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match since {
            Some(since) => clocks.insert(self.target, since),
            None => clocks.remove(&self.target),
        };
    }

    async fn call<Req, Resp, E>(
        &mut self,
        rpc: PeerRpc,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<u64, BatonNode, RaftError<u64, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let target = self.target;
        let failed =
            |reason: &str| RPCError::Network(NetworkError::new(&peer_error(target, reason)));
        let endpoint = self.endpoint.as_ref().map_err(|reason| failed(reason))?;
        let secret = match &self.secret {
            None => None,
            Some(Ok(secret)) => Some(secret),
            Some(Err(reason)) => return Err(failed(reason)),
        };
        let body = serde_json::to_vec(request)
            .map(Bytes::from)
            .map_err(|error| failed(&error.to_string()))?;
        // openraft puts a time-out of the same length around every RPC it
        // sends; this one decides what the RPC says when that time runs out
        // (it is polled first, and a caller other than openraft gets it too),
        // and dropping the exchange closes its connection. Only a peer that cannot be connected to (a connect time-out
        // included) is `Unreachable`: openraft then leaves it alone for 500 ms
        // (its default back-off). A peer that was reached but answered later
        // than the time limit is a network error, retried at the next send:
        // openraft 0.9 gives an append one heartbeat interval (60 ms by
        // default), and a follower busy with a snapshot or a slow fsync can
        // take longer. Reported as unreachable, one slow answer cost a
        // follower half a second of silence (`make bench-snapshot-cluster`:
        // gaps of 487-578 ms, each right after such a time-out).
        let exchange = self
            .connection
            .exchange(&self.connector, endpoint, rpc, secret, body);
        let answer = match tokio::time::timeout(option.hard_ttl(), exchange).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(ExchangeError::Unreachable(reason))) => {
                let error = peer_error(target, &reason);
                return Err(RPCError::Unreachable(Unreachable::new(&error)));
            }
            Ok(Err(ExchangeError::Failed(reason))) => return Err(failed(&reason)),
            Err(_) => {
                let limit = option.hard_ttl().as_millis();
                let missing = if self.connection.was_connecting() {
                    "connection"
                } else {
                    "answer"
                };
                return Err(failed(&format!("no {missing} within {limit} ms")));
            }
        };
        // Every answer says which log version the peer runs, a refusal too:
        // an older build refuses an append it cannot parse, without the header.
        let version = version_in(
            answer
                .headers
                .get(LOG_VERSION_HEADER)
                .map(|value| value.as_bytes()),
        );
        if self.said != Some(version) {
            self.versions.heard(self.target, version);
            self.said = Some(version);
        }
        if !answer.status.is_success() {
            let text = String::from_utf8_lossy(&answer.body);
            let error = std::io::Error::other(format!(
                "peer {} answered {}: {text}",
                self.target, answer.status
            ));
            return Err(RPCError::Network(NetworkError::new(&error)));
        }
        let result: Result<Resp, RaftError<u64, E>> = serde_json::from_slice(&answer.body)
            .map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        result.map_err(|error| {
            RPCError::RemoteError(openraft::error::RemoteError::new(self.target, error))
        })
    }
}

/// A failed RPC's error, naming the peer.
fn peer_error(target: u64, reason: &str) -> std::io::Error {
    std::io::Error::other(format!("peer {target}: {reason}"))
}

/// From when the leader's next append to a peer counts as its own delay: the
/// end of this one, answered or not (after a refusal or a time-out openraft
/// sends the next at once, or a heartbeat at its next tick, 1.5 heartbeat
/// intervals at most: under the warning threshold), except when the peer was
/// unreachable, after which openraft waits on purpose (its 500 ms back-off is
/// not a late leader).
fn idle_from<T, E>(answer: &Result<T, RPCError<u64, BatonNode, E>>) -> Option<Instant>
where
    E: std::error::Error,
{
    match answer {
        Err(RPCError::Unreachable(_)) => None,
        _ => Some(Instant::now()),
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BatonNode, RaftError<u64>>> {
        let sent = Instant::now();
        if let Some(idle) = self
            .idle_since()
            .map(|at| sent.saturating_duration_since(at))
        {
            if idle > self.late_after {
                tracing::warn!(
                    peer = self.target,
                    idle_ms = idle.as_millis() as u64,
                    "the leader sent this peer nothing for longer than heartbeats allow: its own raft core or runtime was late"
                );
            }
        }
        // openraft wraps this call in a time-out of the same length and drops
        // it when that fires, perhaps before `call`'s own and the line below:
        // the leader's delay then counts from when the append was given up.
        // (No warning for an append that took long: openraft gives it one
        // heartbeat interval, under the warning threshold, and logs its
        // time-out itself, "error replication to target".)
        self.set_idle_since(Some(sent + option.hard_ttl()));
        let answer = self.call(PeerRpc::Append, &rpc, &option).await;
        self.set_idle_since(idle_from(&answer));
        answer
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BatonNode, RaftError<u64, InstallSnapshotError>>,
    > {
        // Appends resume after the snapshot: the wait is the install's, not a gap.
        self.set_idle_since(None);
        self.call(PeerRpc::Snapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BatonNode, RaftError<u64>>> {
        // A candidate: its appends as the next leader start a new clock.
        self.set_idle_since(None);
        self.call(PeerRpc::Vote, &rpc, &option).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::Vote;

    /// A network as the leader's, and a peer node at `raft_addr` for it.
    fn network_to(raft_addr: String) -> (HttpNetwork, BatonNode) {
        let connector = PeerConnector::new(Duration::from_millis(200), None).expect("connector");
        let network = HttpNetwork::new(
            connector,
            None,
            BTreeMap::new(),
            Duration::from_millis(125),
            PeerLogVersions::default(),
        );
        let node = BatonNode {
            api_addr: String::new(),
            raft_addr,
        };
        (network, node)
    }

    /// A client for the peer at `raft_addr` (append time limit 50 ms, as
    /// openraft gives it), and an empty append to send it.
    async fn peer_at(raft_addr: String) -> (PeerClient, AppendEntriesRequest<TypeConfig>) {
        let (mut network, node) = network_to(raft_addr);
        let peer = network.new_client(2, &node).await;
        let request = AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            leader_commit: None,
            entries: Vec::new(),
        };
        (peer, request)
    }

    const APPEND_LIMIT: Duration = Duration::from_millis(50);

    /// The pool of the client for leader calls and joins kept idle
    /// connections 90 s, past the peer listener's idle close (10 s): a call
    /// after a quiet spell could go out on a connection the peer was closing
    /// at that moment.
    #[tokio::test]
    async fn the_peer_pool_lets_go_of_idle_connections_before_a_peer_closes_them() {
        let server =
            baton_chaos::idle_server::IdleRecordingServer::start(Duration::from_millis(200))
                .await
                .expect("a local listener");
        let client = peer_http_client(Duration::from_secs(1), None).expect("client");
        let url = format!("{}/raft/append", server.base);
        let quiet = PEER_IDLE_TIMEOUT + Duration::from_secs(1);
        let longest = server
            .longest_idle_across(&client, &url, quiet)
            .await
            .expect("answered");
        assert!(
            longest < quiet,
            "an idle connection was kept for {longest:?}"
        );
    }

    /// A peer client keeps its connection between appends, and lets go of it
    /// once it has idled [`PEER_IDLE_TIMEOUT`]: never is an append sent
    /// on a connection the peer may be closing.
    #[tokio::test]
    async fn a_peer_client_keeps_its_connection_until_it_has_idled_the_limit() {
        let server = baton_chaos::idle_server::IdleRecordingServer::start(Duration::ZERO)
            .await
            .expect("a local listener");
        let (mut peer, request) = peer_at(server.base.clone()).await;
        let limit = RPCOption::new(Duration::from_secs(2));
        for _ in 0..3 {
            // The recording server answers `{}`, which is no append answer:
            // the exchange is what is looked at here.
            let _ = peer.append_entries(request.clone(), limit.clone()).await;
        }
        assert_eq!(server.requests(), 3);
        assert_eq!(
            server.connections(),
            1,
            "appends one after another share one"
        );
        let quiet = PEER_IDLE_TIMEOUT + Duration::from_millis(500);
        tokio::time::sleep(quiet).await;
        let _ = peer.append_entries(request, limit).await;
        assert_eq!(server.requests(), 4);
        assert_eq!(server.connections(), 2, "an idle connection was kept");
        assert!(server.longest_idle() < PEER_IDLE_TIMEOUT);
    }

    /// What [`closing_peer`] saw: connections accepted, requests begun.
    #[derive(Default)]
    struct Seen {
        connections: std::sync::atomic::AtomicUsize,
        requests: std::sync::atomic::AtomicUsize,
    }

    /// A peer that answers the first request on each connection and closes it
    /// when a second one comes, as a listener closing an idle connection just
    /// as the leader sends on it does; or, not `answering`, closes each
    /// connection when its first request comes.
    async fn closing_peer(answering: bool) -> (String, Arc<Seen>) {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Seen::default());
        let counting = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.expect("accept");
                counting.connections.fetch_add(1, Ordering::SeqCst);
                let counting = counting.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0; 4096];
                    // The empty appends of these tests are small enough to
                    // come in one piece with their head.
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    counting.requests.fetch_add(1, Ordering::SeqCst);
                    if !answering {
                        return;
                    }
                    let body = br#"{"Ok":"Success"}"#;
                    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(body).await;
                    // The next request: closed without an answer.
                    if matches!(socket.read(&mut buffer).await, Ok(n) if n > 0) {
                        counting.requests.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        (format!("http://{addr}"), seen)
    }

    /// An append that meets a kept connection closing under it goes out once
    /// more on a new connection, instead of failing and waiting for
    /// openraft's next send.
    #[tokio::test]
    async fn an_append_on_a_connection_the_peer_closed_is_sent_again() {
        use std::sync::atomic::Ordering;
        let (addr, seen) = closing_peer(true).await;
        let (mut peer, request) = peer_at(addr).await;
        let limit = RPCOption::new(Duration::from_secs(2));
        for sent in 1..=3 {
            let answer = peer.append_entries(request.clone(), limit.clone()).await;
            assert!(
                matches!(answer, Ok(AppendEntriesResponse::Success)),
                "append {sent}: {answer:?}"
            );
        }
        // The first append opened a connection; the second and third each
        // went out on the kept one, which closed, then on a new one.
        assert_eq!(seen.connections.load(Ordering::SeqCst), 3);
        assert_eq!(seen.requests.load(Ordering::SeqCst), 5);
    }

    /// A request that fails on a new connection is not sent again: the peer is
    /// not answering, and openraft decides when to try next.
    #[tokio::test]
    async fn an_append_that_fails_on_a_new_connection_is_not_sent_again() {
        use std::sync::atomic::Ordering;
        let (addr, seen) = closing_peer(false).await;
        let (mut peer, request) = peer_at(addr).await;
        let error = peer
            .append_entries(request, RPCOption::new(Duration::from_secs(2)))
            .await
            .expect_err("closed without an answer");
        assert!(matches!(error, RPCError::Network(_)), "{error:?}");
        assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
        assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
    }

    /// The error of an append to `raft_addr`, and the client that sent it.
    async fn append_to(
        raft_addr: String,
    ) -> (RPCError<u64, BatonNode, RaftError<u64>>, PeerClient) {
        let (mut peer, request) = peer_at(raft_addr).await;
        let error = peer
            .append_entries(request, RPCOption::new(APPEND_LIMIT))
            .await
            .expect_err("no answer");
        (error, peer)
    }

    /// A peer that accepts connections and never answers; abort the task to
    /// close them.
    async fn silent_peer() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let (socket, _) = listener.accept().await.expect("accept");
                held.push(socket);
            }
        });
        (format!("http://{addr}"), silent)
    }

    /// A peer that takes the append but answers after its time limit is slow,
    /// not unreachable: openraft would back off from it for 500 ms.
    #[tokio::test]
    async fn a_peer_that_answers_late_is_not_unreachable() {
        let (addr, silent) = silent_peer().await;
        let (error, peer) = append_to(addr).await;
        assert!(matches!(error, RPCError::Network(_)), "{error:?}");
        // openraft sends the next append at once: a delay before it is the
        // leader's, and the leader's idle warning must see it.
        assert!(peer.idle_since().is_some());
        silent.abort();
    }

    /// openraft drops an append when its own time-out (of the same length as
    /// the client's) fires first: the idle clock starts all the same, from the
    /// time limit, not from the append before (which made a slow peer look
    /// like a late leader).
    #[tokio::test]
    async fn an_append_openraft_gives_up_on_starts_the_idle_clock() {
        let (addr, silent) = silent_peer().await;
        let (mut peer, request) = peer_at(addr).await;
        let sent = Instant::now();
        let dropped = tokio::time::timeout(
            APPEND_LIMIT / 2,
            peer.append_entries(request, RPCOption::new(APPEND_LIMIT)),
        )
        .await;
        assert!(dropped.is_err(), "the silent peer answered: {dropped:?}");
        let idle_since = peer.idle_since().expect("the idle clock runs");
        assert!(idle_since >= sent + APPEND_LIMIT);
        silent.abort();
    }

    /// With two appends in flight, openraft makes two clients to a peer: an
    /// append on one starts the idle clock the other sees (or the other,
    /// unused for a while, would warn of a leader gap that was not there),
    /// and a vote request, sent by a candidate, stops it for both.
    #[tokio::test]
    async fn clients_to_one_peer_share_the_idle_clock() {
        let (addr, silent) = silent_peer().await;
        let (mut network, node) = network_to(addr);
        let mut first = network.new_client(2, &node).await;
        let mut second = network.new_client(2, &node).await;
        let other_peer = network.new_client(3, &node).await;
        let (_, request) = peer_at(String::new()).await;
        assert!(second.idle_since().is_none());

        let error = first
            .append_entries(request, RPCOption::new(APPEND_LIMIT))
            .await
            .expect_err("no answer");
        assert!(matches!(error, RPCError::Network(_)), "{error:?}");
        assert!(first.idle_since().is_some());
        assert_eq!(first.idle_since(), second.idle_since());
        assert!(other_peer.idle_since().is_none(), "one clock per peer");
        other_peer.set_idle_since(Some(Instant::now()));
        assert_ne!(first.idle_since(), other_peer.idle_since());

        let vote = VoteRequest::new(Vote::new(2, 1), None);
        let _refused = second.vote(vote, RPCOption::new(APPEND_LIMIT)).await;
        assert!(first.idle_since().is_none());
        silent.abort();
    }

    /// A peer address that answers every request with `status` and a
    /// `location` pointing at `to`, as a misconfigured address (an ingress,
    /// an http-to-https redirector) would.
    async fn redirecting_peer(status: &'static str, to: String) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.expect("accept");
                let answer =
                    format!("HTTP/1.1 {status}\r\nlocation: {to}\r\ncontent-length: 0\r\n\r\n");
                tokio::spawn(async move {
                    let mut buffer = vec![0; 64 * 1024];
                    let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut buffer).await;
                    let _ =
                        tokio::io::AsyncWriteExt::write_all(&mut socket, answer.as_bytes()).await;
                });
            }
        });
        format!("http://{addr}")
    }

    /// A peer never redirects: an answer that does is an error naming its
    /// status, and the leader does not follow it. reqwest's default policy
    /// followed it and sent the `baton-cluster-secret` header along (it only
    /// drops `authorization` and cookies on a change of host), and on a 307
    /// or 308 the append too, to whatever the `location` named. Here it names
    /// a peer that never answers: a followed redirect ends in a time-out.
    #[tokio::test]
    async fn a_redirect_from_a_peer_is_an_error_and_not_followed() {
        let (elsewhere, silent) = silent_peer().await;
        for status in ["307 Temporary Redirect", "301 Moved Permanently"] {
            let addr = redirecting_peer(status, format!("{elsewhere}/raft/append")).await;
            let (mut network, node) = network_to(addr);
            network.secret = Some(Ok(HeaderValue::from_static("the-cluster-secret")));
            let mut peer = network.new_client(2, &node).await;
            let (_, request) = peer_at(String::new()).await;
            let error = peer
                .append_entries(request, RPCOption::new(Duration::from_secs(2)))
                .await
                .expect_err("a redirect is no answer");
            let answered = format!("peer 2 answered {status}");
            assert!(
                matches!(&error, RPCError::Network(e) if e.to_string().contains(&answered)),
                "{status}: {error:?}"
            );
        }
        silent.abort();
    }

    /// An address that does not parse (parsed once, when openraft makes the
    /// client) fails each call as a network error that names the peer and the
    /// address, as the request itself failed before.
    #[tokio::test]
    async fn a_peer_address_that_does_not_parse_fails_each_call() {
        for _ in 0..2 {
            let (error, _) = append_to("no scheme here".to_owned()).await;
            assert!(
                matches!(&error, RPCError::Network(e)
                    if e.to_string().contains("peer 2: no scheme here: ")),
                "{error:?}"
            );
        }
    }

    /// A peer nobody listens for is unreachable (openraft backs off).
    #[tokio::test]
    async fn a_peer_that_refuses_the_connection_is_unreachable() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port");
        let (error, peer) = append_to(format!("http://{addr}")).await;
        assert!(matches!(error, RPCError::Unreachable(_)), "{error:?}");
        // openraft's back-off follows: not a delay to warn about.
        assert!(peer.idle_since().is_none());
    }
}
