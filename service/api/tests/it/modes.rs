//! Shared locks, semaphores and multi-acquire through the HTTP API, in process
//! against a real node: every endpoint's success and refusal paths. Waits are
//! judged by what the server shows (`GET` of the lock or semaphore), never by time.

use std::rc::Rc;

use serde_json::{json, Value};

use crate::support::{app, get, lease, post, start_node, wait_for, HttpReply};

fn token(reply: &HttpReply) -> u64 {
    reply.body["token"]
        .as_u64()
        .unwrap_or_else(|| panic!("no token: {} {:?}", reply.status, reply.body))
}

#[actix_web::test]
async fn shared_holders_coexist_and_a_queued_writer_blocks_later_readers() {
    let node = start_node().await;
    let app = Rc::new(app(&node).await);
    let (a, b, c, d, e) = (
        lease(&*app, 5000).await,
        lease(&*app, 5000).await,
        lease(&*app, 5000).await,
        lease(&*app, 5000).await,
        lease(&*app, 5000).await,
    );
    let shared =
        |lease: &str, holder: &str| json!({"lease_id": lease, "mode": "shared", "holder": holder});
    let ra = post(&*app, "/v1/locks/cfg:acquire", shared(&a, "reader-a")).await;
    let rb = post(&*app, "/v1/locks/cfg:acquire", shared(&b, "reader-b")).await;
    assert_eq!(
        (ra.status, rb.status),
        (200, 200),
        "{:?} {:?}",
        ra.body,
        rb.body
    );
    assert_eq!(
        (ra.body["mode"].clone(), rb.body["mode"].clone()),
        (json!("shared"), json!("shared"))
    );
    assert!(token(&rb) > token(&ra), "each holder has its own token");
    assert_eq!(
        rb.header("baton-fencing-token"),
        Some(token(&rb).to_string())
    );
    let view = get(&*app, "/v1/locks/cfg").await.body;
    assert_eq!(view["mode"], "shared");
    assert_eq!(view["holders"].as_array().unwrap().len(), 2);
    assert_eq!(view["holders"][1]["holder"], "reader-b");
    assert_eq!(view["holders"][1]["token"].as_u64(), Some(token(&rb)));

    // A lease that holds it shared may not take it exclusively (no upgrades).
    let upgrade = post(&*app, "/v1/locks/cfg:acquire", json!({"lease_id": a})).await;
    assert_eq!((upgrade.status, upgrade.code()), (409, "lock_held"));
    // A retry of the shared acquire is the same grant.
    let again = post(&*app, "/v1/locks/cfg:acquire", shared(&a, "reader-a")).await;
    assert_eq!((again.status, token(&again)), (200, token(&ra)));

    // A writer waits; a later reader may not pass it.
    let writer = {
        let app = app.clone();
        let c = c.clone();
        actix_web::rt::spawn(async move {
            post(
                &*app,
                "/v1/locks/cfg:acquire",
                json!({"lease_id": c, "wait_ms": 20000, "holder": "writer-c"}),
            )
            .await
        })
    };
    wait_for(|| async { get(&*app, "/v1/locks/cfg").await.body["waiters"] == 1 }).await;
    let late = post(&*app, "/v1/locks/cfg:acquire", shared(&d, "reader-d")).await;
    assert_eq!((late.status, late.code()), (409, "lock_held"));
    let waiting_reader = {
        let app = app.clone();
        let e = e.clone();
        actix_web::rt::spawn(async move {
            let body =
                json!({"lease_id": e, "mode": "shared", "wait_ms": 20000, "holder": "reader-e"});
            post(&*app, "/v1/locks/cfg:acquire", body).await
        })
    };
    wait_for(|| async { get(&*app, "/v1/locks/cfg").await.body["waiters"] == 2 }).await;
    assert_eq!(
        get(&*app, "/v1/locks/cfg").await.body["queue"],
        json!(["writer-c", "reader-e"])
    );

    // Renew and validate work per holder.
    let renewed = post(
        &*app,
        "/v1/locks/cfg:renew",
        json!({"lease_id": a, "token": token(&ra)}),
    )
    .await;
    assert_eq!(renewed.status, 200, "{:?}", renewed.body);
    let valid = post(
        &*app,
        "/v1/locks/cfg:validate",
        json!({"token": token(&ra)}),
    )
    .await;
    assert_eq!(valid.body["valid"], true);

    // Both readers go: the writer holds alone, the later reader still waits.
    for (lease_id, reply) in [(&a, &ra), (&b, &rb)] {
        let released = post(
            &*app,
            "/v1/locks/cfg:release",
            json!({"lease_id": lease_id, "token": token(reply)}),
        )
        .await;
        assert_eq!(released.status, 200, "{:?}", released.body);
    }
    let wrote = writer.await.unwrap();
    assert_eq!(
        (wrote.status, wrote.body["mode"].clone()),
        (200, json!("exclusive"))
    );
    assert!(token(&wrote) > token(&rb));
    let view = get(&*app, "/v1/locks/cfg").await.body;
    assert_eq!(
        (view["mode"].clone(), view["waiters"].clone()),
        (json!("exclusive"), json!(1))
    );
    let stale = post(
        &*app,
        "/v1/locks/cfg:validate",
        json!({"token": token(&ra)}),
    )
    .await;
    assert_eq!(
        (
            stale.body["valid"].clone(),
            stale.body["current_token"].as_u64()
        ),
        (json!(false), Some(token(&wrote)))
    );

    // The writer goes: the reader holds.
    post(
        &*app,
        "/v1/locks/cfg:release",
        json!({"lease_id": c, "token": token(&wrote)}),
    )
    .await;
    let read = waiting_reader.await.unwrap();
    assert_eq!(
        (read.status, read.body["mode"].clone()),
        (200, json!("shared"))
    );
    assert!(token(&read) > token(&wrote));
}

