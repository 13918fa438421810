//! The HTTP API, end to end in process: every endpoint's success and error paths.

mod auth;

use std::time::Duration;

use actix_web::test::TestRequest;
use serde_json::json;

use crate::support::{self, app, get, lease, post, send, start_node, wait_for};

#[actix_web::test]
async fn leases_are_created_kept_alive_inspected_and_revoked() {
    let node = start_node().await;
    let app = app(&node).await;
    let reply = post(
        &app,
        "/v1/leases",
        json!({"ttl_ms": 3000, "holder": "pod-a"}),
    )
    .await;
    assert_eq!(reply.status, 201);
    let lease_id = reply.body["lease_id"].as_str().unwrap().to_owned();
    assert_eq!(lease_id.len(), 26);
    assert_eq!(reply.body["ttl_ms"], 3000);
    assert_eq!(reply.body["holder"], "pod-a");
    assert!(reply.body["revision"].as_u64().unwrap() > 0);
    assert!(reply.header("baton-revision").is_some());

    // An empty body takes the defaults.
    let reply = send(&app, TestRequest::post().uri("/v1/leases")).await;
    assert_eq!(
        (reply.status, reply.body["ttl_ms"].as_u64()),
        (201, Some(5000))
    );

    let reply = post(
        &app,
        &format!("/v1/leases/{lease_id}:keepalive"),
        json!(null),
    )
    .await;
    assert_eq!(
        (reply.status, reply.body["ttl_ms"].as_u64()),
        (200, Some(3000))
    );

    post(&app, "/v1/locks/a:acquire", json!({"lease_id": lease_id})).await;
    put_name(
        &app,
        "svc/a",
        json!({"lease_id": lease_id, "value": {"addr": "10.0.0.1"}}),
    )
    .await;
    let reply = get(&app, &format!("/v1/leases/{lease_id}")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["locks"], json!(["a"]));
    assert_eq!(reply.body["names"], json!(["svc/a"]));
    let remaining = reply.body["remaining_ms"].as_u64().unwrap();
    assert!(remaining <= 3000 && remaining > 0, "{remaining}");

    let reply = send(
        &app,
        TestRequest::delete().uri(&format!("/v1/leases/{lease_id}")),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["revoked"], true);
    assert_eq!(reply.body["released"]["locks"], json!(["a"]));
    assert_eq!(reply.body["released"]["names"], json!(["svc/a"]));
    assert_eq!(get(&app, "/v1/locks/a").await.body["held"], false);

    for reply in [
        get(&app, &format!("/v1/leases/{lease_id}")).await,
        post(
            &app,
            &format!("/v1/leases/{lease_id}:keepalive"),
            json!(null),
        )
        .await,
        send(
            &app,
            TestRequest::delete().uri(&format!("/v1/leases/{lease_id}")),
        )
        .await,
        get(&app, "/v1/leases/not-a-lease-id").await,
    ] {
        assert_eq!(
            (reply.status, reply.code()),
            (404, "lease_not_found"),
            "{:?}",
            reply.body
        );
        assert_eq!(
            reply.header("content-type").as_deref(),
            Some("application/problem+json")
        );
    }
}

async fn put_name<S>(app: &S, name: &str, body: serde_json::Value) -> support::HttpReply
where
    S: actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
{
    send(
        app,
        TestRequest::put()
            .uri(&format!("/v1/names/{name}"))
            .set_json(body),
    )
    .await
}

