//! `/metrics` of the API in process: requests counted under their OpenAPI
//! operation, status and stable code (never a name), refusals by reason.
//! (The scripted workload against a real process, parsed by the Prometheus
//! client's own parser, is `service/server/tests/cli/test_metrics.py`.)

use baton_api::ApiSettings;
use serde_json::json;

use crate::support::{self, app, app_with, get, lease, post, start_node};

/// The value of the sample `series` (name and labels exactly as written).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

async fn scrape<S>(app: &S) -> String
where
    S: actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
    >,
{
    let reply = get(app, "/metrics").await;
    assert_eq!(reply.status, 200);
    reply.body.as_str().unwrap().to_owned()
}

#[actix_web::test]
async fn requests_count_under_their_operation_status_and_code_and_never_a_name() {
    let node = start_node().await;
    let app = app(&node).await;
    let holder = lease(&app, 5_000).await;
    let name = "secret-team/migrate";
    let grant = post(
        &app,
        &format!("/v1/locks/{name}:acquire"),
        json!({"lease_id": holder}),
    )
    .await;
    assert_eq!(grant.status, 200, "{:?}", grant.body);
    let held = post(&app, &format!("/v1/locks/{name}:acquire"), json!({})).await;
    assert_eq!((held.status, held.code()), (409, "lock_held"));
    let nowhere = get(&app, "/v1/no-such-endpoint").await;
    assert_eq!((nowhere.status, nowhere.code()), (404, "route_not_found"));

    let text = scrape(&app).await;
    for (series, want) in [
        (
            r#"baton_requests_total{operation="create_lease",status="201",code="ok"}"#,
            1.0,
        ),
        (
            r#"baton_requests_total{operation="acquire_lock",status="200",code="ok"}"#,
            1.0,
        ),
        (
            r#"baton_requests_total{operation="acquire_lock",status="409",code="lock_held"}"#,
            1.0,
        ),
        (
            r#"baton_requests_total{operation="unrouted",status="404",code="route_not_found"}"#,
            1.0,
        ),
        (
            r#"baton_request_duration_seconds_count{operation="acquire_lock"}"#,
            2.0,
        ),
        // Pre-registered: every operation has its latency series from the start.
        (
            r#"baton_request_duration_seconds_count{operation="campaign"}"#,
            0.0,
        ),
        (r#"baton_grants_total{kind="lock"}"#, 1.0),
        (r#"baton_requests_refused_total{reason="quota"}"#, 0.0),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series} in\n{text}");
    }
    assert!(!text.contains("secret-team"), "a lock name became a label");
    // The gauges from before keep their unlabelled form.
    assert_eq!(sample(&text, "baton_locks_held"), Some(1.0));
    assert_eq!(
        text.matches("# TYPE baton_requests_total counter").count(),
        1
    );
}

#[actix_web::test]
async fn a_quota_refusal_counts_as_refused_with_its_code() {
    let node = start_node().await;
    let settings = ApiSettings {
        quota: baton_core::Quota {
            max_leases: 1,
            ..baton_core::Quota::UNLIMITED
        },
        ..support::state(&node).settings
    };
    let app = app_with(&node, settings).await;
    lease(&app, 5_000).await;
    let refused = post(&app, "/v1/leases", json!({"ttl_ms": 5000})).await;
    assert_eq!((refused.status, refused.code()), (429, "quota_exceeded"));

    let text = scrape(&app).await;
    assert_eq!(
        sample(&text, r#"baton_requests_refused_total{reason="quota"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"baton_requests_total{operation="create_lease",status="429",code="quota_exceeded"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"baton_requests_refused_total{reason="overloaded"}"#
        ),
        Some(0.0)
    );
}