#[actix_web::test]
async fn semaphores_hand_out_permits_in_line_without_overtaking() {
    let node = start_node().await;
    let app = Rc::new(app(&node).await);
    let (a, b, c, d) = (
        lease(&*app, 5000).await,
        lease(&*app, 5000).await,
        lease(&*app, 5000).await,
        lease(&*app, 5000).await,
    );
    let acquire = |lease: &str, permits: u32, wait_ms: u64| {
        json!({"lease_id": lease, "limit": 8, "permits": permits, "wait_ms": wait_ms,
               "holder": format!("worker-{permits}")})
    };
    let ga = post(&*app, "/v1/semaphores/farm:acquire", acquire(&a, 6, 0)).await;
    assert_eq!(ga.status, 200, "{:?}", ga.body);
    assert_eq!(
        (ga.body["permits"].clone(), ga.body["limit"].clone()),
        (json!(6), json!(8))
    );
    assert_eq!(
        ga.header("baton-fencing-token"),
        Some(token(&ga).to_string())
    );
    let gb = post(&*app, "/v1/semaphores/farm:acquire", acquire(&b, 2, 0)).await;
    assert_eq!(gb.status, 200, "{:?}", gb.body);
    assert!(token(&gb) > token(&ga));

    // Full: a try is refused with what is out; another limit is refused.
    let full = post(&*app, "/v1/semaphores/farm:acquire", acquire(&c, 1, 0)).await;
    assert_eq!((full.status, full.code()), (409, "semaphore_full"));
    assert_eq!(
        (full.body["in_use"].clone(), full.body["limit"].clone()),
        (json!(8), json!(8))
    );
    let other = post(
        &*app,
        "/v1/semaphores/farm:acquire",
        json!({"lease_id": c, "limit": 4}),
    )
    .await;
    assert_eq!((other.status, other.code()), (409, "limit_mismatch"));
    assert_eq!(other.body["limit"], 8);

    // Three permits wait first, one permit after it.
    let spawn = |lease: String, permits: u32| {
        let app = app.clone();
        actix_web::rt::spawn(async move {
            let body = json!({"lease_id": lease, "limit": 8, "permits": permits, "wait_ms": 20000,
                              "holder": format!("waiter-{permits}")});
            post(&*app, "/v1/semaphores/farm:acquire", body).await
        })
    };
    let three = spawn(c.clone(), 3);
    wait_for(|| async { get(&*app, "/v1/semaphores/farm").await.body["waiters"] == 1 }).await;
    let one = spawn(d.clone(), 1);
    wait_for(|| async { get(&*app, "/v1/semaphores/farm").await.body["waiters"] == 2 }).await;
    let view = get(&*app, "/v1/semaphores/farm").await.body;
    assert_eq!(view["in_use"], 8);
    assert_eq!(
        view["queue"],
        json!([{"holder": "waiter-3", "permits": 3}, {"holder": "waiter-1", "permits": 1}])
    );

    // Two permits come back: six out, the head wants three, so nobody moves,
    // though one permit alone would fit.
    let released = post(
        &*app,
        "/v1/semaphores/farm:release",
        json!({"lease_id": b, "token": token(&gb)}),
    )
    .await;
    assert_eq!(released.status, 200, "{:?}", released.body);
    let view = get(&*app, "/v1/semaphores/farm").await.body;
    assert_eq!(
        (view["in_use"].clone(), view["waiters"].clone()),
        (json!(6), json!(2))
    );

    // Renewing a holding keeps it; a wrong token has lost nothing but is refused.
    let renewed = post(
        &*app,
        "/v1/semaphores/farm:renew",
        json!({"lease_id": a, "token": token(&ga)}),
    )
    .await;
    assert_eq!(
        (renewed.status, renewed.body["token"].as_u64()),
        (200, Some(token(&ga)))
    );
    let lost = post(
        &*app,
        "/v1/semaphores/farm:release",
        json!({"lease_id": a, "token": token(&gb)}),
    )
    .await;
    assert_eq!((lost.status, lost.code()), (409, "permits_lost"));
    let lease_view = get(&*app, &format!("/v1/leases/{a}")).await.body;
    assert_eq!(lease_view["semaphores"], json!(["farm"]));

    // The six go with their lease: both waiters fit, in line order.
    let revoked = actix_web::test::call_service(
        &*app,
        actix_web::test::TestRequest::delete()
            .uri(&format!("/v1/leases/{a}"))
            .to_request(),
    )
    .await;
    let revoked: Value = actix_web::test::read_body_json(revoked).await;
    assert_eq!(revoked["released"]["semaphores"], json!(["farm"]));
    let got_three = three.await.unwrap();
    let got_one = one.await.unwrap();
    assert_eq!((got_three.status, got_one.status), (200, 200));
    assert!(token(&got_one) > token(&got_three), "granted in line order");
    let view = get(&*app, "/v1/semaphores/farm").await.body;
    assert_eq!(
        (view["in_use"].clone(), view["waiters"].clone()),
        (json!(4), json!(0))
    );
    let listed = get(&*app, "/v1/semaphores?prefix=fa").await.body;
    assert_eq!(listed["items"][0]["name"], "farm");

    // Once nobody holds or waits, the next acquirer sets a new limit.
    for (lease_id, reply) in [(&c, &got_three), (&d, &got_one)] {
        post(
            &*app,
            "/v1/semaphores/farm:release",
            json!({"lease_id": lease_id, "token": token(reply)}),
        )
        .await;
    }
    assert_eq!(
        get(&*app, "/v1/semaphores/farm").await.body["limit"],
        Value::Null
    );
    let fresh = post(&*app, "/v1/semaphores/farm:acquire", json!({"limit": 2})).await;
    assert_eq!((fresh.status, fresh.body["limit"].clone()), (200, json!(2)));
}