#[actix_web::test]
async fn locks_grant_fencing_tokens_and_refuse_stale_holders() {
    let node = start_node().await;
    let app = app(&node).await;
    let (a, b) = (lease(&app, 5000).await, lease(&app, 5000).await);

    let first = post(
        &app,
        "/v1/locks/team-a/db/migrate:acquire",
        json!({"lease_id": a, "holder": "job-1"}),
    )
    .await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    let token = first.body["token"].as_u64().unwrap();
    assert_eq!(first.header("baton-fencing-token"), Some(token.to_string()));
    assert_eq!(first.body["name"], "team-a/db/migrate");
    assert_eq!(first.body["holder"], "job-1");
    assert_eq!(first.body["lease_id"], a.as_str());

    // The same lease again: the same grant. Percent-encoded '/' is the same name.
    let again = post(
        &app,
        "/v1/locks/team-a%2Fdb%2Fmigrate:acquire",
        json!({"lease_id": a}),
    )
    .await;
    assert_eq!(
        (again.status, again.body["token"].as_u64()),
        (200, Some(token))
    );

    let held = post(
        &app,
        "/v1/locks/team-a/db/migrate:acquire",
        json!({"lease_id": b}),
    )
    .await;
    assert_eq!((held.status, held.code()), (409, "lock_held"));
    assert_eq!(
        (held.body["holder"].as_str(), held.body["token"].as_u64()),
        (Some("job-1"), Some(token))
    );

    let info = get(&app, "/v1/locks/team-a/db/migrate").await;
    assert_eq!(info.body["held"], true);
    assert_eq!(info.body["token"].as_u64(), Some(token));
    assert_eq!(info.body["since_revision"].as_u64(), Some(token));
    assert_eq!(info.body["waiters"], 0);

    let renew = post(
        &app,
        "/v1/locks/team-a/db/migrate:renew",
        json!({"lease_id": a, "token": token}),
    )
    .await;
    assert_eq!(
        (
            renew.status,
            renew.body["token"].as_u64(),
            renew.body["ttl_ms"].as_u64()
        ),
        (200, Some(token), Some(5000))
    );
    let stale = post(
        &app,
        "/v1/locks/team-a/db/migrate:renew",
        json!({"lease_id": b, "token": token}),
    )
    .await;
    assert_eq!((stale.status, stale.code()), (409, "lock_lost"));

    let valid = post(
        &app,
        "/v1/locks/team-a/db/migrate:validate",
        json!({"token": token}),
    )
    .await;
    assert_eq!(
        (
            valid.body["valid"].as_bool(),
            valid.body["current_token"].as_u64()
        ),
        (Some(true), Some(token))
    );

    let release = post(
        &app,
        "/v1/locks/team-a/db/migrate:release",
        json!({"lease_id": a, "token": token}),
    )
    .await;
    assert_eq!(
        (release.status, release.body["released"].as_bool()),
        (200, Some(true))
    );
    let twice = post(
        &app,
        "/v1/locks/team-a/db/migrate:release",
        json!({"lease_id": a, "token": token}),
    )
    .await;
    assert_eq!((twice.status, twice.code()), (409, "lock_lost"));
    let unknown = post(
        &app,
        "/v1/locks/x:release",
        json!({"lease_id": "aaaaaaaaaaaaaaaaaaaaaaaaaa", "token": 1}),
    )
    .await;
    assert_eq!((unknown.status, unknown.code()), (404, "lease_not_found"));

    let next = post(
        &app,
        "/v1/locks/team-a/db/migrate:acquire",
        json!({"lease_id": b}),
    )
    .await;
    let next_token = next.body["token"].as_u64().unwrap();
    assert!(next_token > token, "tokens strictly increase");
    let old = post(
        &app,
        "/v1/locks/team-a/db/migrate:validate",
        json!({"token": token}),
    )
    .await;
    assert_eq!(
        (
            old.body["valid"].as_bool(),
            old.body["current_token"].as_u64()
        ),
        (Some(false), Some(next_token))
    );
    // The stale holder's release does not touch the new grant.
    let stale_release = post(
        &app,
        "/v1/locks/team-a/db/migrate:release",
        json!({"lease_id": a, "token": token}),
    )
    .await;
    assert_eq!(stale_release.code(), "lock_lost");
    assert_eq!(
        get(&app, "/v1/locks/team-a/db/migrate").await.body["token"].as_u64(),
        Some(next_token)
    );
}

#[actix_web::test]
async fn acquire_without_a_lease_creates_one_for_the_lock_alone() {
    let node = start_node().await;
    let app = app(&node).await;
    let grant = post(
        &app,
        "/v1/locks/solo:acquire",
        json!({"ttl_ms": 2000, "holder": "cron"}),
    )
    .await;
    assert_eq!(grant.status, 200);
    let lease_id = grant.body["lease_id"].as_str().unwrap().to_owned();
    assert_eq!(grant.body["ttl_ms"], 2000);
    let token = grant.body["token"].as_u64().unwrap();
    post(
        &app,
        "/v1/locks/solo:release",
        json!({"lease_id": lease_id, "token": token}),
    )
    .await;
    assert_eq!(
        get(&app, &format!("/v1/leases/{lease_id}")).await.status,
        404
    );
}

