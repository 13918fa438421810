//! Noticing that a client went away while its request waits.
//!
//! actix-web keeps running a handler after the client closed its connection, so
//! a request waiting for a lock would hold its place in the queue until
//! `wait_ms` ran out. Each connection's socket is duplicated when it is accepted;
//! a waiting handler watches its duplicate and gives up (which cancels its wait
//! through the log) as soon as the peer closes.
//!
//! A connection that turns into a watch stream gives its duplicate up
//! ([`hand_over_to_stream`]): a stream needs no hang-up watch (actix ends it
//! when the peer goes), and twenty thousand streams must fit a process's file
//! limit at one descriptor each.

use std::any::Any;
use std::cell::RefCell;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use actix_web::dev::Extensions;
use actix_web::{HttpRequest, HttpResponseBuilder};

/// A duplicate of the connection's socket, stored in the connection's data;
/// empty once the connection became a stream.
pub struct PeerSocket(RefCell<Option<OwnedFd>>);

/// The TLS stream type of an https listener.
type TlsStream = actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>;

/// `HttpServer::on_connect` hook: remembers each connection's TCP socket (under
/// TLS too: the peer's FIN shows on the socket either way) and, over TLS, the
/// client certificate the handshake verified.
pub fn on_connect(connection: &dyn Any, data: &mut Extensions) {
    let tcp = if let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        Some(stream)
    } else if let Some(stream) = connection.downcast_ref::<TlsStream>() {
        let (tcp, session) = stream.get_ref();
        if let Some(leaf) = session.peer_certificates().and_then(|chain| chain.first()) {
            data.insert(ClientCertificate(leaf.clone().into_owned()));
        }
        Some(tcp)
    } else {
        None
    };
    if let Some(fd) = tcp.and_then(|stream| stream.as_fd().try_clone_to_owned().ok()) {
        data.insert(PeerSocket(RefCell::new(Some(fd))));
    }
}

/// The certificate a client presented in the TLS handshake (already verified
/// against `--tls-client-ca`), stored in the connection's data.
#[derive(Clone, Debug)]
pub struct ClientCertificate(pub rustls::pki_types::CertificateDer<'static>);

/// Resolves when the request's client has closed its connection; never resolves
/// when that cannot be known (no socket recorded, e.g. in-process tests).
pub async fn client_gone(request: &HttpRequest) {
    let stream = request
        .conn_data::<PeerSocket>()
        .and_then(|socket| socket.0.borrow().as_ref()?.try_clone().ok())
        .map(std::net::TcpStream::from)
        .and_then(|stream| tokio::net::TcpStream::from_std(stream).ok());
    let Some(stream) = stream else {
        return std::future::pending().await;
    };
    let mut buffer = [0u8; 1];
    loop {
        // The peer's FIN shows as read-closed readiness (EPOLLRDHUP) even while
        // unread bytes sit in front of it (a TLS close_notify, a pipelined
        // request), which are actix's to read and would hide it from a peek.
        match stream.ready(tokio::io::Interest::READABLE).await {
            Ok(ready) if ready.is_read_closed() => return,
            Ok(_) => {}
            Err(_) => return,
        }
        match stream.peek(&mut buffer).await {
            // End of stream: the client closed its side.
            Ok(0) => return,
            // Bytes are waiting: look again a little later rather than spin.
            Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Closes the duplicate of an HTTP/1 connection whose answer, `response`, is a
/// long-lived stream, and then has the connection closed after the stream
/// (`Connection: close`), since a later request on it could no longer notice
/// a hang-up. An HTTP/2 connection keeps its duplicate: its other requests may
/// still wait.
pub fn hand_over_to_stream(request: &HttpRequest, response: &mut HttpResponseBuilder) {
    if request.version() >= actix_web::http::Version::HTTP_2 {
        return;
    }
    let taken = request
        .conn_data::<PeerSocket>()
        .and_then(|socket| socket.0.borrow_mut().take());
    if taken.is_some() {
        response.force_close();
    }
}
