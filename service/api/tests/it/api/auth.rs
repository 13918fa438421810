//! Auth on (`--auth-file`): every 401 and 403 path, lease ownership across
//! principals, replays across principals, filtered lists, reloads.

use actix_web::test::TestRequest;
use serde_json::json;

use crate::support::{
    app_with_auth, auth_file, bearer, send, start_node, HttpReply, ADMIN_TOKEN, BILLING_TOKEN,
    PAYROLL_TOKEN,
};

#[actix_web::test]
async fn requests_without_a_valid_token_are_refused_and_open_endpoints_stay_open() {
    let node = start_node().await;
    let (app, _, _) = app_with_auth(&node, &auth_file()).await;
    for request in [
        TestRequest::post().uri("/v1/leases").set_json(json!({})),
        TestRequest::get().uri("/v1/locks"),
        TestRequest::get().uri("/v1/cluster"),
        TestRequest::get().uri("/v1/watch"),
        TestRequest::get().uri("/v1/no-such-route"),
        bearer(TestRequest::get().uri("/v1/locks"), "not-a-token"),
        TestRequest::get()
            .uri("/v1/locks")
            .insert_header(("authorization", format!("Basic {BILLING_TOKEN}"))),
        TestRequest::get()
            .uri("/v1/locks")
            .insert_header(("authorization", "Bearer ")),
    ] {
        let reply = send(&app, request).await;
        assert_eq!(reply.status, 401, "{:?}", reply.body);
        assert_eq!(reply.code(), "unauthenticated");
        assert_eq!(
            reply.header("www-authenticate").as_deref(),
            Some("Bearer realm=\"baton\"")
        );
        let text = reply.body.to_string();
        assert!(!text.contains(BILLING_TOKEN) && !text.contains("not-a-token"));
    }
    for open in ["/healthz", "/readyz", "/openapi.json", "/docs"] {
        let reply = send(&app, TestRequest::get().uri(open)).await;
        assert_eq!(reply.status, 200, "{open} is open by default");
    }
    // Metrics are admin-only by default.
    let metrics = |token: Option<&str>| {
        let request = TestRequest::get().uri("/metrics");
        match token {
            Some(token) => bearer(request, token),
            None => request,
        }
    };
    assert_eq!(send(&app, metrics(None)).await.status, 401);
    let client = send(&app, metrics(Some(BILLING_TOKEN))).await;
    assert_eq!((client.status, client.code()), (403, "forbidden"));
    assert_eq!(send(&app, metrics(Some(ADMIN_TOKEN))).await.status, 200);
}

#[actix_web::test]
async fn health_and_metrics_follow_the_auth_file() {
    let node = start_node().await;
    let yaml = format!(
        "{}endpoints:\n  health: admin\n  metrics: open\n",
        auth_file()
    );
    let (app, _, _) = app_with_auth(&node, &yaml).await;
    let metrics = send(&app, TestRequest::get().uri("/metrics")).await;
    assert_eq!(metrics.status, 200);
    let health = send(&app, TestRequest::get().uri("/healthz")).await;
    assert_eq!(health.status, 401);
    let client = bearer(TestRequest::get().uri("/readyz"), BILLING_TOKEN);
    assert_eq!(send(&app, client).await.status, 403);
    let admin = bearer(TestRequest::get().uri("/readyz"), ADMIN_TOKEN);
    assert_eq!(send(&app, admin).await.status, 200);
}

fn names(reply: &HttpReply) -> Vec<String> {
    reply.body["items"]
        .as_array()
        .unwrap_or_else(|| panic!("{:?}", reply.body))
        .iter()
        .map(|item| item["name"].as_str().unwrap().to_owned())
        .collect()
}

