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

/// HTTP client over one connection pool, talking to one node's API URL per call.
#[derive(Clone)]
pub struct BatonClient {
    http: reqwest::Client,
}

impl BatonClient {
    /// A client whose requests give up after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_millis(500))
            .pool_max_idle_per_host(4)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
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