#[actix_web::test]
async fn waiters_are_granted_in_arrival_order_with_increasing_tokens() {
    let node = start_node().await;
    let app = std::rc::Rc::new(app(&node).await);
    let holder = lease(&*app, 5000).await;
    let first = post(&*app, "/v1/locks/q:acquire", json!({"lease_id": holder})).await;
    let mut token = first.body["token"].as_u64().unwrap();
    let waiters: Vec<String> = [lease(&*app, 5000).await, lease(&*app, 5000).await].into();
    let mut pending = Vec::new();
    for w in &waiters {
        let task_app = app.clone();
        let w = w.clone();
        let holder = format!("waiter-{}", pending.len());
        pending.push(actix_web::rt::spawn(async move {
            post(
                &*task_app,
                "/v1/locks/q:acquire",
                json!({"lease_id": w, "wait_ms": 20000, "holder": holder}),
            )
            .await
        }));
        // Let the first waiter be queued before the second arrives.
        wait_for(|| async {
            get(&*app, "/v1/locks/q").await.body["waiters"].as_u64() == Some(pending.len() as u64)
        })
        .await;
    }
    // Who waits, in line order.
    assert_eq!(
        get(&*app, "/v1/locks/q").await.body["queue"],
        json!(["waiter-0", "waiter-1"])
    );
    let mut current = holder;
    for (index, handle) in pending.into_iter().enumerate() {
        post(
            &*app,
            "/v1/locks/q:release",
            json!({"lease_id": current, "token": token}),
        )
        .await;
        let granted = handle.await.unwrap();
        assert_eq!(granted.status, 200, "{:?}", granted.body);
        assert_eq!(
            granted.body["lease_id"],
            waiters[index].as_str(),
            "FIFO order"
        );
        let new_token = granted.body["token"].as_u64().unwrap();
        assert!(new_token > token);
        token = new_token;
        current = waiters[index].clone();
    }
}

#[actix_web::test]
async fn a_waiter_that_times_out_leaves_the_queue() {
    let node = start_node().await;
    let app = app(&node).await;
    let (a, b) = (lease(&app, 5000).await, lease(&app, 5000).await);
    let grant = post(&app, "/v1/locks/t:acquire", json!({"lease_id": a})).await;
    let timed_out = post(
        &app,
        "/v1/locks/t:acquire",
        json!({"lease_id": b, "wait_ms": 200}),
    )
    .await;
    assert_eq!((timed_out.status, timed_out.code()), (409, "lock_held"));
    assert_eq!(timed_out.body["token"], grant.body["token"]);
    assert_eq!(get(&app, "/v1/locks/t").await.body["waiters"], 0);
    let lease_info = get(&app, &format!("/v1/leases/{b}")).await;
    assert_eq!(lease_info.body["locks"], json!([]));
}

#[actix_web::test]
async fn a_disconnected_waiter_leaves_the_queue() {
    let node = start_node().await;
    let app = app(&node).await;
    let (a, b) = (lease(&app, 5000).await, lease(&app, 5000).await);
    post(&app, "/v1/locks/d:acquire", json!({"lease_id": a})).await;
    let request = TestRequest::post()
        .uri("/v1/locks/d:acquire")
        .set_json(json!({"lease_id": b, "wait_ms": 30000}))
        .to_request();
    // The client goes away: the handler's future is dropped mid-wait.
    let call = actix_web::test::call_service(&app, request);
    let abandoned = actix_web::rt::time::timeout(Duration::from_millis(300), call).await;
    assert!(abandoned.is_err());
    wait_for(|| async { get(&app, "/v1/locks/d").await.body["waiters"] == 0 }).await;
}

