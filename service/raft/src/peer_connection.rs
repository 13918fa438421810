//! The leader's connections to its peers' listeners: one HTTP/1.1 connection per
//! peer client, driven by hyper directly.
//!
//! openraft makes one client per append it keeps in flight to a peer and uses
//! each for one RPC at a time, so a client needs one connection, not a pool.
//! Before this, the RPCs went through reqwest, whose per-request work (a shared
//! pool's checkout and return, header maps, URL handling, a time-out of its own
//! on top of openraft's) was a share of the leader's CPU per replicated entry
//! (ARCHITECTURE.md, "The cluster"; BENCHMARKS.md, "The peer client on hyper").

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;
use tokio_rustls::TlsConnector;

use crate::network::{CLUSTER_SECRET_HEADER, PEER_IDLE_TIMEOUT};
use crate::tls::Tls;

/// Largest answer read from a peer: its answers are a few hundred bytes; this
/// only bounds what a misbehaving listener can make the leader buffer.
const MAX_PEER_ANSWER: usize = 16 << 20;

/// Opens connections to peers: plain TCP, or TLS verified against the peer CA
/// with this node's certificate presented. Shared by every peer client.
#[derive(Clone)]
pub struct PeerConnector {
    connect_timeout: Duration,
    tls: Option<TlsConnector>,
}

impl PeerConnector {
    /// A connector that gives up on a connection (with its TLS handshake) after
    /// `connect_timeout`; with `tls` and its peer CA, https peers are called
    /// over TLS. Fails when the TLS client configuration cannot be built.
    pub fn new(connect_timeout: Duration, tls: Option<&Arc<Tls>>) -> Result<Self, String> {
        let tls = match tls.filter(|tls| tls.files().peer_ca.is_some()) {
            Some(tls) => {
                let config = tls.peer_client_config().map_err(|e| e.to_string())?;
                Some(TlsConnector::from(Arc::new(config)))
            }
            None => None,
        };
        Ok(PeerConnector {
            connect_timeout,
            tls,
        })
    }

    /// A new connection to `endpoint`, its driving task spawned. Every failure
    /// here is the peer's being unreachable.
    async fn connect(&self, endpoint: &PeerEndpoint) -> Result<Connection, String> {
        let tls = match (&endpoint.server_name, &self.tls) {
            (None, _) => None,
            (Some(name), Some(tls)) => Some((name, tls)),
            (Some(_), None) => {
                return Err("calling peers over https needs --tls-peer-ca".to_owned());
            }
        };
        let connecting = async {
            // One address after another (reqwest raced IPv6 against IPv4): a
            // peer's address is normally one.
            let stream = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
                .await
                .map_err(|error| format!("connecting: {error}"))?;
            // Appends and their answers are each awaited: never hold one back.
            let _ = stream.set_nodelay(true);
            match tls {
                None => handshake(stream).await,
                Some((name, tls)) => {
                    let stream = tls
                        .connect(name.clone(), stream)
                        .await
                        .map_err(|error| format!("TLS handshake: {error}"))?;
                    handshake(stream).await
                }
            }
        };
        tokio::time::timeout(self.connect_timeout, connecting)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no connection within {} ms",
                    self.connect_timeout.as_millis()
                ))
            })
    }
}

/// Starts HTTP/1.1 on `io` and spawns the task that drives it.
async fn handshake<I>(io: I) -> Result<Connection, String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|error| format!("HTTP handshake: {error}"))?;
    let task = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "peer connection ended with an error");
        }
    });
    Ok(Connection {
        sender,
        task: task.abort_handle(),
    })
}

/// An open connection: what sends on it, and the task that drives it.
/// Dropped, it ends that task and so closes the socket at once. hyper would
/// close it too once the sender is gone, but only after writing what it has
/// buffered, which a peer that stopped reading (a stopped process, during a
/// snapshot chunk) never takes.
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    task: AbortHandle,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The RPCs a peer listener serves to the leader.
#[derive(Clone, Copy, Debug)]
pub enum PeerRpc {
    Append,
    Vote,
    Snapshot,
}

/// Where a peer listens, parsed once from its address (`http://host:port` or
/// `https://host:port`, perhaps with a path its routes are under).
pub struct PeerEndpoint {
    host: String,
    port: u16,
    /// The path of each RPC: under the address's own path, as the leader calls
    /// of the peer's listener are.
    append: hyper::Uri,
    vote: hyper::Uri,
    snapshot: hyper::Uri,
    /// The `host` header every request carries.
    authority: HeaderValue,
    /// For https: the name its certificate is checked against.
    server_name: Option<ServerName<'static>>,
}

