//! An in-process Baton: a real node (RocksDB in a temp dir, openraft) behind the
//! real routes, driven through actix's test service.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use actix_http::Request;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::test::{self, TestRequest};
use actix_web::{App, Error};
use baton_api::{configure, ApiSettings, ApiState};
use baton_core::Limits;
use baton_raft::{Node, NodeConfig, WatchConfig};
use serde_json::Value;
use tempfile::TempDir;

/// Asks `check` until it answers `true`, for up to 10 s (then panics). The tests
/// wait on facts through this, never on time.
pub async fn wait_for<F, Fut>(mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if check().await {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "condition not reached in 10 s"
        );
        // The poll interval of a wait on a fact (nothing announces these facts).
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
}

pub struct TestNode {
    pub node: Arc<Node>,
    pub dir: TempDir,
}

pub async fn start_node() -> TestNode {
    start_node_with(WatchConfig::default()).await
}

/// A node with these watch settings (small rings and short bookmarks in tests).
pub async fn start_node_with(watch: WatchConfig) -> TestNode {
    let dir = tempfile::tempdir().unwrap();
    let mut config = NodeConfig::single(dir.path().join("data"), "http://127.0.0.1:0".into());
    config.limits = Limits {
        min_ttl_ms: 100,
        ..Limits::default()
    };
    config.lease_tick = Duration::from_millis(20);
    config.watch = watch;
    let node = Node::start(config).await.unwrap();
    assert!(node.wait_until_leader(Duration::from_secs(10)).await);
    TestNode { node, dir }
}

pub fn state(node: &TestNode) -> ApiState {
    ApiState {
        node: node.node.clone(),
        settings: ApiSettings {
            default_ttl_ms: 5_000,
            max_wait_ms: 60_000,
            ..ApiSettings::default()
        },
        auth: None,
        rate_limiter: Default::default(),
        metrics: Default::default(),
    }
}

pub async fn app(
    node: &TestNode,
) -> impl Service<Request, Response = ServiceResponse, Error = Error> {
    test::init_service(App::new().configure(configure(state(node)))).await
}

/// A node's routes with auth off and these API settings.
pub async fn app_with(
    node: &TestNode,
    settings: ApiSettings,
) -> impl Service<Request, Response = ServiceResponse, Error = Error> {
    let state = ApiState {
        settings,
        ..state(node)
    };
    test::init_service(App::new().configure(configure(state))).await
}

pub struct HttpReply {
    pub status: u16,
    pub body: Value,
    pub headers: actix_web::http::header::HeaderMap,
}

impl HttpReply {
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    }
}

pub async fn send<S>(app: &S, request: TestRequest) -> HttpReply
where
    S: Service<Request, Response = ServiceResponse, Error = Error>,
{
    let response = test::call_service(app, request.to_request()).await;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = test::read_body(response).await;
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    HttpReply {
        status,
        body,
        headers,
    }
}

pub async fn post<S>(app: &S, path: &str, body: Value) -> HttpReply
where
    S: Service<Request, Response = ServiceResponse, Error = Error>,
{
    send(app, TestRequest::post().uri(path).set_json(body)).await
}

pub async fn get<S>(app: &S, path: &str) -> HttpReply
where
    S: Service<Request, Response = ServiceResponse, Error = Error>,
{
    send(app, TestRequest::get().uri(path)).await
}

pub async fn lease<S>(app: &S, ttl_ms: u64) -> String
where
    S: Service<Request, Response = ServiceResponse, Error = Error>,
{
    let reply = post(
        app,
        "/v1/leases",
        serde_json::json!({"ttl_ms": ttl_ms, "holder": "test"}),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    reply.body["lease_id"].as_str().unwrap().to_owned()
}

/// Tokens of the principals in [`AUTH_FILE`].
pub const ADMIN_TOKEN: &str = "admin-token-0123456789";
/// `billing`: client, locks/names/elections/watch under `billing/`.
pub const BILLING_TOKEN: &str = "billing-token-0123456789";
/// `payroll`: client, locks under `payroll/` and `shared/`.
pub const PAYROLL_TOKEN: &str = "payroll-token-0123456789";

/// An auth file with an admin and two clients, as YAML.
pub fn auth_file() -> String {
    use baton_api::auth::hash_token;
    format!(
        "principals:
  - name: ops
    role: admin
    tokens: [\"{}\"]
  - name: billing
    role: client
    tokens: [\"{}\"]
    locks: [\"billing/\", \"shared/\"]
    names: [\"billing/\"]
    elections: [\"billing/\"]
    watch: [\"billing/\"]
  - name: payroll
    role: client
    tokens: [\"{}\"]
    locks: [\"payroll/\", \"shared/\"]
",
        hash_token(ADMIN_TOKEN),
        hash_token(BILLING_TOKEN),
        hash_token(PAYROLL_TOKEN)
    )
}

/// A node's routes with auth on, from `yaml` written to a file in the node's
/// directory; also returns the authenticator (to reload) and the file's path.
pub async fn app_with_auth(
    node: &TestNode,
    yaml: &str,
) -> (
    impl Service<Request, Response = ServiceResponse, Error = Error>,
    Arc<baton_api::auth::Authenticator>,
    std::path::PathBuf,
) {
    app_with_auth_and(node, yaml, state(node).settings).await
}

/// As [`app_with_auth`], with these API settings (quotas, rate limits).
pub async fn app_with_auth_and(
    node: &TestNode,
    yaml: &str,
    settings: ApiSettings,
) -> (
    impl Service<Request, Response = ServiceResponse, Error = Error>,
    Arc<baton_api::auth::Authenticator>,
    std::path::PathBuf,
) {
    let path = node.dir.path().join("auth.yaml");
    std::fs::write(&path, yaml).unwrap();
    let auth = Arc::new(baton_api::auth::Authenticator::load(&path).unwrap());
    let state = ApiState {
        auth: Some(auth.clone()),
        settings,
        ..state(node)
    };
    let app = test::init_service(App::new().configure(configure(state))).await;
    (app, auth, path)
}

/// `request` with `Authorization: Bearer <token>`.
pub fn bearer(request: TestRequest, token: &str) -> TestRequest {
    request.insert_header(("authorization", format!("Bearer {token}")))
}
