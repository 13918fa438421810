//! Watch streams against the real `baton` binary: SIGTERM ends an open stream
//! with a final `resync` event (and the server still exits), and after a
//! restart the history is rebuilt from the log, so a client resumes where it
//! stopped.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{self, free_port, start_single as start};

/// `(id, event)` of every frame until the stream ends or a frame with
/// `id >= until` that is not a bookmark arrives.
async fn frames(response: &mut reqwest::Response, until: Option<u64>) -> Vec<(u64, String)> {
    harness::sse_frames(response, until)
        .await
        .into_iter()
        .map(|(id, event, _)| (id, event))
        .collect()
}

async fn open(client: &reqwest::Client, url: String) -> reqwest::Response {
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response
}

fn changes(frames: &[(u64, String)]) -> Vec<(u64, String)> {
    frames
        .iter()
        .filter(|(_, event)| event != "bookmark")
        .cloned()
        .collect()
}

#[tokio::test]
async fn sigterm_ends_streams_and_a_restart_resumes_them() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut server = start(dir.path(), port).await;
    let client = reqwest::Client::new();

    let mut stream = open(&client, format!("{base}/v1/watch?since=0")).await;
    for i in 0..5 {
        let grant: Value = client
            .post(format!("{base}/v1/locks/w/{i}:acquire"))
            .json(&json!({"holder": "p"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let released = client
            .post(format!("{base}/v1/locks/w/{i}:release"))
            .json(&json!({"lease_id": grant["lease_id"], "token": grant["token"]}))
            .send()
            .await
            .unwrap();
        assert_eq!(released.status(), 200);
    }
    let head: u64 = client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap()
        .headers()
        .get("baton-revision")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let before = changes(&frames(&mut stream, Some(head)).await);
    assert_eq!(before.len() as u64, head);

    // SIGTERM: the open stream gets a final resync and ends; the server exits.
    let status = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest = frames(&mut stream, None).await;
    assert_eq!(rest.last(), Some(&(head, "resync".to_owned())), "{rest:?}");
    let exit = harness::exited(&mut server, Duration::from_secs(60)).await;
    let exit = exit.expect("baton did not stop on SIGTERM");
    assert!(exit.success(), "exit status {exit}");

    // After a restart the log is re-applied, which rebuilds the history: the
    // same events with the same revisions, and resuming from the last one works.
    let mut server = start(dir.path(), port).await;
    let mut again = open(&client, format!("{base}/v1/watch?since=0")).await;
    assert_eq!(changes(&frames(&mut again, Some(head)).await), before);
    let mut resumed = client
        .get(format!("{base}/v1/watch?kinds=lock"))
        .header("Last-Event-ID", head.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    client
        .post(format!("{base}/v1/locks/after:acquire"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let next = changes(&frames(&mut resumed, Some(head + 1)).await);
    assert_eq!(next, [(head + 2, "lock.acquired".to_owned())]);
    server.kill().unwrap();
    server.wait().unwrap();
}

/// Open descriptors of a process.
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// The descriptors of a process once their count holds still for `pause`.
async fn settled_descriptors(pid: u32, pause: Duration) -> usize {
    harness::eventually(Duration::from_secs(10), || async {
        let count = open_descriptors(pid);
        tokio::time::sleep(pause).await;
        (open_descriptors(pid) == count).then_some(count)
    })
    .await
    .expect("the descriptors never settled")
}

/// Opens `count` streams at `url`, one connection each (reqwest never shares
/// an HTTP/1 connection between requests in flight), each answered with
/// `Connection: close`.
async fn open_streams(client: &reqwest::Client, url: &str, count: usize) -> Vec<reqwest::Response> {
    let mut streams = Vec::new();
    for _ in 0..count {
        let stream = open(client, url.to_owned()).await;
        let connection = stream.headers().get("connection");
        assert_eq!(connection.map(|v| v.to_str().unwrap()), Some("close"));
        streams.push(stream);
    }
    streams
}

/// A watch stream costs the server one descriptor, its socket, so 20,000
/// streams fit a 20,000-file limit less a few dozen; its connection used to
/// keep a second one, the duplicate that notices hung-up waiters. The stream's
/// connection closes after it (`Connection: close`), and the descriptors are
/// given back once the clients go (the server notices at its next write:
/// bookmarks every 100 ms here).
#[tokio::test]
async fn a_watch_stream_costs_the_server_one_descriptor() {
    const STREAMS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut server = start(dir.path(), port).await;
    let pid = server.id();
    let client = reqwest::Client::new();
    // Whatever the server opens lazily on its first requests is open by now.
    drop(open(&client, format!("{base}/v1/watch")).await);
    let idle = settled_descriptors(pid, Duration::from_millis(200)).await;

    let url = format!("{base}/v1/watch?kinds=lock&bookmark_ms=100");
    let streams = open_streams(&client, &url, STREAMS).await;
    let with_streams = open_descriptors(pid);
    let per_stream = (with_streams - idle) as f64 / STREAMS as f64;
    assert!(
        (1.0..1.5).contains(&per_stream),
        "{per_stream} descriptors per stream ({idle} idle, {with_streams} with {STREAMS} streams)"
    );

    drop(streams);
    let released = harness::eventually(Duration::from_secs(10), || async {
        (open_descriptors(pid) <= idle + STREAMS / 10).then_some(())
    })
    .await;
    assert!(
        released.is_some(),
        "{} descriptors open after the clients left ({idle} idle)",
        open_descriptors(pid)
    );
    server.kill().unwrap();
    server.wait().unwrap();
}

/// Through `serve --proxy`, a watch stream holds two of the proxy's
/// descriptors, the client's connection and the node's, and no hang-up
/// duplicate (three before).
#[tokio::test]
async fn a_watch_stream_through_the_proxy_costs_it_two_descriptors() {
    const STREAMS: usize = 30;
    let dir = tempfile::tempdir().unwrap();
    let node_port = free_port();
    let mut node = start(dir.path(), node_port).await;
    let port = free_port();
    let mut proxy = Command::new(harness::baton_bin())
        .args(["serve", "--proxy", &format!("http://127.0.0.1:{node_port}")])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("BATON_LOG", "warn")
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let up = harness::eventually(Duration::from_secs(20), || async {
        let response = client.get(format!("{base}/healthz")).send().await.ok()?;
        response.status().is_success().then_some(())
    })
    .await;
    assert!(up.is_some(), "the proxy serves");
    // Whatever the proxy opens on first use is open, and this first stream
    // (bookmarks every 100 ms, so its end is noticed at once) is gone.
    drop(open(&client, format!("{base}/v1/watch?bookmark_ms=100")).await);
    let idle = settled_descriptors(proxy.id(), Duration::from_millis(500)).await;

    let url = format!("{base}/v1/watch?kinds=lock");
    let streams = open_streams(&client, &url, STREAMS).await;
    let per_stream = (open_descriptors(proxy.id()) - idle) as f64 / STREAMS as f64;
    assert!(
        (2.0..2.5).contains(&per_stream),
        "{per_stream} descriptors per stream through the proxy"
    );
    drop(streams);
    proxy.kill().unwrap();
    proxy.wait().unwrap();
    node.kill().unwrap();
    node.wait().unwrap();
}
