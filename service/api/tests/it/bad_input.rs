//! Bad input: every malformed request gets its documented 4xx and code, as
//! problem+json, and the server stays healthy.

use actix_web::test::TestRequest;
use serde_json::json;

use crate::support::{app, get, lease, post, send, start_node};

#[actix_web::test]
async fn malformed_requests_get_documented_errors() {
    let node = start_node().await;
    let app = app(&node).await;
    let a = lease(&app, 5000).await;
    let held = post(&app, "/v1/locks/held:acquire", json!({"lease_id": a})).await;
    let token = held.body["token"].as_u64().unwrap();
    let raw = |method: &str, uri: &str, body: &str| {
        let request = match method {
            "PUT" => TestRequest::put(),
            "GET" => TestRequest::get(),
            "DELETE" => TestRequest::delete(),
            _ => TestRequest::post(),
        };
        request
            .uri(uri)
            .insert_header(("content-type", "application/json"))
            .set_payload(body.to_owned())
    };
    let huge = format!("{{\"holder\": \"{}\"}}", "x".repeat(20_000));
    let big_value = format!("{{\"value\": \"{}\"}}", "v".repeat(5_000));
    let long_name = format!("/v1/locks/{}:acquire", "n".repeat(257));
    let cases: Vec<(&str, String, String, u16, &str)> = vec![
        (
            "POST",
            "/v1/leases".into(),
            "{not json".into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/leases".into(),
            "[1,2]".into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/leases".into(),
            r#"{"ttl_ms": "soon"}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/leases".into(),
            r#"{"ttl_ms": -5}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/leases".into(),
            r#"{"ttl_ms": 1e99}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/leases".into(),
            r#"{"ttl_ms": 5000, "color": "red"}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/leases".into(),
            r#"{"ttl_ms": 99999999999}"#.into(),
            400,
            "invalid_ttl",
        ),
        (
            "POST",
            "/v1/leases".into(),
            r#"{"ttl_ms": 1}"#.into(),
            400,
            "invalid_ttl",
        ),
        (
            "POST",
            "/v1/leases".into(),
            huge.clone(),
            413,
            "body_too_large",
        ),
        (
            "POST",
            "/v1/locks/a:acquire".into(),
            huge,
            413,
            "body_too_large",
        ),
        (
            "POST",
            "/v1/locks/bad%20name:acquire".into(),
            "{}".into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            "/v1/locks/a%2F%2Fb:acquire".into(),
            "{}".into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            "/v1/locks/%2Flead:acquire".into(),
            "{}".into(),
            400,
            "invalid_name",
        ),
        ("POST", long_name, "{}".into(), 400, "invalid_name"),
        (
            "POST",
            "/v1/locks/a:acquire".into(),
            r#"{"wait_ms": 99999999}"#.into(),
            400,
            "invalid_wait",
        ),
        (
            "POST",
            "/v1/locks/a:acquire".into(),
            r#"{"ttl_ms": 10}"#.into(),
            400,
            "invalid_ttl",
        ),
        (
            "POST",
            "/v1/locks/a:acquire".into(),
            r#"{"lease_id": "nope"}"#.into(),
            404,
            "lease_not_found",
        ),
        (
            "POST",
            "/v1/locks/a:acquire".into(),
            r#"{"lease_id": 42}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/locks/a:acquire".into(),
            r#"{"holder": 7}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/locks/a:acquire".into(),
            r#"{"lock_delay_ms": 999999999}"#.into(),
            400,
            "invalid_lock_delay",
        ),
        (
            "POST",
            "/v1/locks/held:release".into(),
            "".into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/locks/held:release".into(),
            format!(r#"{{"lease_id": "{a}", "token": {}}}"#, token - 1),
            409,
            "lock_lost",
        ),
        (
            "POST",
            "/v1/locks/held:release".into(),
            format!(r#"{{"lease_id": "{a}"}}"#),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/locks/held:renew".into(),
            format!(r#"{{"lease_id": "{a}", "token": {}}}"#, token + 1),
            409,
            "lock_lost",
        ),
        (
            "POST",
            "/v1/locks/held:validate".into(),
            r#"{"token": "x"}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "PUT",
            "/v1/names/n".into(),
            big_value,
            413,
            "value_too_large",
        ),
        (
            "PUT",
            "/v1/names/n".into(),
            r#"{"lease_id": "zzzzzzzzzzzzzzzzzzzzzzzzzz", "value": 1}"#.into(),
            404,
            "lease_not_found",
        ),
        (
            "PUT",
            "/v1/names/n".into(),
            r#"{}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/elections/e:campaign".into(),
            r#"{"candidate": "c"}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/elections/e:proclaim".into(),
            format!(r#"{{"lease_id": "{a}", "token": 1, "value": 1}}"#),
            409,
            "not_leader",
        ),
        (
            "GET",
            "/v1/locks?limit=0".into(),
            "".into(),
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/v1/locks?limit=abc".into(),
            "".into(),
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/v1/locks?page_token=zz".into(),
            "".into(),
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/v1/locks?surprise=1".into(),
            "".into(),
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/v1/nothing-here".into(),
            "".into(),
            404,
            "route_not_found",
        ),
        // A known path with another method: 405 with Allow (schemathesis).
        (
            "DELETE",
            "/v1/locks/held".into(),
            "".into(),
            405,
            "method_not_allowed",
        ),
        (
            "PUT",
            "/v1/locks/held:acquire".into(),
            "".into(),
            405,
            "method_not_allowed",
        ),
        // A `:` in a name, percent-encoded or not, is an invalid name, never a
        // 405 that names the very method asked (schemathesis, issue 15).
        (
            "POST",
            "/v1/locks/a%3Ab:validate".into(),
            r#"{"token": 1}"#.into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            "/v1/locks/a:b:validate".into(),
            r#"{"token": 1}"#.into(),
            400,
            "invalid_name",
        ),
        (
            "GET",
            "/v1/names/x:y".into(),
            "".into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            "/v1/semaphores/s:acquire".into(),
            r#"{"limit": 0}"#.into(),
            400,
            "invalid_limit",
        ),
        (
            "POST",
            "/v1/semaphores/s:acquire".into(),
            r#"{"limit": 2000000}"#.into(),
            400,
            "invalid_limit",
        ),
        (
            "POST",
            "/v1/semaphores/s:acquire".into(),
            r#"{"limit": 3, "permits": 4}"#.into(),
            422,
            "invalid_permits",
        ),
        // schemathesis, seed 7: schema-valid, so 422 rather than 400.
        (
            "POST",
            "/v1/semaphores/s:acquire".into(),
            r#"{"limit": 1191.0, "permits": 1073741824, "wait_ms": 473}"#.into(),
            422,
            "invalid_permits",
        ),
        (
            "POST",
            "/v1/semaphores/s:acquire".into(),
            r#"{"limit": 3, "permits": 0}"#.into(),
            422,
            "invalid_permits",
        ),
        (
            "POST",
            "/v1/semaphores/s:acquire".into(),
            "{}".into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/semaphores/s:acquire".into(),
            r#"{"limit": -1}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/semaphores/s:release".into(),
            r#"{"token": 1}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/locks:acquire".into(),
            r#"{"locks": []}"#.into(),
            422,
            "invalid_lock_list",
        ),
        (
            "POST",
            "/v1/locks:acquire".into(),
            r#"{"locks": [{"name": "a"}, {"name": "b"}, {"name": "a"}]}"#.into(),
            422,
            "invalid_lock_list",
        ),
        (
            "POST",
            "/v1/locks:acquire".into(),
            r#"{"locks": [{"name": "n0"},{"name": "n1"},{"name": "n2"},{"name": "n3"},{"name": "n4"},{"name": "n5"},{"name": "n6"},{"name": "n7"},{"name": "n8"},{"name": "n9"},{"name": "n10"},{"name": "n11"},{"name": "n12"},{"name": "n13"},{"name": "n14"},{"name": "n15"},{"name": "n16"},{"name": "n17"},{"name": "n18"},{"name": "n19"},{"name": "n20"},{"name": "n21"},{"name": "n22"},{"name": "n23"},{"name": "n24"},{"name": "n25"},{"name": "n26"},{"name": "n27"},{"name": "n28"},{"name": "n29"},{"name": "n30"},{"name": "n31"},{"name": "n32"}]}"#.into(),
            422,
            "invalid_lock_list",
        ),
        (
            "POST",
            "/v1/locks:acquire".into(),
            r#"{"locks": [{"name": "a//b"}]}"#.into(),
            400,
            "invalid_name",
        ),
        (
            "POST",
            "/v1/locks:acquire".into(),
            r#"{"locks": [{"name": "a", "mode": "rw"}]}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/locks:acquire".into(),
            "{}".into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/locks/a:acquire".into(),
            r#"{"mode": "both"}"#.into(),
            400,
            "invalid_body",
        ),
        (
            "POST",
            "/v1/locks/x:bogus".into(),
            "".into(),
            404,
            "route_not_found",
        ),
    ];
    for (method, uri, body, status, code) in cases {
        let reply = send(&app, raw(method, &uri, &body)).await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{method} {uri} {}: {:?}",
            &body.chars().take(80).collect::<String>(),
            reply.body
        );
        assert_eq!(
            reply.header("content-type").as_deref(),
            Some("application/problem+json"),
            "{uri}"
        );
        assert_eq!(reply.body["status"].as_u64(), Some(u64::from(status)));
        assert!(reply.body["type"].as_str().unwrap().ends_with(code));
        assert!(reply.header("baton-revision").is_some());
    }
    // Still healthy, and nothing lost.
    assert_eq!(get(&app, "/healthz").await.status, 200);
    let lock = get(&app, "/v1/locks/held").await;
    assert_eq!(lock.body["token"].as_u64(), Some(token));
    assert_eq!(get(&app, "/v1/names/n").await.status, 404);
}

/// What the spec fuzzer (schemathesis, issue 16) found refused although the
/// spec allows it: a `null` body where the body is optional, integral floats
/// for integer fields (JSON Schema counts `5000.0` as an integer), and any hex
/// page token; and what a wrong method gets.
#[actix_web::test]
async fn input_the_spec_allows_is_accepted() {
    let node = start_node().await;
    let app = app(&node).await;
    let json_body = |method: TestRequest, uri: &str, body: &str| {
        method
            .uri(uri)
            .insert_header(("content-type", "application/json"))
            .set_payload(body.to_owned())
    };
    let created = send(&app, json_body(TestRequest::post(), "/v1/leases", "null")).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let created = send(
        &app,
        json_body(TestRequest::post(), "/v1/leases", r#"{"ttl_ms": 5000.0}"#),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(created.body["ttl_ms"], 5000);
    let granted = send(
        &app,
        json_body(TestRequest::post(), "/v1/locks/f:acquire", "null"),
    )
    .await;
    assert_eq!(granted.status, 200, "{:?}", granted.body);
    let lease_id = granted.body["lease_id"].as_str().unwrap();
    let token = granted.body["token"].as_u64().unwrap();
    let release = format!(r#"{{"lease_id": "{lease_id}", "token": {token}.0}}"#);
    let released = send(
        &app,
        json_body(TestRequest::post(), "/v1/locks/f:release", &release),
    )
    .await;
    assert_eq!(released.status, 200, "{:?}", released.body);
    // Fractions and negatives stay refused.
    for bad in [r#"{"ttl_ms": 5000.5}"#, r#"{"ttl_ms": -5000.0}"#] {
        let refused = send(&app, json_body(TestRequest::post(), "/v1/leases", bad)).await;
        assert_eq!(
            (refused.status, refused.code()),
            (400, "invalid_body"),
            "{bad}"
        );
    }
    // Hex that is not UTF-8 is still a position in name order.
    assert_eq!(get(&app, "/v1/locks?page_token=ff").await.status, 200);
    let wrong = send(
        &app,
        TestRequest::with_uri("/v1/leases").method(actix_web::http::Method::PATCH),
    )
    .await;
    assert_eq!((wrong.status, wrong.code()), (405, "method_not_allowed"));
    assert_eq!(wrong.header("allow").as_deref(), Some("POST"));
}
