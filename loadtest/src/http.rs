//! The HTTP/1.1 client of the timed operations: hyper's connections, kept in a
//! small pool of this tool's own.
//!
//! The load tool shares the machine's two cores with the server it measures, so
//! whatever CPU it spends on a request is taken from the server. Through reqwest a
//! 64-client lock cycle cost the tool 39-50 µs of CPU per cycle, half of it in
//! its own code: a URL parsed (with IDNA) from a formatted string per request,
//! reqwest's redirect, retry and time-out layers, a shared pool's checkout keyed by
//! a cloned URI (BENCHMARKS.md, "A lighter load tool"). Here the base address is
//! parsed once, a request is a path and a body, and a connection is taken from and
//! given back to a plain list. Baton's leader calls its peers over hyper too
//! (`service/raft/src/peer_connection.rs`), with one difference that must stay:
//! its RPCs are safe to repeat, so it sends a written request again on a new
//! connection, while this client never does (a lock write may have been carried
//! out). Streams and scrapes (watch, metrics) and `overload`'s requests still go
//! through reqwest: they are not what the scenarios time per request.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_chaos::client::POOL_IDLE_TIMEOUT;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::AbortHandle;

use crate::error::OpError;

/// Largest answer read: the servers' answers are a few hundred bytes; this only
/// bounds what a misbehaving one can make the tool buffer.
const MAX_ANSWER: usize = 16 << 20;

/// An answer: its status and its whole body.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: StatusCode,
    /// The body, read to its end.
    pub body: Bytes,
}

/// A client of one server (`http://host:port`, perhaps with a path prefix),
/// cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("base", &self.inner.base)
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// The base address as given, without a trailing `/`.
    base: String,
    /// The host to connect to; an IPv6 literal without its brackets.
    host: String,
    port: u16,
    /// The `host` header of every request.
    authority: HeaderValue,
    /// The base address's own path, put before every request's path.
    prefix: String,
    /// Idle connections, the most recently used last.
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    /// How long a connection may sit idle and still be used.
    idle_timeout: Duration,
    connect_timeout: Duration,
    request_timeout: Duration,
}

struct Idle {
    connection: Connection,
    since: Instant,
}