#[actix_web::test]
async fn a_principal_uses_only_names_under_its_prefixes_and_lists_only_those() {
    let node = start_node().await;
    let (app, _, _) = app_with_auth(&node, &auth_file()).await;
    let call = |token: &str, request: TestRequest| send(&app, bearer(request, token));
    let acquire = |name: &str| TestRequest::post().uri(&format!("/v1/locks/{name}:acquire"));
    for (token, name) in [
        (BILLING_TOKEN, "billing/nightly"),
        (BILLING_TOKEN, "shared/db"),
        (PAYROLL_TOKEN, "payroll/run"),
        (ADMIN_TOKEN, "ops/anything"),
    ] {
        let reply = call(token, acquire(name)).await;
        assert_eq!(reply.status, 200, "{name}: {:?}", reply.body);
    }
    for request in [
        acquire("payroll/run"),
        acquire("billingx"),
        TestRequest::get().uri("/v1/locks/payroll/run"),
        TestRequest::post()
            .uri("/v1/locks/payroll/run:validate")
            .set_json(json!({"token": 1})),
        TestRequest::put()
            .uri("/v1/names/payroll/svc")
            .set_json(json!({"value": 1})),
        TestRequest::get().uri("/v1/names/payroll/svc"),
        TestRequest::post().uri("/v1/elections/payroll/e:campaign"),
        TestRequest::get().uri("/v1/elections/payroll/e"),
        TestRequest::get().uri("/v1/elections/payroll/e:observe"),
    ] {
        let reply = call(BILLING_TOKEN, request).await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "forbidden"),
            "{:?}",
            reply.body
        );
        assert!(reply.body["detail"].as_str().unwrap().contains("billing"));
    }
    let everything = call(BILLING_TOKEN, TestRequest::get().uri("/v1/locks")).await;
    assert_eq!(names(&everything), ["billing/nightly", "shared/db"]);
    // Pages stay full: one item per page walks the visible names only.
    let first = call(BILLING_TOKEN, TestRequest::get().uri("/v1/locks?limit=1")).await;
    assert_eq!(names(&first), ["billing/nightly"]);
    let page = first.body["next_page_token"].as_str().unwrap().to_owned();
    let second = call(
        BILLING_TOKEN,
        TestRequest::get().uri(&format!("/v1/locks?limit=1&page_token={page}")),
    )
    .await;
    assert_eq!(names(&second), ["shared/db"]);
    let prefixed = call(
        BILLING_TOKEN,
        TestRequest::get().uri("/v1/locks?prefix=pay"),
    )
    .await;
    assert_eq!(names(&prefixed), Vec::<String>::new());
    // payroll may use no registered name at all: a 403, not an empty list.
    let no_names = call(PAYROLL_TOKEN, TestRequest::get().uri("/v1/names")).await;
    assert_eq!((no_names.status, no_names.code()), (403, "forbidden"));
    let no_watch = call(PAYROLL_TOKEN, TestRequest::get().uri("/v1/watch")).await;
    assert_eq!((no_watch.status, no_watch.code()), (403, "forbidden"));
    let admin = call(ADMIN_TOKEN, TestRequest::get().uri("/v1/locks")).await;
    assert_eq!(
        names(&admin),
        [
            "billing/nightly",
            "ops/anything",
            "payroll/run",
            "shared/db"
        ]
    );
}

#[actix_web::test]
async fn a_lease_id_is_useless_to_another_principal() {
    let node = start_node().await;
    let (app, _, _) = app_with_auth(&node, &auth_file()).await;
    let call = |token: &str, request: TestRequest| send(&app, bearer(request, token));
    let created = call(
        BILLING_TOKEN,
        TestRequest::post()
            .uri("/v1/leases")
            .set_json(json!({"ttl_ms": 10_000, "holder": "billing-1"})),
    )
    .await;
    assert_eq!(created.status, 201);
    let lease = created.body["lease_id"].as_str().unwrap().to_owned();
    let granted = call(
        BILLING_TOKEN,
        TestRequest::post()
            .uri("/v1/locks/shared/db:acquire")
            .set_json(json!({"lease_id": lease})),
    )
    .await;
    assert_eq!(granted.status, 200, "{:?}", granted.body);
    let token = granted.body["token"].as_u64().unwrap();

    // payroll may use shared/ locks, but not billing's lease.
    for request in [
        TestRequest::post()
            .uri("/v1/locks/shared/other:acquire")
            .set_json(json!({"lease_id": lease})),
        TestRequest::post()
            .uri("/v1/locks/shared/db:release")
            .set_json(json!({"lease_id": lease, "token": token})),
        TestRequest::post()
            .uri("/v1/locks/shared/db:renew")
            .set_json(json!({"lease_id": lease, "token": token})),
        TestRequest::post().uri(&format!("/v1/leases/{lease}:keepalive")),
        TestRequest::get().uri(&format!("/v1/leases/{lease}")),
        TestRequest::delete().uri(&format!("/v1/leases/{lease}")),
    ] {
        let reply = call(PAYROLL_TOKEN, request).await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "forbidden"),
            "{:?}",
            reply.body
        );
        assert!(
            !reply.body.to_string().contains(&lease),
            "the id is not echoed"
        );
    }
    let still = call(BILLING_TOKEN, TestRequest::get().uri("/v1/locks/shared/db")).await;
    assert_eq!(still.body["token"], token, "the theft changed nothing");
    let own = call(
        BILLING_TOKEN,
        TestRequest::post().uri(&format!("/v1/leases/{lease}:keepalive")),
    )
    .await;
    assert_eq!(own.status, 200);
    let revoked = call(
        BILLING_TOKEN,
        TestRequest::delete().uri(&format!("/v1/leases/{lease}")),
    )
    .await;
    assert_eq!(revoked.status, 200);
}