impl PeerEndpoint {
    /// The endpoint `base` names, or why it names none.
    pub fn parse(base: &str) -> Result<PeerEndpoint, String> {
        let url = reqwest::Url::parse(base).map_err(|error| format!("{base}: {error}"))?;
        let https = match url.scheme() {
            "http" => false,
            "https" => true,
            other => {
                return Err(format!(
                    "{base}: a peer is called over http or https, not {other}"
                ))
            }
        };
        let host = url
            .host_str()
            .ok_or_else(|| format!("{base}: no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = url
            .port_or_known_default()
            .ok_or_else(|| format!("{base}: no port"))?;
        let authority = url
            .host_str()
            .map(|shown| match url.port() {
                Some(port) => format!("{shown}:{port}"),
                None => shown.to_owned(),
            })
            .and_then(|authority| HeaderValue::from_str(&authority).ok())
            .ok_or_else(|| format!("{base}: the host is not a header value"))?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!("{base}: a peer address has no query or fragment"));
        }
        let under = url.path().trim_end_matches('/');
        let path = |rpc: &str| {
            hyper::Uri::try_from(format!("{under}/raft/{rpc}"))
                .map_err(|error| format!("{base}: {error}"))
        };
        let server_name = if https {
            Some(ServerName::try_from(host.clone()).map_err(|error| format!("{base}: {error}"))?)
        } else {
            None
        };
        Ok(PeerEndpoint {
            host,
            port,
            append: path("append")?,
            vote: path("vote")?,
            snapshot: path("snapshot")?,
            authority,
            server_name,
        })
    }
}

impl PeerEndpoint {
    /// The path `rpc` is posted to.
    fn path(&self, rpc: PeerRpc) -> &hyper::Uri {
        match rpc {
            PeerRpc::Append => &self.append,
            PeerRpc::Vote => &self.vote,
            PeerRpc::Snapshot => &self.snapshot,
        }
    }
}

/// A peer's answer: its status, headers and whole body.
pub struct PeerAnswer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Why an exchange with a peer failed.
#[derive(Debug)]
pub enum ExchangeError {
    /// No connection could be made: openraft backs off from such a peer.
    Unreachable(String),
    /// Connected, but the request or its answer failed.
    Failed(String),
}

/// One peer client's connection, kept between its RPCs while the peer keeps
/// it open and it has not idled longer than [`PEER_IDLE_TIMEOUT`].
#[derive(Default)]
pub struct PeerConnection {
    kept: Option<Kept>,
    /// Whether the exchange under way is still connecting (what its caller's
    /// time-out says when it fires).
    connecting: bool,
}

struct Kept {
    connection: Connection,
    idle_since: Instant,
}

impl PeerConnection {
    /// POSTs `body` (JSON) as `rpc` to `endpoint` with `secret`, on the kept
    /// connection or a new one, and reads the whole answer. A request that
    /// failed on a kept connection because it closed (the peer let it go
    /// meanwhile: the write failed, or the answer never came or came cut) is
    /// sent once more on a new connection. The peer may have taken the first
    /// one; every peer RPC may be repeated (an append of the same entries, a
    /// vote asked again, a snapshot chunk written again at its offset). The
    /// connection is kept only after a whole answer; an exchange dropped half
    /// way (openraft's time-out) closes it, so the next RPC never waits behind
    /// an answer that may never come.
    pub async fn exchange(
        &mut self,
        connector: &PeerConnector,
        endpoint: &PeerEndpoint,
        rpc: PeerRpc,
        secret: Option<&HeaderValue>,
        body: Bytes,
    ) -> Result<PeerAnswer, ExchangeError> {
        self.connecting = false;
        let kept = self
            .kept
            .take()
            .filter(|kept| kept.idle_since.elapsed() < PEER_IDLE_TIMEOUT)
            .filter(|kept| !kept.connection.sender.is_closed());
        let (mut connection, mut reused) = match kept {
            Some(kept) => (kept.connection, true),
            None => (self.connect(connector, endpoint).await?, false),
        };
        loop {
            let request = request(endpoint, rpc, secret, body.clone());
            let sender = &mut connection.sender;
            let sent = match sender.ready().await {
                Ok(()) => sender.send_request(request).await,
                Err(error) => Err(error),
            };
            let response = match sent {
                Ok(response) => response,
                Err(error) if reused && closed_under_the_request(&error) => {
                    reused = false;
                    connection = self.connect(connector, endpoint).await?;
                    continue;
                }
                Err(error) => return Err(ExchangeError::Failed(error.to_string())),
            };
            let (parts, incoming) = response.into_parts();
            let body = Limited::new(incoming, MAX_PEER_ANSWER)
                .collect()
                .await
                .map_err(|error| ExchangeError::Failed(format!("reading the answer: {error}")))?
                .to_bytes();
            self.kept = Some(Kept {
                connection,
                idle_since: Instant::now(),
            });
            return Ok(PeerAnswer {
                status: parts.status,
                headers: parts.headers,
                body,
            });
        }
    }