#[actix_web::test]
async fn a_multi_acquire_holds_all_its_locks_or_waits_for_all() {
    let node = start_node().await;
    let app = Rc::new(app(&node).await);
    let (holder, mover) = (lease(&*app, 5000).await, lease(&*app, 5000).await);
    let held = post(
        &*app,
        "/v1/locks/accounts%2F7:acquire",
        json!({"lease_id": holder}),
    )
    .await;
    let both = json!([{"name": "accounts/42"}, {"name": "accounts/7"}, {"name": "rates", "mode": "shared"}]);

    // Tried while one is held: refused, naming it, and nothing is taken.
    let refused = post(
        &*app,
        "/v1/locks:acquire",
        json!({"lease_id": mover, "locks": both}),
    )
    .await;
    assert_eq!((refused.status, refused.code()), (409, "lock_held"));
    assert_eq!(
        (refused.body["name"].clone(), refused.body["token"].as_u64()),
        (json!("accounts/7"), Some(token(&held)))
    );
    assert_eq!(
        get(&*app, "/v1/locks/accounts%2F42").await.body["held"],
        false
    );

    // Waiting, it takes a place in every line and holds nothing meanwhile.
    let waiting = {
        let app = app.clone();
        let mover = mover.clone();
        let both = both.clone();
        actix_web::rt::spawn(async move {
            let body =
                json!({"lease_id": mover, "locks": both, "wait_ms": 20000, "holder": "transfer"});
            post(&*app, "/v1/locks:acquire", body).await
        })
    };
    wait_for(|| async { get(&*app, "/v1/locks/accounts%2F7").await.body["waiters"] == 1 }).await;
    for name in ["accounts%2F42", "rates"] {
        let view = get(&*app, &format!("/v1/locks/{name}")).await.body;
        assert_eq!(
            (view["held"].clone(), view["waiters"].clone()),
            (json!(false), json!(1)),
            "{name}"
        );
    }
    post(
        &*app,
        "/v1/locks/accounts%2F7:release",
        json!({"lease_id": holder, "token": token(&held)}),
    )
    .await;
    let granted = waiting.await.unwrap();
    assert_eq!(granted.status, 200, "{:?}", granted.body);
    assert!(
        granted.header("baton-fencing-token").is_none(),
        "one token per lock, in the body"
    );
    let locks = granted.body["locks"].as_array().unwrap().clone();
    let names: Vec<&str> = locks.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["accounts/42", "accounts/7", "rates"],
        "in the order asked"
    );
    assert_eq!(locks[2]["mode"], "shared");
    let tokens: Vec<u64> = locks.iter().map(|l| l["token"].as_u64().unwrap()).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]) && tokens[0] > token(&held));
    assert_eq!(granted.body["lease_id"], mover.as_str());
    for (name, token) in [("accounts%2F42", tokens[0]), ("accounts%2F7", tokens[1])] {
        let view = get(&*app, &format!("/v1/locks/{name}")).await.body;
        assert_eq!(view["token"].as_u64(), Some(token), "{name}");
    }
    // A retry by the same lease gets the same grants.
    let retried = post(
        &*app,
        "/v1/locks:acquire",
        json!({"lease_id": mover, "locks": both}),
    )
    .await;
    assert_eq!(retried.body["locks"], granted.body["locks"]);

    // Each lock is released on its own; the lease takes the rest.
    let one = post(
        &*app,
        "/v1/locks/rates:release",
        json!({"lease_id": mover, "token": tokens[2]}),
    )
    .await;
    assert_eq!(one.status, 200);
    let lease_view = get(&*app, &format!("/v1/leases/{mover}")).await.body;
    assert_eq!(lease_view["locks"], json!(["accounts/42", "accounts/7"]));
}

