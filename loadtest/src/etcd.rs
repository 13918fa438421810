//! etcd 3.4's HTTP/JSON gRPC gateway (`/v3/...`), the same operations as [`crate::baton`].
//!
//! Keys and values travel base64-encoded; 64-bit ids travel as JSON strings. The
//! gateway omits default values (`false`, `0`), so a missing field means its default.

use data_encoding::BASE64;
use reqwest::Client;
use serde_json::{json, Value};

use crate::error::OpError;
use crate::target::{Held, Lease};

/// A client of one etcd member's gateway.
#[derive(Debug, Clone)]
pub struct EtcdClient {
    http: Client,
    base: String,
}

impl EtcdClient {
    /// A client of the member at `base` (`http://127.0.0.1:2379`), on a shared pool.
    pub fn new(http: Client, base: &str) -> Self {
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    async fn call(&self, path: &str, body: Value) -> Result<Value, OpError> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        // Unary errors come as a non-2xx status with `{"error", "code"}`; streaming
        // calls (keepalive) answer 200 with `{"error": {...}}`.
        if !status.is_success() || value.get("error").is_some() {
            return Err(grpc_error(status.as_u16(), &value));
        }
        Ok(value)
    }

    /// `POST /v3/lease/grant` (TTL in whole seconds, at least 1).
    pub async fn grant(&self, ttl_ms: u64) -> Result<Lease, OpError> {
        let ttl_s = ttl_ms.div_ceil(1000).max(1);
        let v = self.call("/v3/lease/grant", json!({"TTL": ttl_s})).await?;
        Ok(Lease {
            id: id_field(&v["ID"])?,
        })
    }

    /// `POST /v3/lease/keepalive`: one request on the streaming call. A lease that is
    /// gone answers without a positive TTL, reported as `lease_not_found`.
    pub async fn keepalive(&self, lease: &Lease) -> Result<(), OpError> {
        let v = self
            .call("/v3/lease/keepalive", json!({"ID": lease.id}))
            .await?;
        let ttl = int_field(&v["result"]["TTL"]);
        if ttl > 0 {
            Ok(())
        } else {
            Err(OpError::Server {
                status: 200,
                code: "lease_not_found".into(),
                detail: format!("keepalive answered {v}"),
            })
        }
    }

    /// `POST /v3/lease/revoke`.
    pub async fn revoke(&self, lease: &Lease) -> Result<(), OpError> {
        self.call("/v3/lease/revoke", json!({"ID": lease.id}))
            .await
            .map(drop)
    }

    /// `POST /v3/lock/lock`: blocks until the lock is granted (etcd has no wait bound).
    pub async fn acquire(&self, name: &str, lease: &Lease) -> Result<Held, OpError> {
        let v = self
            .call(
                "/v3/lock/lock",
                json!({"name": b64(name), "lease": lease.id}),
            )
            .await?;
        let key = v["key"]
            .as_str()
            .ok_or_else(|| OpError::Protocol(format!("no key in {v}")))?
            .to_owned();
        Ok(Held {
            name: name.to_owned(),
            token: int_field(&v["header"]["revision"]),
            key,
            revision: int_field(&v["header"]["revision"]),
        })
    }

    /// `POST /v3/lock/unlock`.
    pub async fn release(&self, held: &Held) -> Result<u64, OpError> {
        let v = self
            .call("/v3/lock/unlock", json!({"key": held.key}))
            .await?;
        Ok(int_field(&v["header"]["revision"]))
    }

    /// `POST /v3/election/campaign`: blocks until elected.
    pub async fn campaign(&self, name: &str, lease: &Lease, value: &str) -> Result<Held, OpError> {
        let v = self
            .call(
                "/v3/election/campaign",
                json!({"name": b64(name), "lease": lease.id, "value": b64(value)}),
            )
            .await?;
        let leader = &v["leader"];
        if leader.is_null() {
            return Err(OpError::Protocol(format!("no leader in {v}")));
        }
        Ok(Held {
            name: name.to_owned(),
            token: int_field(&leader["rev"]),
            key: leader.to_string(),
            revision: int_field(&v["header"]["revision"]),
        })
    }

