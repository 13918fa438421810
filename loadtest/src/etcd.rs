//! etcd 3.4's HTTP/JSON gRPC gateway (`/v3/...`), the same operations as [`crate::baton`].
//!
//! Keys and values travel base64-encoded; 64-bit ids travel as JSON strings. The
//! gateway omits default values (`false`, `0`), so a missing field means its default.

use data_encoding::BASE64;
use hyper::Method;
use reqwest::Client;
use serde_json::{json, Value};

use crate::error::OpError;
use crate::http::HttpClient;
use crate::target::{Held, Lease};

/// A client of one etcd member's gateway.
#[derive(Debug, Clone)]
pub struct EtcdClient {
    /// For the watch streams of the recipes' waits.
    http: Client,
    /// For the timed operations.
    calls: HttpClient,
}

impl EtcdClient {
    /// A client of the member `calls` talks to (`http://127.0.0.1:2379`), with
    /// `http` for watch streams.
    pub fn new(http: Client, calls: HttpClient) -> Self {
        Self { http, calls }
    }

    async fn call(&self, path: &str, body: Value) -> Result<Value, OpError> {
        let answer = self
            .calls
            .send(Method::POST, path, Some(body.to_string().into_bytes()))
            .await?;
        let status = answer.status;
        let value: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
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

/// The recipes of issue 17 over the gateway: etcd has no server-side shared lock
/// or semaphore, so these are its client-side recipes, with keys under a prefix,
/// each on the client's lease, ordered by create revision, and waits on a watch
/// (never by polling).
impl EtcdClient {
    /// Creates `key` on `lease` if absent (`/v3/kv/txn` on `create_revision ==
    /// 0`, as the recipes' `newUniqueKV`); answers the key (base64) and its
    /// create revision.
    async fn create_unique(&self, key: &str, lease: &Lease) -> Result<(String, u64), OpError> {
        let key = b64(key);
        let v = self
            .call(
                "/v3/kv/txn",
                json!({
                    "compare": [{"target": "CREATE", "key": key, "result": "EQUAL",
                                 "create_revision": "0"}],
                    "success": [{"request_put": {"key": key, "value": "", "lease": lease.id}}],
                }),
            )
            .await?;
        if !v["succeeded"].as_bool().unwrap_or(false) {
            return Err(OpError::Protocol(format!(
                "recipe key {key} already exists"
            )));
        }
        let revision = int_field(&v["header"]["revision"]);
        if revision < 2 {
            return Err(OpError::Protocol(format!("no revision in {v}")));
        }
        Ok((key, revision))
    }

    /// `clientv3/experimental/recipes` RWMutex: `RLock` puts `<prefix>/read/<id>`
    /// and waits until no `<prefix>/write/` key with a lower revision is left;
    /// `Lock` puts `<prefix>/write/<id>` and waits until no key of either kind
    /// with a lower revision is left. Each wait watches the deletion of the last
    /// such key (`waitOnLastRev`: sorted by mod revision, descending, limit 1,
    /// `max_mod_revision` = own revision - 1), then looks again.
    pub async fn rw_lock(
        &self,
        prefix: &str,
        lease: &Lease,
        shared: bool,
        unique: u64,
    ) -> Result<Held, OpError> {
        let kind = if shared { "read" } else { "write" };
        let (key, revision) = self
            .create_unique(&format!("{prefix}/{kind}/{}-{unique:x}", lease.id), lease)
            .await?;
        let blockers = rw_blockers(prefix, shared);
        loop {
            let v = self
                .call(
                    "/v3/kv/range",
                    json!({
                        "key": b64(&blockers),
                        "range_end": BASE64.encode(&prefix_end(blockers.as_bytes())),
                        "sort_order": "DESCEND",
                        "sort_target": "MOD",
                        "limit": 1,
                        "max_mod_revision": (revision - 1).to_string(),
                        "keys_only": true,
                    }),
                )
                .await?;
            let Some(last) = v["kvs"].get(0).and_then(|kv| kv["key"].as_str()) else {
                break;
            };
            self.wait_deleted(last, revision).await?;
        }
        Ok(Held {
            name: prefix.to_owned(),
            token: revision,
            key,
            revision,
        })
    }

    /// A semaphore of `limit` permits (one per key): put `<prefix>/<id>` on the
    /// lease; hold once the own key is among the first `limit` keys of the prefix
    /// by create revision; otherwise watch the deletion of the key just before it
    /// and look again.
    pub async fn semaphore_acquire(
        &self,
        prefix: &str,
        lease: &Lease,
        limit: u32,
        unique: u64,
    ) -> Result<Held, OpError> {
        let (key, revision) = self
            .create_unique(&format!("{prefix}/{}-{unique:x}", lease.id), lease)
            .await?;
        let under = format!("{prefix}/");
        loop {
            let v = self
                .call(
                    "/v3/kv/range",
                    json!({
                        "key": b64(&under),
                        "range_end": BASE64.encode(&prefix_end(under.as_bytes())),
                        "sort_order": "ASCEND",
                        "sort_target": "CREATE",
                        "max_create_revision": revision.to_string(),
                        "keys_only": true,
                    }),
                )
                .await?;
            let keys: Vec<&str> = v["kvs"]
                .as_array()
                .map(|kvs| kvs.iter().filter_map(|kv| kv["key"].as_str()).collect())
                .unwrap_or_default();
            match semaphore_turn(&keys, &key, limit) {
                Turn::Hold => break,
                Turn::WaitFor(before) => {
                    let before = before.to_owned();
                    self.wait_deleted(&before, revision).await?;
                }
                Turn::Gone => {
                    return Err(OpError::Server {
                        status: 200,
                        code: "lease_not_found".into(),
                        detail: format!("semaphore key {key} is gone"),
                    })
                }
            }
        }
        Ok(Held {
            name: prefix.to_owned(),
            token: revision,
            key,
            revision,
        })
    }

    /// `/v3/kv/deleterange` of a recipe's key (its release).
    pub async fn delete_key(&self, held: &Held) -> Result<(), OpError> {
        self.call("/v3/kv/deleterange", json!({"key": held.key}))
            .await
            .map(drop)
    }

    /// Watches `key` (base64) from `from_revision` on `/v3/watch` (the gateway's
    /// streaming call: one JSON object per message, `{"result": ...}`) until an
    /// event deletes it.
    pub async fn wait_deleted(&self, key: &str, from_revision: u64) -> Result<(), OpError> {
        let mut response = self
            .http
            .post(format!("{}/v3/watch", self.calls.base()))
            .json(&json!({"create_request": {"key": key,
                "start_revision": from_revision.to_string(), "filters": ["NOPUT"]}}))
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() {
            let body = response.bytes().await.unwrap_or_default();
            let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            return Err(grpc_error(status.as_u16(), &value));
        }
        let mut buf = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            buf.extend_from_slice(&chunk);
            for message in take_json_values(&mut buf)? {
                if message.get("error").is_some() {
                    return Err(grpc_error(200, &message));
                }
                let result = &message["result"];
                if result["canceled"].as_bool().unwrap_or(false) {
                    return Err(OpError::Protocol(format!("watch canceled: {message}")));
                }
                if deletes(result, key) {
                    // Dropping the response closes the stream, which cancels the watch.
                    return Ok(());
                }
            }
        }
        Err(OpError::Protocol("the watch stream ended".into()))
    }
}

/// Where an RWMutex request looks for keys that block it: a reader only behind
/// writers, a writer behind everyone.
fn rw_blockers(prefix: &str, shared: bool) -> String {
    if shared {
        format!("{prefix}/write/")
    } else {
        format!("{prefix}/")
    }
}

/// The end of the key range of everything starting with `prefix` (etcd's
/// `GetPrefixRangeEnd`: the last byte below 0xff incremented, the rest dropped).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: the range runs to the end of the keyspace.
    vec![0]
}