    /// Whether the exchange under way (if one is) was still connecting.
    pub fn was_connecting(&self) -> bool {
        self.connecting
    }

    async fn connect(
        &mut self,
        connector: &PeerConnector,
        endpoint: &PeerEndpoint,
    ) -> Result<Connection, ExchangeError> {
        self.connecting = true;
        let connected = connector.connect(endpoint).await;
        self.connecting = false;
        connected.map_err(ExchangeError::Unreachable)
    }
}

/// Whether `error` says the connection closed under the request: the race of a
/// request with the peer's closing an idle connection.
fn closed_under_the_request(error: &hyper::Error) -> bool {
    let reset = std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionAborted
            )
        });
    reset || error.is_canceled() || error.is_closed() || error.is_incomplete_message()
}

fn request(
    endpoint: &PeerEndpoint,
    rpc: PeerRpc,
    secret: Option<&HeaderValue>,
    body: Bytes,
) -> Request<Full<Bytes>> {
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = endpoint.path(rpc).clone();
    let headers = request.headers_mut();
    headers.insert(HOST, endpoint.authority.clone());
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(secret) = secret {
        headers.insert(CLUSTER_SECRET_HEADER, secret.clone());
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(base: &str) -> Vec<String> {
        let endpoint = PeerEndpoint::parse(base).expect("an address");
        [PeerRpc::Append, PeerRpc::Vote, PeerRpc::Snapshot]
            .into_iter()
            .map(|rpc| endpoint.path(rpc).to_string())
            .collect()
    }

    /// Routes under a path stay under it, as they did when the RPCs' URLs
    /// were the address with `/raft/...` appended (and as leader calls are).
    #[test]
    fn an_address_with_a_path_keeps_it_in_front_of_the_routes() {
        assert_eq!(
            paths("http://10.0.0.2:7879"),
            ["/raft/append", "/raft/vote", "/raft/snapshot"]
        );
        assert_eq!(
            paths("https://lb.example/baton-2/"),
            [
                "/baton-2/raft/append",
                "/baton-2/raft/vote",
                "/baton-2/raft/snapshot"
            ]
        );
    }

    #[test]
    fn the_host_header_and_the_connection_come_from_the_address() {
        let v6 = PeerEndpoint::parse("https://[::1]:7879").expect("an address");
        assert_eq!(v6.host, "::1");
        assert_eq!(v6.port, 7879);
        assert_eq!(v6.authority, "[::1]:7879");
        assert!(v6.server_name.is_some());
        let named = PeerEndpoint::parse("https://node-2.baton").expect("an address");
        assert_eq!((named.host.as_str(), named.port), ("node-2.baton", 443));
        assert_eq!(named.authority, "node-2.baton");
        let plain = PeerEndpoint::parse("http://node-2:80").expect("an address");
        assert_eq!(
            (plain.port, plain.authority.to_str().ok()),
            (80, Some("node-2"))
        );
        assert!(plain.server_name.is_none());
    }

    #[test]
    fn addresses_a_peer_cannot_have_are_refused() {
        for (base, says) in [
            ("ftp://node-2:21", "not ftp"),
            ("http://node-2:7879/?x=1", "no query or fragment"),
            ("node-2:7879", "node-2:7879"),
        ] {
            let refused = PeerEndpoint::parse(base).err().unwrap_or_default();
            assert!(refused.contains(says), "{base}: {refused}");
        }
    }

    /// https without the peer CA fails before any connection is made.
    #[tokio::test]
    async fn https_without_a_peer_ca_is_refused_before_connecting() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let connector = PeerConnector::new(Duration::from_secs(1), None).expect("connector");
        let endpoint = PeerEndpoint::parse(&format!("https://{addr}")).expect("an address");
        let refused = connector.connect(&endpoint).await.err().unwrap_or_default();
        assert!(refused.contains("--tls-peer-ca"), "{refused}");
        let accepted = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
        assert!(accepted.is_err(), "a connection was made");
    }
}
