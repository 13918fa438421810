//! Watch streams and election observe, end to end in process: a real node
//! behind the real routes, the SSE body read frame by frame.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Service, ServiceResponse};
use actix_web::test::{self, TestRequest};
use actix_web::Error;
use baton_raft::WatchConfig;
use serde_json::{json, Value};

use crate::support::{self, app, get, lease, post, send, start_node, start_node_with, wait_for};

/// A stream that makes no progress for this long is a hang, not slowness: the
/// guard only turns a stuck test into a failure, it measures nothing.
const STALL_GUARD: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq)]
struct SseEvent {
    id: u64,
    event: String,
    data: Value,
}

struct Sse {
    body: Pin<Box<BoxBody>>,
    buffer: Vec<u8>,
    revision: u64,
}

impl Sse {
    /// The next frame; `None` once the server ended the stream.
    async fn next(&mut self) -> Option<SseEvent> {
        let read = async {
            loop {
                if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                    let frame: Vec<u8> = self.buffer.drain(..end + 2).collect();
                    return Some(parse_frame(&String::from_utf8(frame).unwrap()));
                }
                let chunk = std::future::poll_fn(|cx| self.body.as_mut().poll_next(cx)).await;
                match chunk {
                    None => {
                        assert!(self.buffer.is_empty(), "partial frame at the end");
                        return None;
                    }
                    Some(chunk) => self.buffer.extend_from_slice(&chunk.unwrap()),
                }
            }
        };
        tokio::time::timeout(STALL_GUARD, read)
            .await
            .expect("the stream stalled")
    }

    /// The next change event (bookmarks skipped).
    async fn next_change(&mut self) -> Option<SseEvent> {
        loop {
            let event = self.next().await?;
            if event.event != "bookmark" {
                return Some(event);
            }
        }
    }

    /// Change events until one with `id >= until` (bookmarks skipped).
    async fn changes_until(&mut self, until: u64) -> Vec<SseEvent> {
        let mut seen = Vec::new();
        while seen.last().is_none_or(|e: &SseEvent| e.id < until) {
            let event = self.next().await.expect("stream ended early");
            if event.event == "bookmark" {
                if event.id >= until {
                    break;
                }
                continue;
            }
            seen.push(event);
        }
        seen
    }
}

fn parse_frame(text: &str) -> SseEvent {
    let mut event = SseEvent {
        id: 0,
        event: String::new(),
        data: Value::Null,
    };
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (field, value) = line.split_once(": ").expect("field: value");
        match field {
            "id" => event.id = value.parse().unwrap(),
            "event" => event.event = value.to_owned(),
            "data" => event.data = serde_json::from_str(value).unwrap(),
            other => panic!("unexpected field {other} in {text:?}"),
        }
    }
    event
}

async fn open<S>(app: &S, request: TestRequest) -> Result<Sse, support::HttpReply>
where
    S: Service<actix_http::Request, Response = ServiceResponse, Error = Error>,
{
    let response = test::call_service(app, request.to_request()).await;
    if response.status() != 200 {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = test::read_body(response).await;
        return Err(support::HttpReply {
            status,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            headers,
        });
    }
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    let revision = response
        .headers()
        .get("baton-revision")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    Ok(Sse {
        body: Box::pin(response.into_body()),
        buffer: Vec::new(),
        revision,
    })
}

async fn watch<S>(app: &S, uri: &str) -> Sse
where
    S: Service<actix_http::Request, Response = ServiceResponse, Error = Error>,
{
    match open(app, TestRequest::get().uri(uri)).await {
        Ok(sse) => sse,
        Err(reply) => panic!("{uri}: {} {:?}", reply.status, reply.body),
    }
}

async fn revision<S>(app: &S) -> u64
where
    S: Service<actix_http::Request, Response = ServiceResponse, Error = Error>,
{
    get(app, "/healthz")
        .await
        .header("baton-revision")
        .unwrap()
        .parse()
        .unwrap()
}

