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