#[actix_web::test]
async fn crossing_multi_acquires_both_finish() {
    let node = start_node().await;
    let app = Rc::new(app(&node).await);
    let first = lease(&*app, 5000).await;
    let held = post(&*app, "/v1/locks/x:acquire", json!({"lease_id": first})).await;
    // {x, y} and {y, x}, both waiting, in opposite orders: the classic deadlock
    // of two lock-by-lock clients.
    let mut waiting = Vec::new();
    for order in [["x", "y"], ["y", "x"]] {
        let task_app = app.clone();
        waiting.push(actix_web::rt::spawn(async move {
            let body = json!({"locks": [{"name": order[0]}, {"name": order[1]}], "wait_ms": 20000, "ttl_ms": 5000});
            post(&*task_app, "/v1/locks:acquire", body).await
        }));
        let queued = waiting.len();
        wait_for(|| async { get(&*app, "/v1/locks/x").await.body["waiters"] == queued }).await;
    }
    post(
        &*app,
        "/v1/locks/x:release",
        json!({"lease_id": first, "token": token(&held)}),
    )
    .await;
    let a = waiting.remove(0).await.unwrap();
    assert_eq!(a.status, 200, "{:?}", a.body);
    // The first releases both (its lease was made for these locks alone and
    // goes with the last of them); the second then holds both.
    let lease_a = a.body["lease_id"].as_str().unwrap().to_owned();
    for lock in a.body["locks"].as_array().unwrap() {
        let name = lock["name"].as_str().unwrap();
        let body = json!({"lease_id": lease_a, "token": lock["token"]});
        let released = post(&*app, &format!("/v1/locks/{name}:release"), body).await;
        assert_eq!(released.status, 200, "{:?}", released.body);
    }
    assert_eq!(
        get(&*app, &format!("/v1/leases/{lease_a}")).await.status,
        404
    );
    let b = waiting.remove(0).await.unwrap();
    assert_eq!(b.status, 200, "{:?}", b.body);
    let names: Vec<&str> = b.body["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["y", "x"]);
}
