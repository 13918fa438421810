//! An HTTP/1.1 keep-alive server for tests of HTTP clients' connection pools:
//! it answers every request `200 {}` after a delay, and records how long each
//! request's connection had been idle before the request arrived (since it was
//! accepted, or since the previous answer on it). A pool that keeps idle
//! connections longer than Baton's listeners do shows up as a long idle time:
//! against Baton such a request can meet the connection being closed (see
//! [`crate::client::POOL_IDLE_TIMEOUT`]).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running recorder; stops when dropped.
pub struct IdleRecordingServer {
    /// `http://127.0.0.1:port`.
    pub base: String,
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Seen {
    connections: usize,
    idle_before_request: Vec<Duration>,
}

impl IdleRecordingServer {
    /// Listens on a free loopback port; every answer waits `answer_delay`
    /// (so that concurrent requests need connections of their own).
    pub async fn start(answer_delay: Duration) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = tokio::spawn(accept_loop(listener, seen.clone(), answer_delay));
        Ok(Self { base, seen, task })
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .connections
    }

    /// Requests answered or in progress so far.
    pub fn requests(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .idle_before_request
            .len()
    }

    /// The longest a connection sat idle before a request came on it.
    pub fn longest_idle(&self) -> Duration {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.idle_before_request
            .iter()
            .copied()
            .max()
            .unwrap_or_default()
    }

    /// A pool's behaviour across a quiet spell: a burst of four GETs to `url`
    /// through `client` (which opens several connections), `quiet` of nothing,
    /// a second burst; then the longest a connection sat idle before a request
    /// came on it. A pool that lets go of idle connections sooner than `quiet`
    /// opens new ones for the second burst, and this stays well under `quiet`.
    /// `url` is this server's, or a proxy's in front of it.
    pub async fn longest_idle_across(
        &self,
        client: &reqwest::Client,
        url: &str,
        quiet: Duration,
    ) -> reqwest::Result<Duration> {
        burst(client, url, 4).await?;
        assert!(self.connections() >= 2, "the burst shared one connection");
        tokio::time::sleep(quiet).await;
        burst(client, url, 4).await?;
        Ok(self.longest_idle())
    }
}

/// Sends `n` GETs to `url` at once through `client`, so that each needs a
/// connection of its own, and waits for them; the first failure, if any.
async fn burst(client: &reqwest::Client, url: &str, n: usize) -> reqwest::Result<()> {
    let requests: Vec<_> = (0..n)
        .map(|_| tokio::spawn(client.get(url).send()))
        .collect();
    for request in requests {
        match request.await {
            Ok(answer) => drop(answer?.error_for_status()?),
            Err(failed) => std::panic::resume_unwind(failed.into_panic()),
        }
    }
    Ok(())
}

impl Drop for IdleRecordingServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, seen: Arc<Mutex<Seen>>, answer_delay: Duration) {
    while let Ok((socket, _)) = listener.accept().await {
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .connections += 1;
        tokio::spawn(serve(socket, seen.clone(), answer_delay));
    }
}

/// Serves requests without bodies (what the tests send) until the client closes.
async fn serve(mut socket: TcpStream, seen: Arc<Mutex<Seen>>, answer_delay: Duration) {
    let answer =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
    let mut buffer = vec![0u8; 64 * 1024];
    let mut idle_since = Instant::now();
    loop {
        let mut head = Vec::new();
        let mut first_byte_at = None;
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => {
                    first_byte_at.get_or_insert_with(Instant::now);
                    head.extend_from_slice(&buffer[..read]);
                }
            }
        }
        let idle = first_byte_at.map_or_else(|| idle_since.elapsed(), |at| at - idle_since);
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .idle_before_request
            .push(idle);
        tokio::time::sleep(answer_delay).await;
        if socket.write_all(answer).await.is_err() {
            return;
        }
        idle_since = Instant::now();
    }
}