#[actix_web::test]
async fn an_expired_lease_releases_its_lock_to_the_next_waiter() {
    let node = start_node().await;
    let app = std::rc::Rc::new(app(&node).await);
    let short = lease(&*app, 300).await;
    let long = lease(&*app, 10_000).await;
    let first = post(&*app, "/v1/locks/e:acquire", json!({"lease_id": short})).await;
    let waiter = {
        let app = app.clone();
        let long = long.clone();
        actix_web::rt::spawn(async move {
            post(
                &*app,
                "/v1/locks/e:acquire",
                json!({"lease_id": long, "wait_ms": 10000}),
            )
            .await
        })
    };
    let granted = waiter.await.unwrap();
    assert_eq!(granted.status, 200, "{:?}", granted.body);
    assert_eq!(granted.body["lease_id"], long.as_str());
    assert!(granted.body["token"].as_u64() > first.body["token"].as_u64());
    assert_eq!(get(&*app, &format!("/v1/leases/{short}")).await.status, 404);
}

#[actix_web::test]
async fn keepalives_keep_a_lease_past_several_ttls() {
    let node = start_node().await;
    let app = app(&node).await;
    let id = lease(&app, 300).await;
    let grant = post(&app, "/v1/locks/k:acquire", json!({"lease_id": id})).await;
    for _ in 0..10 {
        // The keepalive cadence is the point (a 300 ms TTL outlived): not a wait.
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
        let reply = post(&app, &format!("/v1/leases/{id}:keepalive"), json!(null)).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
    }
    assert_eq!(
        get(&app, "/v1/locks/k").await.body["token"],
        grant.body["token"]
    );
    // Stop: it expires.
    wait_for(|| async { get(&app, "/v1/locks/k").await.body["held"] == false }).await;
}

#[actix_web::test]
async fn an_idempotent_retry_returns_the_first_answer() {
    let node = start_node().await;
    let app = app(&node).await;
    let keyed = |key: &str, body: serde_json::Value| {
        TestRequest::post()
            .uri("/v1/locks/idem:acquire")
            .insert_header(("Idempotency-Key", key.to_owned()))
            .set_json(body)
    };
    let first = send(&app, keyed("k-1", json!({"ttl_ms": 5000}))).await;
    assert_eq!(first.status, 200);
    let retry = send(&app, keyed("k-1", json!({"ttl_ms": 5000}))).await;
    assert_eq!(retry.status, 200);
    assert_eq!(
        retry.body, first.body,
        "same answer, same lease, same token"
    );
    assert_eq!(retry.header("idempotent-replayed").as_deref(), Some("true"));
    let reused = send(&app, keyed("k-1", json!({"ttl_ms": 6000}))).await;
    assert_eq!(
        (reused.status, reused.code()),
        (422, "idempotency_key_reused")
    );
    let other = send(&app, keyed("k-2", json!({"ttl_ms": 5000}))).await;
    assert_eq!((other.status, other.code()), (409, "lock_held"));
    let bad = send(&app, keyed("", json!({}))).await;
    assert_eq!((bad.status, bad.code()), (400, "invalid_idempotency_key"));
}

#[actix_web::test]
async fn elections_elect_proclaim_and_hand_over() {
    let node = start_node().await;
    let app = std::rc::Rc::new(app(&node).await);
    let (a, b) = (lease(&*app, 5000).await, lease(&*app, 5000).await);
    let none = get(&*app, "/v1/elections/primary").await;
    assert_eq!((none.status, none.code()), (404, "no_leader"));
    let won = post(
        &*app,
        "/v1/elections/primary:campaign",
        json!({"lease_id": a, "candidate": "a", "value": {"addr": "a:1"}}),
    )
    .await;
    assert_eq!(won.status, 200, "{:?}", won.body);
    assert_eq!(
        (won.body["leader"].as_bool(), won.body["value"].clone()),
        (Some(true), json!({"addr": "a:1"}))
    );
    let token = won.body["token"].as_u64().unwrap();
    let lost = post(
        &*app,
        "/v1/elections/primary:campaign",
        json!({"lease_id": b, "candidate": "b", "value": 2}),
    )
    .await;
    assert_eq!(
        (lost.status, lost.code(), lost.body["leader"].as_str()),
        (409, "not_elected", Some("a"))
    );
    let proclaimed = post(
        &*app,
        "/v1/elections/primary:proclaim",
        json!({"lease_id": a, "token": token, "value": [1, 2]}),
    )
    .await;
    assert_eq!(
        (proclaimed.status, proclaimed.body["value"].clone()),
        (200, json!([1, 2]))
    );
    let info = get(&*app, "/v1/elections/primary").await;
    assert_eq!(info.body["leader"]["candidate"], "a");
    assert_eq!(info.body["leader"]["value"], json!([1, 2]));
    assert_eq!(info.body["leader"]["token"].as_u64(), Some(token));

    let waiting = {
        let app = app.clone();
        let b = b.clone();
        actix_web::rt::spawn(async move {
            post(
                &*app,
                "/v1/elections/primary:campaign",
                json!({"lease_id": b, "candidate": "b", "value": "b:1", "wait_ms": 10000}),
            )
            .await
        })
    };
    wait_for(|| async { get(&*app, "/v1/elections/primary").await.body["candidates"] == 1 }).await;
    let not_leader = post(
        &*app,
        "/v1/elections/primary:resign",
        json!({"lease_id": b, "token": token}),
    )
    .await;
    assert_eq!((not_leader.status, not_leader.code()), (409, "not_leader"));
    let resigned = post(
        &*app,
        "/v1/elections/primary:resign",
        json!({"lease_id": a, "token": token}),
    )
    .await;
    assert_eq!(
        (resigned.status, resigned.body["resigned"].as_bool()),
        (200, Some(true))
    );
    let elected = waiting.await.unwrap();
    assert_eq!(elected.status, 200);
    assert!(elected.body["token"].as_u64().unwrap() > token);
    assert_eq!(
        get(&*app, "/v1/elections/primary").await.body["leader"]["candidate"],
        "b"
    );
}

