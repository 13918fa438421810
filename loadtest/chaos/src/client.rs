//! A minimal Baton HTTP client that classifies every answer as a history outcome.

use std::time::Duration;

use serde_json::Value;

/// What a request came back with.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// 2xx with its JSON body.
    Ok(Value),
    /// A definite failure (4xx): the request did not take effect.
    Fail {
        /// HTTP status.
        status: u16,
        /// The problem's `code`.
        code: String,
        /// The body (for `holder`/`token` of the current owner).
        body: Value,
    },
    /// Timeout, connection error, 5xx (including 503 `unavailable`, which a
    /// forwarding follower may answer after the leader already proposed it): the
    /// request may or may not have taken effect.
    Unknown(String),
}

/// How long this harness's and the load tool's connection pools keep an idle
/// connection. Well under the 5 s after which a Baton node closes a connection
/// that sends nothing (its keep-alive, and the wait for a new connection's
/// first request; 4.5 s at the earliest, the node's clock being read every
/// 500 ms), so that the pool always lets go first. Kept longer, a request can
/// go out on a connection the node is closing: a transport error, or the
/// node's unsolicited `408 Request Timeout` read as the request's answer
/// (`make test`'s overload run met that once in 26,252 acquires).
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(3);

/// A client builder with this harness's pool settings: idle connections
/// dropped after [`POOL_IDLE_TIMEOUT`], no Nagle delay, and no proxy from the
/// environment (`HTTP_PROXY`): the harness and the load tool talk to servers they
/// started on loopback, and the load tool's own connections (`loadtest/src/http.rs`)
/// never go through a proxy either.
pub fn pooled_http_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .tcp_nodelay(true)
        .no_proxy()
}

/// HTTP client over one connection pool, talking to one node's API URL per call.
#[derive(Clone)]
pub struct BatonClient {
    http: reqwest::Client,
}

impl BatonClient {
    /// A client whose requests give up after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        let http = pooled_http_client()
            .timeout(timeout)
            .connect_timeout(Duration::from_millis(500))
            .pool_max_idle_per_host(4)
            .build()
            .expect("a client without TLS settings builds");
        Self { http }
    }

    /// `POST base+path` with a JSON body.
    pub async fn post(&self, base: &str, path: &str, body: &Value, timeout: Duration) -> Reply {
        let req = self
            .http
            .post(format!("{base}{path}"))
            .timeout(timeout)
            .json(body);
        classify(req.send().await).await
    }

    /// `PUT base+path` with a JSON body.
    pub async fn put(&self, base: &str, path: &str, body: &Value, timeout: Duration) -> Reply {
        let req = self
            .http
            .put(format!("{base}{path}"))
            .timeout(timeout)
            .json(body);
        classify(req.send().await).await
    }

    /// `DELETE base+path` with a JSON body.
    pub async fn delete(&self, base: &str, path: &str, body: &Value, timeout: Duration) -> Reply {
        let req = self
            .http
            .delete(format!("{base}{path}"))
            .timeout(timeout)
            .json(body);
        classify(req.send().await).await
    }

    /// `GET base+path`.
    pub async fn get(&self, base: &str, path: &str, timeout: Duration) -> Reply {
        let req = self.http.get(format!("{base}{path}")).timeout(timeout);
        classify(req.send().await).await
    }
}

async fn classify(res: Result<reqwest::Response, reqwest::Error>) -> Reply {
    let res = match res {
        Ok(r) => r,
        // Never connected: the request never reached a server, so it did not happen.
        Err(e) if e.is_connect() => {
            return Reply::Fail {
                status: 0,
                code: "connect".into(),
                body: Value::Null,
            }
        }
        Err(e) => return Reply::Unknown(error_kind(&e)),
    };
    let status = res.status().as_u16();
    let body: Value = match res.bytes().await {
        Ok(b) => serde_json::from_slice(&b).unwrap_or(Value::Null),
        Err(e) => return Reply::Unknown(error_kind(&e)),
    };
    match status {
        200..=299 => Reply::Ok(body),
        400..=499 => Reply::Fail {
            status,
            code: body
                .get("code")
                .and_then(Value::as_str)
                .unwrap_or("unknown_4xx")
                .to_owned(),
            body,
        },
        _ => Reply::Unknown(format!(
            "http_{status}_{}",
            body.get("code").and_then(Value::as_str).unwrap_or("")
        )),
    }
}

fn error_kind(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connect".into()
    } else {
        "transport".into()
    }
}

/// A field of a JSON body as u64.
pub fn u64_field(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// A field of a JSON body as a string.
pub fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idle_server::IdleRecordingServer;

    /// The pool used to keep idle connections 90 s (reqwest's default): a
    /// request after a quiet spell went out on a connection the node had
    /// already given up on (the overload run's `408 null`).
    #[tokio::test]
    async fn the_pool_lets_go_of_idle_connections_before_a_node_closes_them() {
        let server = IdleRecordingServer::start(Duration::from_millis(200))
            .await
            .expect("a local listener");
        let client = pooled_http_client().build().expect("a client");
        let url = format!("{}/v1/locks/some-lock", server.base);
        let quiet = POOL_IDLE_TIMEOUT + Duration::from_millis(500);
        let longest = server
            .longest_idle_across(&client, &url, quiet)
            .await
            .expect("answered");
        assert!(
            longest < quiet,
            "a request came on a connection idle for {longest:?}"
        );
    }
}