fn small(history: usize, max_lag: u64) -> WatchConfig {
    WatchConfig {
        history,
        max_lag,
        // Filtered streams learn they are caught up from bookmarks.
        bookmark_interval: Duration::from_millis(20),
        ..WatchConfig::default()
    }
}

/// A mixed workload touching every kind; returns the lease ids it created.
async fn workload<S>(app: &S) -> Vec<String>
where
    S: Service<actix_http::Request, Response = ServiceResponse, Error = Error>,
{
    let l = lease(app, 5000).await;
    let a = post(app, "/v1/locks/a:acquire", json!({"lease_id": l})).await;
    assert_eq!(a.status, 200);
    let b = post(app, "/v1/locks/team/b:acquire", json!({"holder": "solo"})).await;
    assert_eq!(b.status, 200);
    let b_lease = b.body["lease_id"].as_str().unwrap().to_owned();
    let name = send(
        app,
        TestRequest::put()
            .uri("/v1/names/svc/x")
            .set_json(json!({"lease_id": l, "value": {"addr": "10.0.0.1"}})),
    )
    .await;
    assert_eq!(name.status, 201);
    let elected = post(
        app,
        "/v1/elections/e:campaign",
        json!({"lease_id": l, "candidate": "c1", "value": 1}),
    )
    .await;
    assert_eq!(elected.status, 200);
    let token = elected.body["token"].as_u64().unwrap();
    let proclaimed = post(
        app,
        "/v1/elections/e:proclaim",
        json!({"lease_id": l, "token": token, "value": 2}),
    )
    .await;
    assert_eq!(proclaimed.status, 200);
    let a_token = a.body["token"].as_u64().unwrap();
    let released = post(
        app,
        "/v1/locks/a:release",
        json!({"lease_id": l, "token": a_token}),
    )
    .await;
    assert_eq!(released.status, 200);
    let resigned = post(
        app,
        "/v1/elections/e:resign",
        json!({"lease_id": l, "token": token}),
    )
    .await;
    assert_eq!(resigned.status, 200);
    let revoked = send(app, TestRequest::delete().uri(&format!("/v1/leases/{l}"))).await;
    assert_eq!(revoked.status, 200);
    let released = post(
        app,
        "/v1/locks/team/b:release",
        json!({"lease_id": b_lease, "token": b.body["token"]}),
    )
    .await;
    assert_eq!(released.status, 200);
    vec![l, b_lease]
}