#[actix_web::test]
async fn names_register_once_cluster_wide() {
    let node = start_node().await;
    let app = app(&node).await;
    let (a, b) = (lease(&app, 5000).await, lease(&app, 5000).await);
    let created = put_name(
        &app,
        "svc/db",
        json!({"lease_id": a, "value": {"host": "db-0"}}),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let token = created.body["token"].as_u64().unwrap();
    let updated = put_name(
        &app,
        "svc/db",
        json!({"lease_id": a, "value": {"host": "db-1"}}),
    )
    .await;
    assert_eq!(
        (updated.status, updated.body["token"].as_u64()),
        (200, Some(token))
    );
    let taken = put_name(&app, "svc/db", json!({"lease_id": b, "value": 1})).await;
    assert_eq!(
        (taken.status, taken.code(), taken.body["token"].as_u64()),
        (409, "name_taken", Some(token))
    );
    let info = get(&app, "/v1/names/svc/db").await;
    assert_eq!(
        (info.body["value"].clone(), info.body["holder"].as_str()),
        (json!({"host": "db-1"}), Some("test"))
    );
    for name in ["svc/a", "svc/b", "svc/c"] {
        put_name(&app, name, json!({"lease_id": b, "value": null})).await;
    }
    let page = get(&app, "/v1/names?prefix=svc/&limit=2").await;
    assert_eq!(page.body["items"].as_array().unwrap().len(), 2);
    let next = page.body["next_page_token"].as_str().unwrap().to_owned();
    let rest = get(
        &app,
        &format!("/v1/names?prefix=svc/&limit=2&page_token={next}"),
    )
    .await;
    let names: Vec<_> = rest.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["svc/c", "svc/db"]);
    let not_owner = send(
        &app,
        TestRequest::delete()
            .uri("/v1/names/svc/db")
            .set_json(json!({"lease_id": b})),
    )
    .await;
    assert_eq!((not_owner.status, not_owner.code()), (409, "not_owner"));
    let gone = send(
        &app,
        TestRequest::delete()
            .uri("/v1/names/svc/db")
            .set_json(json!({"lease_id": a})),
    )
    .await;
    assert_eq!(
        (gone.status, gone.body["unregistered"].as_bool()),
        (200, Some(true))
    );
    let missing = get(&app, "/v1/names/svc/db").await;
    assert_eq!((missing.status, missing.code()), (404, "not_found"));
}

