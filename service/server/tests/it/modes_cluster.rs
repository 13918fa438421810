//! Shared locks, semaphores and multi-acquire across real processes (issue 17):
//! every request goes through a follower (the follower -> leader hop, and a wait
//! held open on a follower while the release comes through another node).

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{eventually, Cluster};

/// Waits until `path` read on node `via` shows `waiters` requests in line.
async fn wait_for_waiters(cluster: &Cluster, via: u64, path: &str, waiters: u64) {
    let seen = eventually(Duration::from_secs(20), || async {
        let (_, body) = cluster.get(via, path).await;
        (body["waiters"].as_u64() == Some(waiters)).then_some(())
    })
    .await;
    assert!(seen.is_some(), "{path}: {waiters} waiter(s) in line");
}

fn token(answer: &Value) -> u64 {
    answer["token"]
        .as_u64()
        .unwrap_or_else(|| panic!("no token in {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_writers_semaphores_and_multi_acquire_work_through_followers() {
    let cluster = Cluster::start(3, &[]).await;
    let leader = cluster.wait_leader(None).await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (a, b) = (followers[0], followers[1]);

    // Two readers through two followers hold together; a writer through a
    // follower waits for both, and is woken by releases through other nodes.
    let path = "/v1/locks/rw:acquire";
    let (status, reader_a) = cluster
        .post(a, path, json!({"mode": "shared", "ttl_ms": 10_000}))
        .await;
    assert_eq!(status, 200, "{reader_a}");
    let (status, reader_b) = cluster
        .post(b, path, json!({"mode": "shared", "ttl_ms": 10_000}))
        .await;
    assert_eq!(status, 200, "{reader_b}");
    let (_, info) = cluster.get(leader, "/v1/locks/rw").await;
    assert_eq!(info["mode"], "shared", "{info}");
    assert_eq!(info["holders"].as_array().map(Vec::len), Some(2), "{info}");
    let writer = cluster.spawn_post(a, path, json!({"ttl_ms": 10_000, "wait_ms": 20_000}));
    wait_for_waiters(&cluster, b, "/v1/locks/rw", 1).await;
    for (reader, via) in [(&reader_a, leader), (&reader_b, b)] {
        let body = json!({"lease_id": reader["lease_id"], "token": reader["token"]});
        let (status, answer) = cluster.post(via, "/v1/locks/rw:release", body).await;
        assert_eq!(status, 200, "{answer}");
    }
    let (status, granted) = writer.await.unwrap();
    assert_eq!(status, 200, "{granted}");
    assert_eq!(granted["mode"], "exclusive", "{granted}");
    assert!(token(&granted) > token(&reader_a).max(token(&reader_b)));

    // A semaphore of 2: a request for 1 waits behind 2 permits out, and is
    // granted when they come back; another limit is refused on any node.
    let path = "/v1/semaphores/pool:acquire";
    let (status, both) = cluster
        .post(a, path, json!({"limit": 2, "permits": 2, "ttl_ms": 10_000}))
        .await;
    assert_eq!(status, 200, "{both}");
    assert_eq!(both["permits"], 2);
    let one = cluster.spawn_post(
        b,
        path,
        json!({"limit": 2, "ttl_ms": 10_000, "wait_ms": 20_000}),
    );
    wait_for_waiters(&cluster, a, "/v1/semaphores/pool", 1).await;
    let (status, mismatch) = cluster.post(b, path, json!({"limit": 3})).await;
    assert_eq!(
        (status, mismatch["code"].as_str()),
        (409, Some("limit_mismatch"))
    );
    let body = json!({"lease_id": both["lease_id"], "token": both["token"]});
    let (status, answer) = cluster
        .post(leader, "/v1/semaphores/pool:release", body)
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, granted) = one.await.unwrap();
    assert_eq!(status, 200, "{granted}");
    assert!(token(&granted) > token(&both));
    let (_, pool) = cluster.get(leader, "/v1/semaphores/pool").await;
    assert_eq!(
        (pool["in_use"].as_u64(), pool["limit"].as_u64()),
        (Some(1), Some(2)),
        "{pool}"
    );

    // {x, y} held through one follower; {y, x} waits through the other and is
    // granted both, each with its own token, when the first lease is revoked.
    let (status, first) = cluster
        .post(
            a,
            "/v1/locks:acquire",
            json!({"locks": [{"name": "x"}, {"name": "y"}], "ttl_ms": 10_000}),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    let second = cluster.spawn_post(
        b,
        "/v1/locks:acquire",
        json!({"locks": [{"name": "y"}, {"name": "x"}], "ttl_ms": 10_000, "wait_ms": 20_000}),
    );
    wait_for_waiters(&cluster, leader, "/v1/locks/x", 1).await;
    let lease = first["lease_id"].as_str().unwrap();
    let (status, revoked) = cluster
        .call(
            leader,
            reqwest::Method::DELETE,
            &format!("/v1/leases/{lease}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{revoked}");
    let (status, granted) = second.await.unwrap();
    assert_eq!(status, 200, "{granted}");
    let names: Vec<&str> = granted["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["y", "x"], "in the order asked: {granted}");
    let first_tokens: Vec<u64> = first["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(token)
        .collect();
    for lock in granted["locks"].as_array().unwrap() {
        assert!(
            token(lock) > first_tokens.iter().copied().max().unwrap(),
            "{granted}"
        );
        let (_, info) = cluster
            .get(a, &format!("/v1/locks/{}", lock["name"].as_str().unwrap()))
            .await;
        assert_eq!(info["token"], lock["token"], "{info}");
    }
}