    /// `POST /v3/election/resign`.
    pub async fn resign(&self, held: &Held) -> Result<(), OpError> {
        let leader: Value = serde_json::from_str(&held.key)
            .map_err(|e| OpError::Protocol(format!("leader key: {e}")))?;
        self.call("/v3/election/resign", json!({"leader": leader}))
            .await
            .map(drop)
    }

    /// Put-if-absent with the lease (`/v3/kv/txn` on `create_revision == 0`).
    pub async fn register(&self, name: &str, lease: &Lease, value: &str) -> Result<(), OpError> {
        let key = b64(name);
        let v = self
            .call(
                "/v3/kv/txn",
                json!({
                    "compare": [{"target": "CREATE", "key": key, "result": "EQUAL",
                                 "create_revision": "0"}],
                    "success": [{"request_put": {"key": key, "value": b64(value),
                                                 "lease": lease.id}}],
                }),
            )
            .await?;
        if v["succeeded"].as_bool().unwrap_or(false) {
            Ok(())
        } else {
            Err(refused("name_taken", name))
        }
    }

    /// `/v3/kv/range` on the name: its value.
    pub async fn whereis(&self, name: &str) -> Result<Value, OpError> {
        let v = self.call("/v3/kv/range", json!({"key": b64(name)})).await?;
        match v["kvs"].get(0) {
            Some(kv) => Ok(kv["value"].clone()),
            None => Err(refused("not_found", name)),
        }
    }

    /// Delete-if-owned (`/v3/kv/txn` on the key's lease).
    pub async fn unregister(&self, name: &str, lease: &Lease) -> Result<(), OpError> {
        let key = b64(name);
        let v = self
            .call(
                "/v3/kv/txn",
                json!({
                    "compare": [{"target": "LEASE", "key": key, "result": "EQUAL",
                                 "lease": lease.id}],
                    "success": [{"request_delete_range": {"key": key}}],
                }),
            )
            .await?;
        if v["succeeded"].as_bool().unwrap_or(false) {
            Ok(())
        } else {
            Err(refused("not_owner", name))
        }
    }
}

fn b64(s: &str) -> String {
    BASE64.encode(s.as_bytes())
}

/// A gateway int64: a JSON string (or number); absent means 0.
fn int_field(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse::<i64>().map(|n| n.max(0) as u64).unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

fn id_field(v: &Value) -> Result<String, OpError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(OpError::Protocol(format!("no lease ID in {v}"))),
    }
}

/// A gateway error as an [`OpError`]; the codes that mean the same as Baton's get
/// Baton's names so reports compare.
pub fn grpc_error(status: u16, body: &Value) -> OpError {
    let error = if body["error"].is_object() {
        &body["error"]
    } else {
        body
    };
    let message = error["message"]
        .as_str()
        .or_else(|| error["error"].as_str())
        .unwrap_or_default()
        .to_owned();
    let code = if message.contains("lease not found") {
        "lease_not_found".to_owned()
    } else if let Some(n) = error["code"].as_u64() {
        format!("grpc_{n}")
    } else {
        format!("http_{status}")
    };
    OpError::Server {
        status,
        code,
        detail: message,
    }
}

/// A request etcd answered (200) without doing it: a failed transaction
/// comparison or a missing key, reported under `code`.
fn refused(code: &str, name: &str) -> OpError {
    OpError::Server {
        status: 200,
        code: code.into(),
        detail: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_not_found_is_named_like_batons() {
        let body = json!({"error": "etcdserver: requested lease not found",
                          "message": "etcdserver: requested lease not found", "code": 5});
        assert_eq!(grpc_error(404, &body).code(), "lease_not_found");
        let streamed = json!({"error": {"grpc_code": 14, "code": 14, "message": "unavailable"}});
        assert_eq!(grpc_error(200, &streamed).code(), "grpc_14");
        assert_eq!(grpc_error(502, &Value::Null).code(), "http_502");
    }

    #[test]
    fn gateway_ints_are_strings() {
        assert_eq!(int_field(&json!("60")), 60);
        assert_eq!(int_field(&json!("-1")), 0);
        assert_eq!(int_field(&Value::Null), 0);
        assert_eq!(id_field(&json!("123")).expect("string id"), "123");
        assert_eq!(b64("ab"), "YWI=");
    }
}
