//! watch-fanout: N Server-Sent-Events watchers on `GET /v1/watch` while writers
//! cycle locks; measures how long an event takes from the write being sent to each
//! watcher receiving it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures_util::StreamExt;
use serde_json::json;

use crate::baton::BatonClient;
use crate::driver::Worker;
use crate::error::OpError;
use crate::recorder::Recorder;
use crate::target::{Lease, Target};

/// Revision -> when the write that produced it was sent.
pub type SentLog = Arc<Mutex<HashMap<u64, Instant>>>;
type Received = Arc<Mutex<Vec<(u64, Instant)>>>;

/// One event of an SSE stream (only the fields this tool uses).
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// `id:` (the revision).
    pub id: Option<u64>,
    /// `event:` (`lock.acquired`, `bookmark`, ...).
    pub event: Option<String>,
}

/// Takes every complete event (ended by a blank line) out of `buf`.
pub fn take_events(buf: &mut String) -> Vec<SseEvent> {
    let mut events = Vec::new();
    loop {
        let normalized_end = buf.find("\n\n").map(|i| (i, 2));
        let crlf_end = buf.find("\r\n\r\n").map(|i| (i, 4));
        let end = match (normalized_end, crlf_end) {
            (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
            (a, b) => a.or(b),
        };
        let Some((at, len)) = end else { break };
        let block: String = buf.drain(..at + len).collect();
        let mut event = SseEvent {
            id: None,
            event: None,
        };
        for line in block.lines() {
            let line = line.trim_end_matches('\r');
            if let Some(v) = line.strip_prefix("id:") {
                event.id = v.trim().parse().ok();
            } else if let Some(v) = line.strip_prefix("event:") {
                event.event = Some(v.trim().to_owned());
            }
        }
        if event.id.is_some() || event.event.is_some() {
            events.push(event);
        }
    }
    events
}

/// The watchers of a run.
pub struct Fanout {
    sent: SentLog,
    received: Vec<Received>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Fanout {
    /// Opens `watchers` streams on names under `prefix`; fails clearly when the
    /// server has no watch endpoint.
    pub async fn connect(
        baton: &BatonClient,
        prefix: &str,
        watchers: usize,
    ) -> anyhow::Result<Self> {
        let url = format!("{}/v1/watch", baton.base());
        let mut received = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..watchers.max(1) {
            let response = baton
                .http()
                .get(&url)
                .query(&[("prefix", prefix)])
                .header("accept", "text/event-stream")
                // The client's default timeout covers the whole body; a watch is open-ended.
                .timeout(Duration::from_secs(24 * 3600))
                .send();
            let response = tokio::time::timeout(Duration::from_secs(10), response)
                .await
                .context("GET /v1/watch sent no response headers within 10 s")?
                .context("GET /v1/watch")?;
            let status = response.status();
            if status == reqwest::StatusCode::NOT_FOUND {
                bail!("GET /v1/watch answered 404: this Baton build has no watch endpoint (API.md, Watch); watch-fanout needs it");
            }
            if !status.is_success() {
                let body = response.text().await.unwrap_or_default();
                bail!("GET /v1/watch answered {status}: {body}");
            }
            let log: Received = Arc::new(Mutex::new(Vec::new()));
            let sink = log.clone();
            tasks.push(tokio::spawn(async move {
                let mut stream = response.bytes_stream();
                let mut buf = String::new();
                while let Some(Ok(chunk)) = stream.next().await {
                    let now = Instant::now();
                    buf.push_str(&String::from_utf8_lossy(&chunk));
                    let events = take_events(&mut buf);
                    let mut sink = sink.lock().unwrap_or_else(PoisonError::into_inner);
                    for e in events {
                        if let (Some(id), false) = (e.id, e.event.as_deref() == Some("bookmark")) {
                            sink.push((id, now));
                        }
                    }
                }
            }));
            received.push(log);
        }
        Ok(Self {
            sent: Arc::new(Mutex::new(HashMap::new())),
            received,
            tasks,
        })
    }

    /// Where writers log what they sent.
    pub fn sent_log(&self) -> SentLog {
        self.sent.clone()
    }

    /// Waits for late deliveries, closes the watchers and returns the delivery
    /// latencies; adds `watchers`, `deliveries`, `missed_deliveries` to `extra`.
    pub async fn finish(
        self,
        interval: Duration,
        extra: &mut BTreeMap<String, serde_json::Value>,
    ) -> Recorder {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for task in &self.tasks {
            task.abort();
        }
        let sent = self
            .sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let first = sent.values().min().copied().unwrap_or_else(Instant::now);
        let mut recorder = Recorder::new(first, interval);
        let mut delivered = 0u64;
        for log in &self.received {
            let log = log.lock().unwrap_or_else(PoisonError::into_inner);
            for (id, at) in log.iter() {
                if let Some(sent_at) = sent.get(id) {
                    recorder.ok(*at, at.saturating_duration_since(*sent_at));
                    delivered += 1;
                }
            }
        }
        let expected = sent.len() as u64 * self.received.len() as u64;
        extra.insert("watchers".into(), json!(self.received.len()));
        extra.insert("events_written".into(), json!(sent.len()));
        extra.insert("deliveries".into(), json!(delivered));
        extra.insert(
            "missed_deliveries".into(),
            json!(expected.saturating_sub(delivered)),
        );
        recorder
    }
}

/// A writer: acquire -> release on its own lock, logging each write's revision.
pub struct WriterWorker {
    target: Target,
    lease: Lease,
    name: String,
    sent: SentLog,
}

impl WriterWorker {
    /// A writer on lock `name`.
    pub fn new(target: Target, lease: Lease, name: String, sent: SentLog) -> Self {
        Self {
            target,
            lease,
            name,
            sent,
        }
    }
}

impl Worker for WriterWorker {
    async fn op(&mut self, _k: u64) -> Result<(), OpError> {
        let t0 = Instant::now();
        let held = self.target.acquire(&self.name, &self.lease).await?;
        let t1 = Instant::now();
        let released = self.target.release(&self.lease, &held).await?;
        let mut sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        sent.insert(held.revision, t0);
        if released != 0 {
            sent.insert(released, t1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn calls(base: &str) -> crate::http::HttpClient {
        crate::http::HttpClient::new(base, 2, Duration::from_secs(5), Duration::from_secs(5))
            .expect("a valid base")
    }

    /// A one-route HTTP server: `GET /v1/watch` answers `body` as an event stream
    /// (closed after a while), or 404 when `body` is `None`.
    async fn fake_server(body: Option<&'static str>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if socket.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let Some(body) = body else {
                        let _ = socket
                            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                            .await;
                        return;
                    };
                    let _ = socket
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
                        .await;
                    let _ = socket.write_all(body.as_bytes()).await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                });
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn fanout_joins_deliveries_with_logged_writes() {
        let base = fake_server(Some(
            "id: 1\nevent: lock.acquired\ndata: {}\n\nid: 2\nevent: lock.released\ndata: {}\n\n\
             event: bookmark\nid: 2\ndata: {}\n\nid: 99\nevent: lock.acquired\ndata: {}\n\n",
        ))
        .await;
        let baton = BatonClient::new(reqwest::Client::new(), calls(&base));
        let fanout = Fanout::connect(&baton, "p/", 2)
            .await
            .expect("watchers connect");
        {
            let sent = fanout.sent_log();
            let mut sent = sent.lock().expect("not poisoned");
            for revision in 1..=3 {
                sent.insert(revision, Instant::now());
            }
        }
        let mut extra = BTreeMap::new();
        let recorder = fanout.finish(Duration::from_millis(100), &mut extra).await;
        // Revisions 1 and 2 reach both watchers; the bookmark and revision 99 (not
        // written by this run) do not count; revision 3 never arrives.
        assert_eq!(recorder.operations(), 4);
        assert_eq!(extra["deliveries"], json!(4));
        assert_eq!(extra["events_written"], json!(3));
        assert_eq!(extra["missed_deliveries"], json!(2));
    }

    #[tokio::test]
    async fn a_server_without_watch_fails_clearly() {
        let base = fake_server(None).await;
        let baton = BatonClient::new(reqwest::Client::new(), calls(&base));
        let error = Fanout::connect(&baton, "p/", 1)
            .await
            .err()
            .expect("404 is an error");
        assert!(
            format!("{error:#}").contains("no watch endpoint"),
            "{error:#}"
        );
    }

    #[test]
    fn parses_events_across_chunks() {
        let mut buf = String::from("id: 7\nevent: lock.acquired\ndata: {}\n\nid: 8\nev");
        assert_eq!(
            take_events(&mut buf),
            vec![SseEvent {
                id: Some(7),
                event: Some("lock.acquired".into())
            }]
        );
        buf.push_str("ent: bookmark\r\ndata: {}\r\n\r\n: comment\n\n");
        let events = take_events(&mut buf);
        assert_eq!(
            events,
            vec![SseEvent {
                id: Some(8),
                event: Some("bookmark".into())
            }]
        );
        assert!(buf.is_empty());
    }
}
