//! The client API served on the runtime's own thread (`--http-workers 0`, the
//! default when the runtime has one thread).
//!
//! actix-web's `HttpServer` runs HTTP on worker threads of its own: a request is
//! parsed on one, handed to the runtime's thread (Raft, the state machine, the
//! proposer) and its answer handed back, so every request wakes two threads. When
//! the runtime has a single thread, serving the API on that same thread removes
//! both hops: on one node 16 % more lock cycles at 64 clients with a third less
//! CPU each (BENCHMARKS.md, "The client API on the runtime's thread").
//!
//! This is the part of `HttpServer` Baton uses, rebuilt on the runtime: the same
//! actix-http service per connection (HTTP/1.1, TLS with the client certificate
//! handed to [`baton_api::on_connect`], actix's keep-alive, request and
//! disconnect timeouts and TLS handshake limits), a bound on open connections,
//! and `HttpServer`'s graceful stop: stop accepting, close idle keep-alive
//! connections, let requests in progress finish for up to the shutdown timeout,
//! then close the rest.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use actix_http::body::BoxBody;
use actix_http::{HttpService, HttpServiceBuilder};
use actix_service::boxed::{self, BoxService};
use actix_service::{map_config, IntoServiceFactory, Service, ServiceFactory, ServiceFactoryExt};
use actix_web::dev::AppConfig;
use actix_web::App;
use anyhow::Context;
use baton_api::{configure, on_connect, ApiState};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Most connections open at once. `HttpServer` allows 25,000 per worker, and
/// ran two workers on the two-core machines this mode is the default on.
const MAX_CONNECTIONS: usize = 50_000;

/// How long accepting pauses after an error such as running out of file
/// descriptors (actix-server's pause), so that the loop does not spin on it.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(500);

/// One connection's HTTP service: TLS (when on), then actix-http's dispatcher
/// over Baton's `App`. Its errors are the connection's own (a failed handshake,
/// a malformed request) and end only that connection.
type ConnectionService = BoxService<TcpStream, (), ()>;

/// The stream of an https connection, as `HttpServer` has it (what
/// [`baton_api::on_connect`] looks for to find the client certificate).
type TlsStream = actix_tls::accept::rustls_0_23::TlsStream<TcpStream>;

/// The client API's listeners and the service each accepted connection gets.
pub struct ApiOnRuntime {
    listeners: Vec<TcpListener>,
    service: Rc<ConnectionService>,
    stop: StopHandle,
    shutdown_timeout: Duration,
}

/// Asks a running [`ApiOnRuntime`] to stop gracefully; can be sent to any task.
/// One flag serves the accept loop and every connection (idle keep-alive
/// connections close, busy ones after their response): a value, not a
/// notification, so that whoever looks only later still sees it.
#[derive(Clone)]
pub struct StopHandle(Arc<watch::Sender<bool>>);

impl StopHandle {
    /// Stops accepting and starts the graceful stop (see [`ApiOnRuntime::run`]).
    pub fn stop(&self) {
        self.0.send_replace(true);
    }

    /// Resolves once [`StopHandle::stop`] was called (at once if it was).
    async fn stopped(mut stopping: watch::Receiver<bool>) {
        // An error means the handle is gone, so nothing can stop us any more
        // than now: stop too.
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }
}

impl ApiOnRuntime {
    /// Binds every address `listen` resolves to (as `HttpServer::bind` does)
    /// and builds the service connections get, over https when `tls` is given.
    pub async fn bind(
        listen: &str,
        state: ApiState,
        tls: Option<rustls::ServerConfig>,
        shutdown_timeout: Duration,
    ) -> anyhow::Result<Self> {
        let addresses: Vec<SocketAddr> = tokio::net::lookup_host(listen)
            .await
            .with_context(|| format!("resolving {listen}"))?
            .collect();
        let mut listeners = Vec::new();
        let mut last_error = None;
        for address in addresses {
            match TcpListener::bind(address).await {
                Ok(listener) => listeners.push(listener),
                Err(error) => last_error = Some(error),
            }
        }
        if listeners.is_empty() {
            return Err(match last_error {
                Some(error) => anyhow::Error::new(error),
                None => anyhow::anyhow!("{listen} resolves to no address"),
            })
            .with_context(|| format!("binding {listen}"));
        }
        let local = listeners[0].local_addr()?;
        let stop = StopHandle(Arc::new(watch::channel(false).0));
        let service = connection_service(state, tls, local, stop.0.subscribe())
            .new_service(())
            .await
            .map_err(|()| anyhow::anyhow!("building the client API's HTTP service"))?;
        Ok(ApiOnRuntime {
            listeners,
            service: Rc::new(service),
            stop,
            shutdown_timeout,
        })
    }