#[actix_web::test]
async fn an_idempotency_key_never_replays_across_principals() {
    let node = start_node().await;
    let (app, _, _) = app_with_auth(&node, &auth_file()).await;
    let create = |token: &str| {
        bearer(
            TestRequest::post()
                .uri("/v1/leases")
                .insert_header(("idempotency-key", "retry-1"))
                .set_json(json!({"ttl_ms": 10_000, "holder": "same"})),
            token,
        )
    };
    let first = send(&app, create(BILLING_TOKEN)).await;
    let retry = send(&app, create(BILLING_TOKEN)).await;
    assert_eq!(retry.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(retry.body["lease_id"], first.body["lease_id"]);
    let other = send(&app, create(PAYROLL_TOKEN)).await;
    assert_eq!(other.status, 201);
    assert_eq!(other.header("idempotent-replayed"), None);
    assert_ne!(other.body["lease_id"], first.body["lease_id"]);
}

#[actix_web::test]
async fn membership_changes_need_an_admin() {
    let node = start_node().await;
    let (app, _, _) = app_with_auth(&node, &auth_file()).await;
    let remove = || TestRequest::delete().uri("/v1/cluster/members/9");
    let none = send(&app, remove()).await;
    assert_eq!((none.status, none.code()), (401, "unauthenticated"));
    let client = send(&app, bearer(remove(), BILLING_TOKEN)).await;
    assert_eq!((client.status, client.code()), (403, "forbidden"));
    let admin = send(&app, bearer(remove(), ADMIN_TOKEN)).await;
    assert_eq!(
        admin.code(),
        "member_not_found",
        "past auth: {:?}",
        admin.body
    );
}

#[actix_web::test]
async fn a_reloaded_auth_file_takes_effect_and_a_broken_one_is_not_used() {
    let node = start_node().await;
    let (app, auth, path) = app_with_auth(&node, &auth_file()).await;
    let list = |token: &str| send(&app, bearer(TestRequest::get().uri("/v1/locks"), token));
    assert_eq!(list(BILLING_TOKEN).await.status, 200);
    // Rotation: billing's old token is replaced by a new one.
    let rotated = auth_file().replace(
        &baton_api::auth::hash_token(BILLING_TOKEN),
        &baton_api::auth::hash_token("billing-token-2"),
    );
    std::fs::write(&path, rotated).unwrap();
    assert!(auth.reload().unwrap(), "changed");
    assert_eq!(list(BILLING_TOKEN).await.status, 401);
    assert_eq!(list("billing-token-2").await.status, 200);
    assert!(!auth.reload().unwrap(), "unchanged");
    // A broken file is refused and the one in force stays.
    std::fs::write(&path, "principals: [ {name: x, role: superuser} ]").unwrap();
    let error = auth.reload().unwrap_err().to_string();
    assert!(error.contains("superuser"), "{error}");
    assert_eq!(list("billing-token-2").await.status, 200);
}

#[actix_web::test]
async fn an_admin_force_releases_a_holding_and_nobody_else_may() {
    let node = start_node().await;
    let (app, _, _) = app_with_auth(&node, &auth_file()).await;
    let call = |token: &str, request: TestRequest| send(&app, bearer(request, token));
    let lease = call(
        BILLING_TOKEN,
        TestRequest::post()
            .uri("/v1/leases")
            .set_json(json!({"ttl_ms": 30_000, "holder": "stuck-job"})),
    )
    .await;
    let lease = lease.body["lease_id"].as_str().unwrap().to_owned();
    let granted = call(
        BILLING_TOKEN,
        TestRequest::post()
            .uri("/v1/locks/billing/nightly:acquire")
            .set_json(json!({"lease_id": lease, "lock_delay_ms": 30_000})),
    )
    .await;
    let token = granted.body["token"].as_u64().unwrap();
    let registered = call(
        BILLING_TOKEN,
        TestRequest::put()
            .uri("/v1/names/billing/svc")
            .set_json(json!({"lease_id": lease, "value": 1})),
    )
    .await;
    assert_eq!(registered.status, 201, "{:?}", registered.body);
    let revoke = |uri: &str, body: serde_json::Value| TestRequest::post().uri(uri).set_json(body);

    let refused = call(
        BILLING_TOKEN,
        revoke("/v1/locks/billing/nightly:revoke", json!({})),
    )
    .await;
    assert_eq!((refused.status, refused.code()), (403, "forbidden"));
    let stale = call(
        ADMIN_TOKEN,
        revoke(
            "/v1/locks/billing/nightly:revoke",
            json!({"token": token + 1}),
        ),
    )
    .await;
    assert_eq!((stale.status, stale.code()), (409, "token_mismatch"));
    assert_eq!(stale.body["current_token"], token);
    let done = call(
        ADMIN_TOKEN,
        revoke("/v1/locks/billing/nightly:revoke", json!({"token": token})),
    )
    .await;
    assert_eq!(done.status, 200, "{:?}", done.body);
    assert_eq!(done.body["token"], token);
    assert_eq!(done.body["holder"], "stuck-job");
    let lock = call(
        BILLING_TOKEN,
        TestRequest::get().uri("/v1/locks/billing/nightly"),
    )
    .await;
    assert_eq!(lock.body["held"], false);
    // The holder may still be running: the lock delay it asked for applies.
    assert!(
        lock.body["delay_until_ms"].as_u64().is_some(),
        "{:?}",
        lock.body
    );
    let blocked = call(
        BILLING_TOKEN,
        TestRequest::post().uri("/v1/locks/billing/nightly:acquire"),
    )
    .await;
    assert_eq!(blocked.code(), "lock_held", "{:?}", blocked.body);
    let again = call(
        ADMIN_TOKEN,
        revoke("/v1/locks/billing/nightly:revoke", json!({})),
    )
    .await;
    assert_eq!((again.status, again.code()), (404, "not_found"));

    // The lease lives on with its other holding, which the admin ends too.
    let still = call(
        BILLING_TOKEN,
        TestRequest::get().uri(&format!("/v1/leases/{lease}")),
    )
    .await;
    assert_eq!(
        still.body["names"],
        json!(["billing/svc"]),
        "{:?}",
        still.body
    );
    let name = call(
        ADMIN_TOKEN,
        revoke("/v1/names/billing/svc:revoke", json!(null)),
    )
    .await;
    assert_eq!(name.status, 200, "{:?}", name.body);
    let gone = call(
        BILLING_TOKEN,
        TestRequest::get().uri("/v1/names/billing/svc"),
    )
    .await;
    assert_eq!(gone.status, 404);
}

/// Issue 16: quotas per principal, from the auth file over the node's flags.
#[actix_web::test]
async fn a_principal_past_its_quota_gets_429_with_the_limit_and_others_do_not() {
    let node = start_node().await;
    // billing may own two leases (its own entry), everyone hold three things.
    let yaml = auth_file().replace(
        "    watch: [\"billing/\"]\n",
        "    watch: [\"billing/\"]\n    quota: {leases: 2}\n",
    );
    assert_ne!(yaml, auth_file());
    let settings = baton_api::ApiSettings {
        quota: baton_core::Quota {
            max_holdings_per_principal: 3,
            ..baton_core::Quota::default()
        },
        ..crate::support::state(&node).settings
    };
    let (app, _, _) = crate::support::app_with_auth_and(&node, &yaml, settings).await;
    let call = |token: &str, request: TestRequest| send(&app, bearer(request, token));
    let new_lease = || {
        TestRequest::post()
            .uri("/v1/leases")
            .set_json(json!({"ttl_ms": 10_000}))
    };
    let mut leases = Vec::new();
    for _ in 0..2 {
        let created = call(BILLING_TOKEN, new_lease()).await;
        assert_eq!(created.status, 201, "{:?}", created.body);
        leases.push(created.body["lease_id"].as_str().unwrap().to_owned());
    }
    let refused = call(BILLING_TOKEN, new_lease()).await;
    assert_eq!(
        (refused.status, refused.code()),
        (429, "quota_exceeded"),
        "{:?}",
        refused.body
    );
    assert_eq!(refused.body["limit"], 2, "{:?}", refused.body);
    assert!(
        refused.header("retry-after").is_none(),
        "waiting does not help"
    );
    // An acquire that would make its own lease is a third lease too.
    let refused = call(
        BILLING_TOKEN,
        TestRequest::post()
            .uri("/v1/locks/billing/a:acquire")
            .set_json(json!({})),
    )
    .await;
    assert_eq!(
        (refused.status, refused.body["limit"].as_u64()),
        (429, Some(2))
    );
    // payroll has the node's default.
    for _ in 0..3 {
        assert_eq!(call(PAYROLL_TOKEN, new_lease()).await.status, 201);
    }
    // Holdings: three per principal (the node's flag), over all its leases.
    for (i, name) in ["billing/a", "billing/b", "shared/c"].iter().enumerate() {
        let granted = call(
            BILLING_TOKEN,
            TestRequest::post()
                .uri(&format!("/v1/locks/{name}:acquire"))
                .set_json(json!({"lease_id": leases[i % 2]})),
        )
        .await;
        assert_eq!(granted.status, 200, "{:?}", granted.body);
    }
    let refused = call(
        BILLING_TOKEN,
        TestRequest::post()
            .uri("/v1/locks/billing/d:acquire")
            .set_json(json!({"lease_id": leases[0]})),
    )
    .await;
    assert_eq!(
        (
            refused.status,
            refused.code(),
            refused.body["limit"].as_u64()
        ),
        (429, "quota_exceeded", Some(3)),
        "{:?}",
        refused.body
    );
    // Revoking a lease gives its places back.
    let revoked = call(
        BILLING_TOKEN,
        TestRequest::delete().uri(&format!("/v1/leases/{}", leases[1])),
    )
    .await;
    assert_eq!(revoked.status, 200);
    assert_eq!(call(BILLING_TOKEN, new_lease()).await.status, 201);
}

/// Issue 16: a token bucket per principal on each node.
#[actix_web::test]
async fn a_principal_over_its_request_rate_gets_429_with_retry_after() {
    let node = start_node().await;
    let settings = baton_api::ApiSettings {
        // One request a minute after a burst of two: the test never refills.
        rate: baton_api::rate_limit::RateLimit {
            per_second: 1,
            burst: 2,
        },
        ..crate::support::state(&node).settings
    };
    let yaml = auth_file().replace(
        "    locks: [\"payroll/\", \"shared/\"]\n",
        "    locks: [\"payroll/\", \"shared/\"]\n    quota: {requests_per_second: 0}\n",
    );
    assert_ne!(yaml, auth_file());
    let (app, _, _) = crate::support::app_with_auth_and(&node, &yaml, settings).await;
    let list = |token: &str| send(&app, bearer(TestRequest::get().uri("/v1/locks"), token));
    assert_eq!(list(BILLING_TOKEN).await.status, 200);
    assert_eq!(list(BILLING_TOKEN).await.status, 200);
    let refused = list(BILLING_TOKEN).await;
    assert_eq!(
        (refused.status, refused.code()),
        (429, "quota_exceeded"),
        "{:?}",
        refused.body
    );
    assert_eq!(refused.body["limit"], 1);
    let after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&after), "Retry-After {after}");
    // A percent-escaped spelling of the same route is the same route to the
    // router, and takes from the same bucket.
    let escaped = send(
        &app,
        bearer(TestRequest::get().uri("/%761/locks"), BILLING_TOKEN),
    )
    .await;
    assert_eq!(
        (escaped.status, escaped.code()),
        (429, "quota_exceeded"),
        "{:?}",
        escaped.body
    );
    // Others have their own bucket; payroll's entry lifts the limit; health
    // and the static pages are never limited.
    assert_eq!(list(ADMIN_TOKEN).await.status, 200);
    for _ in 0..5 {
        assert_eq!(list(PAYROLL_TOKEN).await.status, 200);
    }
    assert_eq!(
        send(&app, TestRequest::get().uri("/healthz")).await.status,
        200
    );
    assert_eq!(
        send(&app, TestRequest::get().uri("/openapi.json"))
            .await
            .status,
        200
    );
}

/// With auth off the cluster-wide lease cap still holds.
#[actix_web::test]
async fn the_cluster_wide_lease_cap_holds_with_auth_off() {
    let node = start_node().await;
    let settings = baton_api::ApiSettings {
        quota: baton_core::Quota {
            max_leases: 2,
            ..baton_core::Quota::default()
        },
        ..crate::support::state(&node).settings
    };
    let app = crate::support::app_with(&node, settings).await;
    let new_lease = || {
        TestRequest::post()
            .uri("/v1/leases")
            .set_json(json!({"ttl_ms": 10_000}))
    };
    assert_eq!(send(&app, new_lease()).await.status, 201);
    assert_eq!(send(&app, new_lease()).await.status, 201);
    let refused = send(&app, new_lease()).await;
    assert_eq!(
        (
            refused.status,
            refused.code(),
            refused.body["limit"].as_u64()
        ),
        (429, "quota_exceeded", Some(2)),
        "{:?}",
        refused.body
    );
}