#[actix_web::test]
async fn events_arrive_in_revision_order_and_match_the_workload() {
    let node = start_node_with(small(100_000, 50_000)).await;
    let app = app(&node).await;
    let mut stream = watch(&app, "/v1/watch").await;
    let first = stream.next().await.unwrap();
    assert_eq!(first.event, "bookmark");
    assert_eq!(first.id, stream.revision);

    let leases = workload(&app).await;
    let head = revision(&app).await;
    let seen = stream.changes_until(head).await;

    // Every revision is one state change and every change is one event.
    let ids: Vec<u64> = seen.iter().map(|e| e.id).collect();
    assert_eq!(ids, (stream.revision + 1..=head).collect::<Vec<_>>());
    let names: Vec<&str> = seen.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        names,
        [
            "lease.created",
            "lock.acquired",
            "lease.created",
            "lock.acquired",
            "name.registered",
            "election.elected",
            "election.proclaimed",
            "lock.released",
            "election.resigned",
            // The core ends the lease first, then what hung on it.
            "lease.revoked",
            "name.revoked",
            "lock.released",
            "lease.revoked",
        ]
    );
    assert_eq!(seen[1].data["name"], "a");
    assert_eq!(seen[1].data["token"].as_u64(), Some(seen[1].id));
    assert_eq!(seen[3].data["name"], "team/b");
    assert_eq!(seen[3].data["holder"], "solo");
    assert_eq!(seen[4].data["value"], json!({"addr": "10.0.0.1"}));
    assert_eq!(seen[6].data["value"], 2);
    for event in &seen {
        assert_eq!(event.data["revision"].as_u64(), Some(event.id));
        let text = event.data.to_string();
        for lease_id in &leases {
            assert!(!text.contains(lease_id.as_str()), "{text}");
        }
        assert!(!text.contains("lease_id"), "{text}");
    }

    // Filters: kinds and prefix.
    let mut locks = watch(
        &app,
        &format!(
            "/v1/watch?kinds=lock&prefix=team/&since={}",
            stream.revision
        ),
    )
    .await;
    let only = locks.changes_until(head).await;
    let only: Vec<(&str, &str)> = only
        .iter()
        .map(|e| (e.event.as_str(), e.data["name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        only,
        [("lock.acquired", "team/b"), ("lock.released", "team/b")]
    );
    let bad = open(&app, TestRequest::get().uri("/v1/watch?kinds=lock,bogus")).await;
    assert_eq!(bad.err().map(|r| r.status), Some(400));
}

#[actix_web::test]
async fn resuming_at_any_revision_yields_exactly_the_missing_events() {
    let node = start_node().await;
    let app = app(&node).await;
    let start = revision(&app).await;
    for _ in 0..3 {
        workload(&app).await;
    }
    let head = revision(&app).await;
    let all = watch(&app, &format!("/v1/watch?since={start}"))
        .await
        .changes_until(head)
        .await;
    assert_eq!(all.len() as u64, head - start);

    let random = RandomState::new();
    for round in 0..8u64 {
        let at = start + random.hash_one(round) % (head - start);
        // Half by `since`, half by `Last-Event-ID` (which wins over `since`).
        let request = if round % 2 == 0 {
            TestRequest::get().uri(&format!("/v1/watch?since={at}"))
        } else {
            TestRequest::get()
                .uri(&format!("/v1/watch?since={start}"))
                .insert_header(("Last-Event-ID", at.to_string()))
        };
        let mut resumed = open(&app, request).await.ok().unwrap();
        let rest = resumed.changes_until(head).await;
        let expected: Vec<SseEvent> = all.iter().filter(|e| e.id > at).cloned().collect();
        assert_eq!(rest, expected, "resumed at {at}");
    }

    // Disconnect mid-stream, then resume from the last id received.
    let mut first = watch(&app, &format!("/v1/watch?since={start}")).await;
    let cut = 1 + (random.hash_one("cut") % (all.len() as u64 - 1)) as usize;
    let mut got = Vec::new();
    while got.len() < cut {
        got.push(first.next_change().await.unwrap());
    }
    drop(first);
    let last = got.last().unwrap().id;
    let mut second = open(
        &app,
        TestRequest::get()
            .uri("/v1/watch")
            .insert_header(("Last-Event-ID", last.to_string())),
    )
    .await
    .ok()
    .unwrap();
    got.extend(second.changes_until(head).await);
    assert_eq!(got, all);
}

#[actix_web::test]
async fn a_since_older_than_the_ring_answers_410() {
    let node = start_node_with(small(8, 4)).await;
    let app = app(&node).await;
    let start = revision(&app).await;
    for _ in 0..2 {
        workload(&app).await;
    }
    let head = revision(&app).await;
    assert_eq!(head - start, 26);
    let gone = open(
        &app,
        TestRequest::get().uri(&format!("/v1/watch?since={start}")),
    )
    .await
    .err()
    .unwrap();
    assert_eq!((gone.status, gone.code()), (410, "revision_compacted"));
    assert_eq!(
        gone.header("content-type").as_deref(),
        Some("application/problem+json")
    );
    let oldest = gone.body["oldest_revision"].as_u64().unwrap();
    assert_eq!(oldest, head - 8);
    // The oldest retained revision still works, and yields the ring.
    let mut kept = watch(&app, &format!("/v1/watch?since={oldest}")).await;
    assert_eq!(kept.changes_until(head).await.len(), 8);
    // A stream the ring rolls past ends with a resync telling it to re-list.
    let mut behind = watch(&app, &format!("/v1/watch?since={oldest}")).await;
    workload(&app).await;
    let last = behind.next().await.unwrap();
    assert_eq!(last.event, "resync");
    assert_eq!(last.data["reason"], "compacted");
    assert_eq!(last.id, oldest);
    assert!(behind.next().await.is_none());
}

#[actix_web::test]
async fn bookmarks_arrive_and_carry_the_latest_revision() {
    let node = start_node_with(WatchConfig {
        bookmark_interval: Duration::from_millis(50),
        ..WatchConfig::default()
    })
    .await;
    let app = app(&node).await;
    // A filter that matches nothing: only bookmarks can arrive.
    let mut quiet = watch(&app, "/v1/watch?prefix=nothing-here/").await;
    let first = quiet.next().await.unwrap();
    assert_eq!(
        (first.event.as_str(), first.id),
        ("bookmark", quiet.revision)
    );
    workload(&app).await;
    let head = revision(&app).await;
    loop {
        let bookmark = quiet.next().await.unwrap();
        assert_eq!(bookmark.event, "bookmark");
        assert_eq!(bookmark.data["revision"].as_u64(), Some(bookmark.id));
        if bookmark.id >= head {
            break;
        }
    }
    // Per-stream interval, bounded by the server's.
    let bad = open(&app, TestRequest::get().uri("/v1/watch?bookmark_ms=60000")).await;
    assert_eq!(
        bad.err().map(|r| r.code().to_owned()).as_deref(),
        Some("invalid_query")
    );
    let mut asked = watch(&app, "/v1/watch?bookmark_ms=50&kinds=name").await;
    for _ in 0..3 {
        assert_eq!(asked.next().await.unwrap().event, "bookmark");
    }
}

#[actix_web::test]
async fn observe_reports_every_leader_change() {
    let node = start_node().await;
    let app = Rc::new(app(&node).await);
    let mut observe = watch(&*app, "/v1/elections/primary:observe").await;
    let campaign = |lease: String, candidate: &'static str, wait_ms: u64| {
        let app = app.clone();
        async move {
            post(
                &*app,
                "/v1/elections/primary:campaign",
                json!({"lease_id": lease, "candidate": candidate, "value": candidate,
                       "wait_ms": wait_ms}),
            )
            .await
        }
    };

    // a: elected, proclaims, resigns.
    let a = lease(&*app, 5000).await;
    let token = campaign(a.clone(), "a", 0).await.body["token"]
        .as_u64()
        .unwrap();
    post(
        &*app,
        "/v1/elections/primary:proclaim",
        json!({"lease_id": a, "token": token, "value": "a2"}),
    )
    .await;
    // Noise that must not show up: another election, a lock.
    post(
        &*app,
        "/v1/elections/other:campaign",
        json!({"lease_id": a, "candidate": "x", "value": 0}),
    )
    .await;
    post(&*app, "/v1/locks/primary:acquire", json!({"lease_id": a})).await;
    post(
        &*app,
        "/v1/elections/primary:resign",
        json!({"lease_id": a, "token": token}),
    )
    .await;
    // b: elected on a short lease that is not kept alive, so it expires.
    let b = post(&*app, "/v1/leases", json!({"ttl_ms": 300})).await.body["lease_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(campaign(b, "b", 0).await.status, 200);
    let mut changes = Vec::new();
    while changes.len() < 5 {
        changes.push(observe.next_change().await.unwrap());
    }
    // c: elected; d queues behind it and takes over when c resigns; d's lease
    // is then revoked.
    let c = lease(&*app, 5000).await;
    let c_token = campaign(c.clone(), "c", 0).await.body["token"]
        .as_u64()
        .unwrap();
    let d = lease(&*app, 5000).await;
    let queued = actix_web::rt::spawn(campaign(d.clone(), "d", 20_000));
    wait_for(|| async { get(&*app, "/v1/elections/primary").await.body["candidates"] == 1 }).await;
    post(
        &*app,
        "/v1/elections/primary:resign",
        json!({"lease_id": c, "token": c_token}),
    )
    .await;
    assert_eq!(queued.await.unwrap().status, 200);
    send(&*app, TestRequest::delete().uri(&format!("/v1/leases/{d}"))).await;
    while changes.len() < 9 {
        changes.push(observe.next_change().await.unwrap());
    }
    let summary: Vec<(&str, Value)> = changes
        .iter()
        .map(|e| {
            (
                e.event.as_str(),
                e.data.get("candidate").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("election.elected", json!("a")),
            ("election.proclaimed", Value::Null),
            ("election.resigned", Value::Null),
            ("election.elected", json!("b")),
            ("election.expired", Value::Null),
            ("election.elected", json!("c")),
            ("election.resigned", Value::Null),
            ("election.elected", json!("d")),
            ("election.revoked", Value::Null),
        ]
    );
    assert!(changes.windows(2).all(|w| w[0].id < w[1].id));
    assert!(changes.iter().all(|e| e.data["name"] == "primary"));
    assert_eq!(changes[1].data["value"], "a2");
}

#[actix_web::test]
async fn a_stuck_consumer_neither_stops_writers_nor_other_watchers_and_gets_resync() {
    let node = start_node_with(small(4096, 16)).await;
    let app = app(&node).await;
    let mut stuck = watch(&app, "/v1/watch").await;
    // It reads its first bookmark (so it is live), then never reads again.
    assert_eq!(stuck.next().await.unwrap().event, "bookmark");
    let mut reader = watch(&app, "/v1/watch?kinds=lock").await;
    let start = stuck.revision;

    const CYCLES: usize = 100;
    let mut completed = 0;
    let mut acquired_seen = 0;
    for _ in 0..CYCLES {
        let grant = post(&app, "/v1/locks/hot:acquire", json!({"ttl_ms": 5000})).await;
        assert_eq!(grant.status, 200, "{:?}", grant.body);
        let released = post(
            &app,
            "/v1/locks/hot:release",
            json!({"lease_id": grant.body["lease_id"], "token": grant.body["token"]}),
        )
        .await;
        assert_eq!(released.status, 200);
        completed += 1;
        // The other watcher keeps up, cycle by cycle.
        let seen = reader.changes_until(revision(&app).await).await;
        acquired_seen += seen.iter().filter(|e| e.event == "lock.acquired").count();
        assert!(seen.iter().all(|e| e.event != "resync"));
    }
    assert_eq!((completed, acquired_seen), (CYCLES, CYCLES));

    // The stuck one, when it finally reads, is told to resume from where it was.
    let last = stuck.next().await.unwrap();
    assert_eq!(
        (last.event.as_str(), last.data["reason"].as_str(), last.id),
        ("resync", Some("lagged"), start)
    );
    assert!(stuck.next().await.is_none());
    // Resuming from there loses nothing.
    let head = revision(&app).await;
    let mut resumed = open(
        &app,
        TestRequest::get()
            .uri("/v1/watch?kinds=lock")
            .insert_header(("Last-Event-ID", last.id.to_string())),
    )
    .await
    .ok()
    .unwrap();
    let rest = resumed.changes_until(head).await;
    assert_eq!(
        rest.iter().filter(|e| e.event == "lock.acquired").count(),
        CYCLES
    );
}

#[actix_web::test]
async fn watchers_are_limited_per_client_and_in_total() {
    let node = start_node_with(WatchConfig {
        max_watchers: 3,
        max_watchers_per_principal: 2,
        ..WatchConfig::default()
    })
    .await;
    let app = app(&node).await;
    let from = |ip: &str| {
        TestRequest::get()
            .uri("/v1/watch")
            .peer_addr(format!("{ip}:40000").parse().unwrap())
    };
    let one = open(&app, from("10.0.0.1")).await.ok().unwrap();
    let _two = open(&app, from("10.0.0.1")).await.ok().unwrap();
    let refused = open(&app, from("10.0.0.1")).await.err().unwrap();
    assert_eq!((refused.status, refused.code()), (429, "quota_exceeded"));
    let _three = open(&app, from("10.0.0.2")).await.ok().unwrap();
    let refused = open(&app, from("10.0.0.3")).await.err().unwrap();
    assert_eq!((refused.status, refused.code()), (429, "quota_exceeded"));
    drop(one);
    assert!(open(&app, from("10.0.0.3")).await.is_ok());
}

#[actix_web::test]
async fn streams_end_when_the_server_stops() {
    let node = start_node().await;
    let app = app(&node).await;
    let mut stream = watch(&app, "/v1/watch").await;
    assert_eq!(stream.next().await.unwrap().event, "bookmark");
    node.node.watch_hub().close();
    let last = stream.next().await.unwrap();
    assert_eq!(
        (last.event.as_str(), last.data["reason"].as_str()),
        ("resync", Some("shutdown"))
    );
    assert!(stream.next().await.is_none());
    let refused = open(&app, TestRequest::get().uri("/v1/watch"))
        .await
        .err()
        .unwrap();
    assert_eq!((refused.status, refused.code()), (503, "unavailable"));
}

#[actix_web::test]
async fn a_principal_watches_only_names_under_its_watch_prefixes() {
    use crate::support::{app_with_auth, auth_file, bearer, send, ADMIN_TOKEN, BILLING_TOKEN};
    let node = start_node().await;
    let (app, _, _) = app_with_auth(&node, &auth_file()).await;
    let stream = |token: &str| open(&app, bearer(TestRequest::get().uri("/v1/watch"), token));
    let mut billing = stream(BILLING_TOKEN)
        .await
        .unwrap_or_else(|r| panic!("{} {:?}", r.status, r.body));
    let mut admin = stream(ADMIN_TOKEN)
        .await
        .unwrap_or_else(|r| panic!("{} {:?}", r.status, r.body));
    for name in ["payroll/run", "billing/nightly", "ops/x"] {
        let acquire = TestRequest::post().uri(&format!("/v1/locks/{name}:acquire"));
        let reply = send(&app, bearer(acquire, ADMIN_TOKEN)).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
    }
    let last = send(
        &app,
        bearer(TestRequest::get().uri("/v1/locks/ops/x"), ADMIN_TOKEN),
    )
    .await;
    let until = last.body["token"].as_u64().unwrap();
    let seen = |events: Vec<SseEvent>| -> Vec<String> {
        events
            .iter()
            .map(|e| format!("{} {}", e.event, e.data["name"].as_str().unwrap_or("-")))
            .collect()
    };
    // Each acquire without a lease creates one (a lease event, no name): billing
    // sees neither those nor other principals' names.
    let billing_saw = seen(billing.changes_until(until).await);
    assert_eq!(billing_saw, ["lock.acquired billing/nightly"]);
    let admin_saw = seen(admin.changes_until(until).await);
    assert_eq!(
        admin_saw.iter().filter(|e| e.starts_with("lock.")).count(),
        3,
        "{admin_saw:?}"
    );
    assert!(admin_saw.iter().any(|e| e.starts_with("lease.created")));
}

#[actix_web::test]
async fn a_reload_that_revokes_a_token_ends_its_streams_and_only_those() {
    use crate::support::{app_with_auth, auth_file, bearer, send, ADMIN_TOKEN, BILLING_TOKEN};
    let node = start_node().await;
    let (app, auth, path) = app_with_auth(&node, &auth_file()).await;
    let stream = |token: &str| open(&app, bearer(TestRequest::get().uri("/v1/watch"), token));
    let mut billing = stream(BILLING_TOKEN)
        .await
        .unwrap_or_else(|r| panic!("{} {:?}", r.status, r.body));
    let mut admin = stream(ADMIN_TOKEN)
        .await
        .unwrap_or_else(|r| panic!("{} {:?}", r.status, r.body));
    let acquire = |name: &str| {
        bearer(
            TestRequest::post().uri(&format!("/v1/locks/{name}:acquire")),
            ADMIN_TOKEN,
        )
    };

    // A reload that leaves billing's token and rights alone keeps its stream.
    let widened = auth_file().replace("locks: [\"payroll/\",", "locks: [\"payroll/\", \"extra/\",");
    assert_ne!(widened, auth_file());
    std::fs::write(&path, &widened).unwrap();
    assert!(auth.reload().unwrap());
    let granted = send(&app, acquire("billing/one")).await;
    assert_eq!(granted.status, 200, "{:?}", granted.body);
    let token = granted.body["token"].as_u64().unwrap();
    let event = billing
        .next_change()
        .await
        .expect("billing's stream goes on");
    assert_eq!(
        (event.event.as_str(), event.id),
        ("lock.acquired", token),
        "{event:?}"
    );

    // Billing's token is revoked: its stream ends with resync/unauthorized,
    // resumable after what it was sent; the admin's stream goes on.
    let revoked = widened.replace(
        &baton_api::auth::hash_token(BILLING_TOKEN),
        &baton_api::auth::hash_token("a-new-billing-token-0123456789"),
    );
    assert_ne!(revoked, widened);
    std::fs::write(&path, &revoked).unwrap();
    assert!(auth.reload().unwrap());
    let last = billing.next_change().await.expect("a final resync");
    assert_eq!(
        (last.event.as_str(), last.data["reason"].as_str()),
        ("resync", Some("unauthorized")),
        "{last:?}"
    );
    assert!(last.id >= token);
    assert!(billing.next().await.is_none(), "the stream is closed");
    let refused = stream(BILLING_TOKEN).await.err().unwrap();
    assert_eq!((refused.status, refused.code()), (401, "unauthenticated"));

    let granted = send(&app, acquire("billing/two")).await;
    assert_eq!(granted.status, 200, "{:?}", granted.body);
    let token = granted.body["token"].as_u64().unwrap();
    let seen = admin.changes_until(token).await;
    assert!(
        seen.iter()
            .any(|e| e.event == "lock.acquired" && e.data["name"] == "billing/two"),
        "{seen:?}"
    );
}

#[actix_web::test]
async fn shared_grants_and_semaphores_are_watched() {
    let node = start_node().await;
    let app = app(&node).await;
    let since = revision(&app).await;
    let mut semaphores = watch(&app, &format!("/v1/watch?kinds=semaphore&since={since}")).await;
    let mut locks = watch(&app, &format!("/v1/watch?kinds=lock&since={since}")).await;
    let a = lease(&app, 5000).await;
    let shared = post(
        &app,
        "/v1/locks/docs:acquire",
        json!({"lease_id": a, "mode": "shared"}),
    )
    .await;
    let permits = post(
        &app,
        "/v1/semaphores/pool:acquire",
        json!({"lease_id": a, "limit": 4, "permits": 3}),
    )
    .await;
    let token = permits.body["token"].as_u64().unwrap();
    post(
        &app,
        "/v1/semaphores/pool:release",
        json!({"lease_id": a, "token": token}),
    )
    .await;

    let acquired = locks.next_change().await.unwrap();
    assert_eq!(acquired.event, "lock.acquired");
    assert_eq!(acquired.data["mode"], "shared");
    assert_eq!(acquired.data["token"], shared.body["token"]);
    let got = semaphores.next_change().await.unwrap();
    assert_eq!(got.event, "semaphore.acquired");
    assert_eq!(
        (
            got.data["name"].clone(),
            got.data["permits"].clone(),
            got.data["limit"].clone()
        ),
        (json!("pool"), json!(3), json!(4))
    );
    assert_eq!(got.id, token);
    assert!(got.data.get("lease_id").is_none(), "never the lease id");
    let back = semaphores.next_change().await.unwrap();
    assert_eq!(back.event, "semaphore.released");
    assert_eq!(
        (back.data["token"].as_u64(), back.data["permits"].clone()),
        (Some(token), json!(3))
    );
}
