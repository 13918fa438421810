//! An in-process Baton: a real node (RocksDB in a temp dir, openraft) behind the
//! real routes, driven through actix's test service.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use actix_http::Request;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::test::{self, TestRequest};
use actix_web::{App, Error};
use baton_api::{configure, ApiSettings, ApiState};
use baton_core::Limits;
use baton_raft::{Node, NodeConfig};
use serde_json::Value;
use tempfile::TempDir;

pub struct TestNode {
    pub node: Arc<Node>,
    pub dir: TempDir,
}

pub async fn start_node() -> TestNode {
    let dir = tempfile::tempdir().unwrap();
    let mut config = NodeConfig::single(dir.path().join("data"), "http://127.0.0.1:0".into());
    config.limits = Limits {
        min_ttl_ms: 100,
        ..Limits::default()
    };
    config.lease_tick = Duration::from_millis(20);
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
        },
    }
}

pub async fn app(
    node: &TestNode,
) -> impl Service<Request, Response = ServiceResponse, Error = Error> {
    test::init_service(App::new().configure(configure(state(node)))).await
}

pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub headers: actix_web::http::header::HeaderMap,
}

impl Reply {
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("")
    }
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    }
}

pub async fn send<S>(app: &S, request: TestRequest) -> Reply
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
    Reply {
        status,
        body,
        headers,
    }
}

pub async fn post<S>(app: &S, path: &str, body: Value) -> Reply
where
    S: Service<Request, Response = ServiceResponse, Error = Error>,
{
    send(app, TestRequest::post().uri(path).set_json(body)).await
}

pub async fn get<S>(app: &S, path: &str) -> Reply
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
