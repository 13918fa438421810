//! Baton's HTTP/JSON API (`/v1`), the operations the scenarios need.

use hyper::{Method, StatusCode};
use reqwest::Client;
use serde_json::{json, Value};

use crate::error::OpError;
use crate::http::HttpClient;
use crate::target::{Held, Lease};

/// A client of one Baton node.
#[derive(Debug, Clone)]
pub struct BatonClient {
    /// For streams and scrapes (watch, metrics).
    http: Client,
    /// For the timed operations.
    calls: HttpClient,
}

impl BatonClient {
    /// A client of the node `calls` talks to (`http://127.0.0.1:7878`), with
    /// `http` for what is not a timed operation.
    pub fn new(http: Client, calls: HttpClient) -> Self {
        Self { http, calls }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        self.calls.base()
    }

    /// The shared reqwest client, for streams and scrapes.
    pub fn http(&self) -> &Client {
        &self.http
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, OpError> {
        let body = body.map(|body| body.to_string().into_bytes());
        let answer = self.calls.send(method, path, body).await?;
        let value: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
        if answer.status.is_success() {
            Ok(value)
        } else {
            Err(problem(answer.status, &value))
        }
    }

    /// `POST /v1/leases`.
    pub async fn grant(&self, ttl_ms: u64, holder: &str) -> Result<Lease, OpError> {
        let v = self
            .call(
                Method::POST,
                "/v1/leases",
                Some(json!({"ttl_ms": ttl_ms, "holder": holder})),
            )
            .await?;
        Ok(Lease {
            id: str_field(&v, "lease_id")?,
        })
    }

    /// `POST /v1/leases/{id}:keepalive`.
    pub async fn keepalive(&self, lease: &Lease) -> Result<(), OpError> {
        self.call(
            Method::POST,
            &format!("/v1/leases/{}:keepalive", lease.id),
            None,
        )
        .await
        .map(drop)
    }

    /// `DELETE /v1/leases/{id}`.
    pub async fn revoke(&self, lease: &Lease) -> Result<(), OpError> {
        self.call(Method::DELETE, &format!("/v1/leases/{}", lease.id), None)
            .await
            .map(drop)
    }

    /// `POST /v1/locks/{name}:acquire` with `wait_ms`.
    pub async fn acquire(&self, name: &str, lease: &Lease, wait_ms: u64) -> Result<Held, OpError> {
        let v = self
            .call(
                Method::POST,
                &format!("/v1/locks/{name}:acquire"),
                Some(json!({"lease_id": lease.id, "wait_ms": wait_ms})),
            )
            .await?;
        held(name, &v)
    }

    /// `POST /v1/locks/{name}:acquire` with `wait_ms` and a `mode` (`shared` or
    /// `exclusive`, issue 17).
    pub async fn acquire_mode(
        &self,
        name: &str,
        lease: &Lease,
        wait_ms: u64,
        shared: bool,
    ) -> Result<Held, OpError> {
        let mode = if shared { "shared" } else { "exclusive" };
        let v = self
            .call(
                Method::POST,
                &format!("/v1/locks/{name}:acquire"),
                Some(json!({"lease_id": lease.id, "wait_ms": wait_ms, "mode": mode})),
            )
            .await?;
        held(name, &v)
    }

    /// `POST /v1/semaphores/{name}:acquire`: `permits` of `limit`, waiting.
    pub async fn acquire_permits(
        &self,
        name: &str,
        lease: &Lease,
        limit: u32,
        permits: u32,
        wait_ms: u64,
    ) -> Result<Held, OpError> {
        let v = self
            .call(
                Method::POST,
                &format!("/v1/semaphores/{name}:acquire"),
                Some(
                    json!({"lease_id": lease.id, "limit": limit, "permits": permits,
                            "wait_ms": wait_ms}),
                ),
            )
            .await?;
        held(name, &v)
    }

    /// `POST /v1/semaphores/{name}:release`.
    pub async fn release_permits(&self, lease: &Lease, held: &Held) -> Result<u64, OpError> {
        let v = self
            .call(
                Method::POST,
                &format!("/v1/semaphores/{}:release", held.name),
                Some(json!({"lease_id": lease.id, "token": held.token})),
            )
            .await?;
        Ok(v["revision"].as_u64().unwrap_or(0))
    }

    /// `POST /v1/locks/{name}:release`.
    pub async fn release(&self, lease: &Lease, held: &Held) -> Result<u64, OpError> {
        let v = self
            .call(
                Method::POST,
                &format!("/v1/locks/{}:release", held.name),
                Some(json!({"lease_id": lease.id, "token": held.token})),
            )
            .await?;
        Ok(v["revision"].as_u64().unwrap_or(0))
    }

    /// `POST /v1/elections/{name}:campaign` with `wait_ms`.
    pub async fn campaign(
        &self,
        name: &str,
        lease: &Lease,
        wait_ms: u64,
        candidate: &str,
    ) -> Result<Held, OpError> {
        let v = self
            .call(
                Method::POST,
                &format!("/v1/elections/{name}:campaign"),
                Some(json!({"lease_id": lease.id, "wait_ms": wait_ms,
                            "candidate": candidate, "value": candidate})),
            )
            .await?;
        held(name, &v)
    }

    /// `POST /v1/elections/{name}:resign`.
    pub async fn resign(&self, lease: &Lease, held: &Held) -> Result<(), OpError> {
        self.call(
            Method::POST,
            &format!("/v1/elections/{}:resign", held.name),
            Some(json!({"lease_id": lease.id, "token": held.token})),
        )
        .await
        .map(drop)
    }

    /// `PUT /v1/names/{name}`.
    pub async fn register(&self, name: &str, lease: &Lease, value: &str) -> Result<(), OpError> {
        self.call(
            Method::PUT,
            &format!("/v1/names/{name}"),
            Some(json!({"lease_id": lease.id, "value": value})),
        )
        .await
        .map(drop)
    }

    /// `GET /v1/names/{name}`: the registered value.
    pub async fn whereis(&self, name: &str) -> Result<Value, OpError> {
        let v = self
            .call(Method::GET, &format!("/v1/names/{name}"), None)
            .await?;
        Ok(v["value"].clone())
    }

    /// `DELETE /v1/names/{name}`.
    pub async fn unregister(&self, name: &str, lease: &Lease) -> Result<(), OpError> {
        self.call(
            Method::DELETE,
            &format!("/v1/names/{name}"),
            Some(json!({"lease_id": lease.id})),
        )
        .await
        .map(drop)
    }
}

/// The grant fields every scenario uses.
fn held(name: &str, v: &Value) -> Result<Held, OpError> {
    let token = v["token"]
        .as_u64()
        .ok_or_else(|| OpError::Protocol(format!("no token in {v}")))?;
    Ok(Held {
        name: name.to_owned(),
        token,
        key: String::new(),
        revision: v["revision"].as_u64().unwrap_or(token),
    })
}

fn str_field(v: &Value, field: &str) -> Result<String, OpError> {
    v[field]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| OpError::Protocol(format!("no {field} in {v}")))
}

/// A problem+json answer as an [`OpError`] under its stable `code`.
pub fn problem(status: StatusCode, body: &Value) -> OpError {
    let code = body["code"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("http_{}", status.as_u16()));
    OpError::Server {
        status: status.as_u16(),
        code,
        detail: body["detail"].as_str().unwrap_or_default().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_uses_the_stable_code_or_the_status() {
        let e = problem(
            StatusCode::CONFLICT,
            &json!({"code": "lock_held", "detail": "x"}),
        );
        assert_eq!(e.code(), "lock_held");
        let e = problem(StatusCode::NOT_FOUND, &Value::Null);
        assert_eq!(e.code(), "http_404");
    }

    #[test]
    fn grant_fields() {
        let h = held("a", &json!({"token": 7, "revision": 7})).expect("token present");
        assert_eq!((h.token, h.revision), (7, 7));
        assert!(held("a", &json!({})).is_err());
    }
}