/// An open connection: what sends on it, and the task that drives it. Dropped,
/// it ends that task and so closes the socket at once (a timed-out request's
/// connection is not reused).
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    task: AbortHandle,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpClient {
    /// A client of `base` that keeps up to `max_idle` idle connections, gives up
    /// on a connection after `connect_timeout` and on a whole request (answer
    /// read) after `request_timeout`. Fails when `base` is not an `http://` URL
    /// without credentials, query or fragment.
    pub fn new(
        base: &str,
        max_idle: usize,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> anyhow::Result<Self> {
        Self::with_idle_timeout(
            base,
            max_idle,
            POOL_IDLE_TIMEOUT,
            connect_timeout,
            request_timeout,
        )
    }

    fn with_idle_timeout(
        base: &str,
        max_idle: usize,
        idle_timeout: Duration,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> anyhow::Result<Self> {
        let url = reqwest::Url::parse(base)?;
        anyhow::ensure!(
            url.scheme() == "http",
            "{base}: the load tool calls servers over http"
        );
        anyhow::ensure!(
            url.query().is_none() && url.fragment().is_none(),
            "{base}: a base address has no query or fragment"
        );
        // reqwest sent these as basic authentication; neither server asks for it.
        anyhow::ensure!(
            url.username().is_empty() && url.password().is_none(),
            "{base}: the load tool sends no credentials"
        );
        let host_in_url = url
            .host_str()
            .ok_or_else(|| anyhow::anyhow!("{base}: no host"))?;
        let port = url
            .port_or_known_default()
            .ok_or_else(|| anyhow::anyhow!("{base}: no port"))?;
        let authority = HeaderValue::from_str(&match url.port() {
            Some(port) => format!("{host_in_url}:{port}"),
            None => host_in_url.to_owned(),
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                base: base.trim_end_matches('/').to_owned(),
                host: host_in_url
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
                port,
                authority,
                prefix: url.path().trim_end_matches('/').to_owned(),
                idle: Mutex::new(Vec::new()),
                max_idle,
                idle_timeout,
                connect_timeout,
                request_timeout,
            }),
        })
    }

    /// The base address (`http://127.0.0.1:7878`), without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.inner.base
    }

    /// Sends `method path` with `body` (JSON) and reads the whole answer. `path`
    /// is sent as it is (not percent-encoded: the scenarios' names are plain
    /// ASCII); one that is not a valid URI path fails before anything is sent.
    ///
    /// A request that a reused connection could not take (closed while it was
    /// idle, and hyper hands the request back unsent) goes out again on a new
    /// connection. A request that was written is never sent again, as with
    /// reqwest: the server may have carried it out. A connection is not reused
    /// after [`POOL_IDLE_TIMEOUT`], well before Baton closes it, so that a
    /// request is not written as the server closes its connection.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, OpError> {
        let request = self.request(method, path, body)?;
        let timeout = self.inner.request_timeout;
        tokio::time::timeout(timeout, self.exchange(request))
            .await
            .unwrap_or_else(|_| {
                Err(OpError::Timeout(format!(
                    "{path}: no answer within {} ms",
                    timeout.as_millis()
                )))
            })
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Request<Full<Bytes>>, OpError> {
        let uri = Uri::try_from(format!("{}{path}", self.inner.prefix))
            .map_err(|error| OpError::Transport(format!("{path}: {error}")))?;
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(HOST, self.inner.authority.clone());
        let body = match body {
            Some(body) => {
                request =
                    request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                Full::new(Bytes::from(body))
            }
            None => Full::new(Bytes::new()),
        };
        request
            .body(body)
            .map_err(|error| OpError::Transport(format!("{path}: {error}")))
    }

    async fn exchange(&self, mut request: Request<Full<Bytes>>) -> Result<Answer, OpError> {
        loop {
            let (mut connection, reused) = match self.checkout() {
                Some(connection) => (connection, true),
                None => (self.connect().await?, false),
            };
            if let Err(error) = connection.sender.ready().await {
                if reused {
                    continue;
                }
                return Err(OpError::Transport(format!("connection: {error}")));
            }
            match connection.sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let body = Limited::new(body, MAX_ANSWER)
                        .collect()
                        .await
                        .map_err(|error| {
                            OpError::Transport(format!("reading the answer: {error}"))
                        })?
                        .to_bytes();
                    self.checkin(connection);
                    return Ok(Answer {
                        status: parts.status,
                        body,
                    });
                }
                Err(mut error) => match error.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => {
                        return Err(OpError::Transport(format!(
                            "sending the request: {}",
                            error.error()
                        )))
                    }
                },
            }
        }
    }

    /// The most recently used idle connection that is still open and was idle for
    /// less than [`POOL_IDLE_TIMEOUT`] (Baton closes idle connections a little
    /// later; a request sent as it closes one would read its 408 as the answer).
    /// Connections idle longer are closed here.
    fn checkout(&self) -> Option<Connection> {
        let mut idle = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(entry) = idle.pop() {
            if entry.since.elapsed() >= self.inner.idle_timeout {
                // Every one below was idle longer still.
                idle.clear();
                return None;
            }
            if !entry.connection.sender.is_closed() {
                return Some(entry.connection);
            }
        }
        None
    }

    fn checkin(&self, connection: Connection) {
        if connection.sender.is_closed() {
            return;
        }
        let mut idle = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.inner.max_idle {
            idle.push(Idle {
                connection,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self) -> Result<Connection, OpError> {
        let inner = &self.inner;
        let connecting = async {
            let stream = TcpStream::connect((inner.host.as_str(), inner.port))
                .await
                .map_err(|error| {
                    OpError::Transport(format!("connecting to {}: {error}", inner.authority_text()))
                })?;
            // Each request is awaited before the next: never hold one back.
            let _ = stream.set_nodelay(true);
            let (sender, connection) = http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|error| OpError::Transport(format!("HTTP handshake: {error}")))?;
            let task = tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok(Connection {
                sender,
                task: task.abort_handle(),
            })
        };
        tokio::time::timeout(inner.connect_timeout, connecting)
            .await
            .unwrap_or_else(|_| {
                Err(OpError::Timeout(format!(
                    "no connection to {} within {} ms",
                    inner.authority_text(),
                    inner.connect_timeout.as_millis()
                )))
            })
    }
}

impl Inner {
    fn authority_text(&self) -> &str {
        self.authority.to_str().unwrap_or("the server")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// What the fake server does with each request it reads.
    #[derive(Clone, Copy)]
    enum Behaviour {
        /// Answers 200 with the request's head (request line and `host`) as the
        /// body, and keeps the connection open.
        Echo,
        /// Answers, then closes the connection without saying so.
        EchoThenClose,
        /// Reads the request and closes the connection without an answer.
        ReadThenClose,
        /// Echoes the first request of a connection, then reads the next and
        /// closes the connection without an answer.
        EchoOnceThenReadAndClose,
        /// Reads the request and never answers.
        Silent,
        /// Answers a body of this many bytes.
        Big(usize),
    }

    /// A local HTTP/1.1 server; counts the connections it accepted and the
    /// requests it read.
    struct FakeServer {
        base: String,
        accepted: Arc<AtomicUsize>,
        requests: Arc<AtomicUsize>,
    }

    /// Serves on a thread and runtime of its own, so that a test that blocks its
    /// own thread does not stop the server.
    async fn fake_server(behaviour: Behaviour) -> FakeServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let accepted = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (counted, read) = (accepted.clone(), requests.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("a tokio listener");
                while let Ok((socket, _)) = listener.accept().await {
                    counted.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve(socket, behaviour, read.clone()));
                }
            });
        });
        FakeServer {
            base,
            accepted,
            requests,
        }
    }

    async fn serve(mut socket: TcpStream, behaviour: Behaviour, requests: Arc<AtomicUsize>) {
        let mut buffer = Vec::new();
        let mut answered = 0;
        loop {
            let Some(head) = read_request(&mut socket, &mut buffer).await else {
                return;
            };
            requests.fetch_add(1, Ordering::SeqCst);
            let body = match behaviour {
                Behaviour::ReadThenClose => return,
                Behaviour::EchoOnceThenReadAndClose if answered == 1 => return,
                Behaviour::Silent => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    return;
                }
                Behaviour::Big(size) => "x".repeat(size),
                Behaviour::Echo
                | Behaviour::EchoThenClose
                | Behaviour::EchoOnceThenReadAndClose => head,
            };
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            if socket.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            answered += 1;
            if matches!(behaviour, Behaviour::EchoThenClose) {
                return;
            }
        }
    }

    /// Reads one request (head and `content-length` body); answers its request
    /// line, `host` and `content-type` headers (empty lines when absent) and body,
    /// one per line. `None` at the end of the stream.
    async fn read_request(socket: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<String> {
        let mut chunk = [0u8; 4096];
        let end = loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let n = socket.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buffer.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|line| {
                line.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_owned)
            })
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        while buffer.len() < end + length {
            let n = socket.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buffer.extend_from_slice(&chunk[..n]);
        }
        let body = String::from_utf8_lossy(&buffer[end..end + length]).into_owned();
        buffer.drain(..end + length);
        let request_line = head.lines().next().unwrap_or_default().to_owned();
        let header = |name: &str| {
            head.lines()
                .find(|line| line.to_ascii_lowercase().starts_with(name))
                .unwrap_or_default()
                .to_owned()
        };
        let (host, content_type) = (header("host:"), header("content-type:"));
        Some(format!("{request_line}\n{host}\n{content_type}\n{body}"))
    }

    fn client(base: &str, max_idle: usize) -> HttpClient {
        timed_client(
            base,
            max_idle,
            Duration::from_secs(60),
            Duration::from_secs(5),
        )
    }

    /// A client with `idle` as its idle limit and `request` as its request time-out.
    fn timed_client(base: &str, max_idle: usize, idle: Duration, request: Duration) -> HttpClient {
        HttpClient::with_idle_timeout(base, max_idle, idle, Duration::from_secs(5), request)
            .expect("a valid base")
    }

    fn text(answer: &Answer) -> String {
        String::from_utf8_lossy(&answer.body).into_owned()
    }

    #[tokio::test]
    async fn sends_the_path_under_the_base_with_host_and_body() {
        let server = fake_server(Behaviour::Echo).await;
        let http = client(&format!("{}/under/", server.base), 4);
        let answer = http
            .send(
                Method::POST,
                "/v1/locks/a:acquire",
                Some(b"{\"x\":1}".to_vec()),
            )
            .await
            .expect("an answer");
        assert_eq!(answer.status, StatusCode::OK);
        let authority = server.base.trim_start_matches("http://");
        assert_eq!(
            text(&answer),
            format!(
                "POST /under/v1/locks/a:acquire HTTP/1.1\nhost: {authority}\n\
                 content-type: application/json\n{{\"x\":1}}"
            )
        );
        assert_eq!(http.base(), format!("{}/under", server.base));
        // Without a body, no content type (Baton's JSON extractors would refuse a
        // body of another type; none is sent).
        let answer = http
            .send(Method::DELETE, "/v1/leases/l1", None)
            .await
            .expect("an answer");
        assert_eq!(
            text(&answer),
            format!("DELETE /under/v1/leases/l1 HTTP/1.1\nhost: {authority}\n\n")
        );
    }

    #[tokio::test]
    async fn one_connection_serves_requests_one_after_another() {
        let server = fake_server(Behaviour::Echo).await;
        let http = client(&server.base, 4);
        for _ in 0..20 {
            http.send(Method::GET, "/x", None).await.expect("an answer");
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn concurrent_requests_open_connections_and_keep_max_idle() {
        let server = fake_server(Behaviour::Echo).await;
        let http = client(&server.base, 2);
        let requests: Vec<_> = (0..6)
            .map(|_| {
                let http = http.clone();
                tokio::spawn(async move { http.send(Method::GET, "/x", None).await })
            })
            .collect();
        for request in requests {
            request.await.expect("joined").expect("an answer");
        }
        let opened = server.accepted.load(Ordering::SeqCst);
        assert!(
            opened > 1,
            "six requests at once went over {opened} connection"
        );
        // Only two were kept: the next three requests at once open one more.
        let requests: Vec<_> = (0..3)
            .map(|_| {
                let http = http.clone();
                tokio::spawn(async move { http.send(Method::GET, "/x", None).await })
            })
            .collect();
        for request in requests {
            request.await.expect("joined").expect("an answer");
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), opened + 1);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_replaced_without_an_error() {
        let server = fake_server(Behaviour::EchoThenClose).await;
        let http = client(&server.base, 4);
        for round in 1..=5 {
            let answer = http
                .send(Method::POST, "/x", Some(b"{}".to_vec()))
                .await
                .unwrap_or_else(|error| panic!("request {round}: {error}"));
            assert!(text(&answer).starts_with("POST /x "));
            // Let the close arrive, as it does for an idle pooled connection.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(server.accepted.load(Ordering::SeqCst), 5);
    }

    /// A write the server read may have been carried out: when its answer does
    /// not come, it is an error, never sent a second time; on a new connection,
    /// and on a reused one, where a request that did not go out is sent again.
    #[tokio::test]
    async fn a_request_the_server_read_is_not_sent_again() {
        for (behaviour, answered_first) in [
            (Behaviour::ReadThenClose, false),
            (Behaviour::EchoOnceThenReadAndClose, true),
        ] {
            let server = fake_server(behaviour).await;
            let http = client(&server.base, 4);
            let send = || http.send(Method::POST, "/x", Some(b"{}".to_vec()));
            if answered_first {
                send().await.expect("the first is answered");
            }
            let error = send().await.expect_err("no answer");
            assert_eq!(error.code(), "transport", "{error}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            let read = usize::from(answered_first) + 1;
            assert_eq!(server.requests.load(Ordering::SeqCst), read);
            assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test]
    async fn a_connection_idle_too_long_is_not_used() {
        let server = fake_server(Behaviour::Echo).await;
        let http = timed_client(
            &server.base,
            4,
            Duration::from_millis(500),
            Duration::from_secs(5),
        );
        http.send(Method::GET, "/x", None).await.expect("an answer");
        http.send(Method::GET, "/x", None).await.expect("an answer");
        assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(800)).await;
        http.send(Method::GET, "/x", None).await.expect("an answer");
        assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn no_answer_in_time_is_a_timeout() {
        let server = fake_server(Behaviour::Silent).await;
        let http = timed_client(
            &server.base,
            4,
            POOL_IDLE_TIMEOUT,
            Duration::from_millis(200),
        );
        let error = http
            .send(Method::POST, "/x", Some(b"{}".to_vec()))
            .await
            .expect_err("no answer");
        assert_eq!(error.code(), "timeout", "{error}");
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_transport_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        drop(listener);
        let error = client(&base, 4)
            .send(Method::GET, "/x", None)
            .await
            .expect_err("nobody listens");
        assert_eq!(error.code(), "transport", "{error}");
    }

    #[tokio::test]
    async fn an_answer_over_the_limit_is_an_error_not_a_buffer() {
        let server = fake_server(Behaviour::Big(MAX_ANSWER + 1)).await;
        let error = client(&server.base, 4)
            .send(Method::GET, "/x", None)
            .await
            .expect_err("too big");
        assert_eq!(error.code(), "transport", "{error}");
        let server = fake_server(Behaviour::Big(100_000)).await;
        let answer = client(&server.base, 4)
            .send(Method::GET, "/x", None)
            .await
            .expect("an answer under the limit");
        assert_eq!(answer.body.len(), 100_000);
    }

    #[test]
    fn only_plain_http_bases() {
        let new = |base: &str| HttpClient::new(base, 1, Duration::ZERO, Duration::ZERO);
        assert!(new("https://127.0.0.1:1").is_err());
        assert!(new("http://127.0.0.1:1/?a=b").is_err());
        assert!(new("not a url").is_err());
        assert!(new("http://user:secret@127.0.0.1:1").is_err());
        let http = new("http://[::1]:7878/").expect("IPv6 literal");
        assert_eq!(http.inner.host, "::1");
        assert_eq!(http.inner.authority, "[::1]:7878");
    }
}