/// Where a semaphore request stands among the keys (base64, ascending create
/// revision, up to its own).
#[derive(Debug, PartialEq, Eq)]
enum Turn<'a> {
    /// Among the first `limit`: it holds a permit.
    Hold,
    /// Behind: wait for this key (the one just before) to go, then look again.
    WaitFor(&'a str),
    /// Its own key is not there (the lease expired).
    Gone,
}

fn semaphore_turn<'a>(keys: &[&'a str], mine: &str, limit: u32) -> Turn<'a> {
    match keys.iter().position(|k| *k == mine) {
        None => Turn::Gone,
        Some(i) if i < limit as usize => Turn::Hold,
        Some(i) => Turn::WaitFor(keys[i - 1]),
    }
}

/// Whether a watch response carries a deletion of `key`.
fn deletes(result: &Value, key: &str) -> bool {
    result["events"].as_array().is_some_and(|events| {
        events
            .iter()
            .any(|e| e["type"].as_str() == Some("DELETE") && e["kv"]["key"].as_str() == Some(key))
    })
}

/// Takes every complete JSON value out of the front of `buf` (a stream of
/// concatenated or newline-separated objects cut anywhere by the transport).
fn take_json_values(buf: &mut Vec<u8>) -> Result<Vec<Value>, OpError> {
    let mut values = Vec::new();
    let mut stream = serde_json::Deserializer::from_slice(buf).into_iter::<Value>();
    let mut used = 0;
    loop {
        match stream.next() {
            Some(Ok(v)) => {
                values.push(v);
                used = stream.byte_offset();
            }
            Some(Err(e)) if e.is_eof() => break,
            Some(Err(e)) => return Err(OpError::Protocol(format!("watch stream: {e}"))),
            None => {
                used = stream.byte_offset();
                break;
            }
        }
    }
    buf.drain(..used);
    Ok(values)
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
    fn recipe_key_ranges() {
        assert_eq!(rw_blockers("rw/a", true), "rw/a/write/");
        assert_eq!(rw_blockers("rw/a", false), "rw/a/");
        assert_eq!(prefix_end(b"rw/a/"), b"rw/a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn a_semaphore_request_holds_among_the_first_limit_keys_else_waits_for_its_predecessor() {
        let keys = ["k1", "k2", "k3", "k4"];
        assert_eq!(semaphore_turn(&keys, "k1", 2), Turn::Hold);
        assert_eq!(semaphore_turn(&keys, "k2", 2), Turn::Hold);
        assert_eq!(semaphore_turn(&keys, "k3", 2), Turn::WaitFor("k2"));
        assert_eq!(semaphore_turn(&keys, "k4", 2), Turn::WaitFor("k3"));
        assert_eq!(semaphore_turn(&keys, "k4", 4), Turn::Hold);
        assert_eq!(semaphore_turn(&keys, "k9", 8), Turn::Gone);
    }

    #[test]
    fn watch_messages_are_parsed_across_chunks() {
        let mut buf = br#"{"result":{"created":true}}
{"result":{"events":[{"type":"DELETE","kv":{"key":"YQ=="}}]}}{"res"#
            .to_vec();
        let values = take_json_values(&mut buf).expect("valid JSON");
        assert_eq!(values.len(), 2);
        assert!(!deletes(&values[0]["result"], "YQ=="));
        assert!(deletes(&values[1]["result"], "YQ=="));
        assert!(!deletes(&values[1]["result"], "Yg=="));
        assert_eq!(buf, br#"{"res"#.to_vec());
        buf.extend_from_slice(br#"ult":{}}"#);
        assert_eq!(take_json_values(&mut buf).expect("valid").len(), 1);
        assert!(buf.is_empty());
        let mut bad = b"{]".to_vec();
        assert!(take_json_values(&mut bad).is_err());
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