    /// What stops [`ApiOnRuntime::run`].
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Accepts and serves connections until [`StopHandle::stop`], then stops
    /// gracefully: no new connections, idle ones closed, requests in progress
    /// given up to the shutdown timeout, the rest closed. Must run inside a
    /// `LocalSet` (actix's services are not `Send`).
    pub async fn run(self) {
        let mut connections = JoinSet::new();
        let mut stopped = std::pin::pin!(StopHandle::stopped(self.stop.0.subscribe()));
        loop {
            tokio::select! {
                biased;
                () = &mut stopped => break,
                // Reaps finished connections, so that the set's length counts open ones.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.accept(), if connections.len() < MAX_CONNECTIONS => {
                    match accepted {
                        Ok(stream) => {
                            let _ = stream.set_nodelay(true);
                            let service = self.service.clone();
                            connections.spawn_local(async move {
                                let _ = service.call(stream).await;
                            });
                        }
                        Err(error) => {
                            tracing::warn!(%error, "accepting a client connection");
                            tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                        }
                    }
                }
            }
        }
        drop(self.listeners);
        let open = connections.len();
        let drained = tokio::time::timeout(self.shutdown_timeout, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                open,
                still_open = connections.len(),
                "closing the connections still busy after the shutdown timeout"
            );
            connections.shutdown().await;
        }
    }

    /// Accepts the next connection on any listener once the service can take
    /// one (actix-tls's acceptor is not ready while 256 TLS handshakes are in
    /// progress, so that the rest wait in the kernel's backlog).
    async fn accept(&self) -> std::io::Result<TcpStream> {
        // The boxed service's error is `()`; an acceptor never reports one here.
        let _ = poll_fn(|cx| self.service.poll_ready(cx)).await;
        poll_fn(|cx| {
            for listener in &self.listeners {
                if let Poll::Ready(accepted) = listener.poll_accept(cx) {
                    return Poll::Ready(accepted.map(|(stream, _peer)| stream));
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// The service one connection gets, configured as `HttpServer` configures its
/// own with Baton's settings and actix's defaults.
fn connection_service(
    state: ApiState,
    tls: Option<rustls::ServerConfig>,
    local: SocketAddr,
    stopping: watch::Receiver<bool>,
) -> boxed::BoxServiceFactory<(), TcpStream, (), (), ()> {
    let secure = tls.is_some();
    let app = App::new()
        .configure(configure(state))
        .into_factory()
        .map_err(|error: actix_web::Error| error.error_response());
    // What `HttpServer` gives each App: whether the listener is https, and its
    // address as the host name (used for generated URLs, which Baton makes none of).
    let app = map_config(app, move |()| {
        AppConfig::__priv_test_new(secure, local.to_string(), local)
    });
    match tls {
        Some(config) => boxed::factory(
            configured(
                HttpService::<TlsStream, _, _, _, _>::build(),
                local,
                stopping,
            )
            .finish(app)
            .rustls_0_23_with_config(config, Default::default())
            .map_err(|error| tracing::debug!(?error, "client connection")),
        ),
        None => boxed::factory(
            configured(
                HttpService::<TcpStream, _, _, _, _>::build(),
                local,
                stopping,
            )
            .finish(app)
            .tcp()
            .map_err(|error| tracing::debug!(?error, "client connection")),
        ),
    }
}

/// `HttpServer`'s settings for one kind of stream (`T`: plain or TLS): actix's
/// default timeouts, Baton's connection hook, and the stop signal.
fn configured<T, S>(
    builder: HttpServiceBuilder<T, S>,
    local: SocketAddr,
    stopping: watch::Receiver<bool>,
) -> HttpServiceBuilder<T, S>
where
    T: std::any::Any,
    S: ServiceFactory<actix_http::Request, Config = ()>,
    S::Error: Into<actix_http::Response<BoxBody>> + 'static,
    S::InitError: std::fmt::Debug,
    <S::Service as Service<actix_http::Request>>::Future: 'static,
{
    builder
        .keep_alive(crate::http_timeouts::KEEP_ALIVE)
        .client_request_timeout(crate::http_timeouts::REQUEST_HEAD_TIMEOUT)
        .client_disconnect_timeout(Duration::from_secs(1))
        .h1_allow_half_closed(true)
        .local_addr(local)
        .on_connect_ext(|io: &T, data: _| on_connect(io as &dyn std::any::Any, data))
        // Not a public API of actix-http, but the one `HttpServer` uses for
        // the same purpose: closes idle keep-alive connections on a stop.
        .graceful_shutdown_signal(move || StopHandle::stopped(stopping.clone()))
}