#[actix_web::test]
async fn lists_reads_and_cluster_status() {
    let node = start_node().await;
    let app = app(&node).await;
    let a = lease(&app, 5000).await;
    for name in ["x/1", "x/2", "y/1"] {
        post(
            &app,
            &format!("/v1/locks/{name}:acquire"),
            json!({"lease_id": a}),
        )
        .await;
    }
    let page = get(&app, "/v1/locks?prefix=x/").await;
    assert_eq!(page.body["items"].as_array().unwrap().len(), 2);
    assert!(page.body["next_page_token"].is_null());
    let revision: u64 = page.header("baton-revision").unwrap().parse().unwrap();
    let local = get(&app, "/v1/locks/x/1?consistency=local").await;
    assert_eq!(local.body["held"], true);
    let at = get(&app, &format!("/v1/locks/x/1?min_revision={revision}")).await;
    assert_eq!(at.status, 200);
    let future = get(
        &app,
        &format!("/v1/locks/x/1?min_revision={}", revision + 1000),
    )
    .await;
    assert_eq!(
        (future.status, future.code()),
        (504, "revision_not_reached")
    );
    let bad = get(&app, "/v1/locks/x/1?consistency=eventual").await;
    assert_eq!((bad.status, bad.code()), (400, "invalid_query"));
    // The id is committed by a background proposal right after start.
    wait_for(|| async { get(&app, "/v1/cluster").await.body["cluster_id"] != "" }).await;
    let cluster = get(&app, "/v1/cluster").await;
    let cluster_id = cluster.body["cluster_id"].as_str().unwrap();
    assert_eq!(cluster_id.len(), 32, "{cluster_id}");
    assert_eq!(cluster.body["node_id"], 1);
    assert_eq!(cluster.body["leader_id"], 1);
    assert_eq!(cluster.body["members"].as_array().unwrap().len(), 1);
    assert!(cluster.body["applied_revision"].as_u64().unwrap() >= revision);
    assert_eq!(get(&app, "/healthz").await.status, 200);
    assert_eq!(get(&app, "/readyz").await.status, 200);
    let metrics = get(&app, "/metrics").await;
    assert!(
        metrics
            .body
            .as_str()
            .unwrap()
            .contains("baton_locks_held 3"),
        "{:?}",
        metrics.body
    );
    let docs = get(&app, "/docs").await;
    assert!(docs.body.as_str().unwrap().contains("/openapi.json"));
    let ui = get(&app, "/ui").await;
    assert_eq!(ui.status, 200);
    assert!(ui.body.as_str().unwrap().contains("/v1/watch"));
    let spec = get(&app, "/openapi.json").await;
    assert!(spec.body["paths"]["/v1/locks/{name}:acquire"].is_object());
}

#[actix_web::test]
async fn force_release_is_disabled_without_auth_or_a_cluster_secret() {
    let node = start_node().await;
    let app = app(&node).await;
    post(&app, "/v1/locks/held:acquire", json!({"ttl_ms": 5000})).await;
    let reply = post(&app, "/v1/locks/held:revoke", json!({})).await;
    assert_eq!((reply.status, reply.code()), (403, "forbidden"));
    assert_eq!(get(&app, "/v1/locks/held").await.body["held"], true);
}

/// `--min-revision-wait-ms` bounds a `min_revision` read's wait: with a longer
/// bound, a read for a revision that a write makes well past the default 3 s
/// still answers 200; with a short one, a revision nobody writes answers 504.
#[actix_web::test]
async fn a_min_revision_read_waits_as_long_as_the_node_is_told() {
    let node = start_node().await;
    let patient = support::app_with(&node, waiting(&node, 60_000)).await;
    lease(&patient, 5000).await;
    let revision: u64 = get(&patient, "/v1/locks")
        .await
        .header("baton-revision")
        .unwrap()
        .parse()
        .unwrap();
    let next = format!("/v1/locks?min_revision={}", revision + 1);
    let read = get(&patient, &next);
    let write = async {
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        lease(&patient, 5000).await
    };
    let (read, _) = tokio::join!(read, write);
    assert_eq!(read.status, 200, "{:?}", read.body);

    let hasty = support::app_with(&node, waiting(&node, 50)).await;
    let far = get(
        &hasty,
        &format!("/v1/locks?min_revision={}", revision + 1_000),
    )
    .await;
    assert_eq!((far.status, far.code()), (504, "revision_not_reached"));
}

/// The test settings with this `min_revision` wait.
fn waiting(node: &support::TestNode, min_revision_wait_ms: u64) -> baton_api::ApiSettings {
    baton_api::ApiSettings {
        min_revision_wait_ms,
        ..support::state(node).settings
    }
}
