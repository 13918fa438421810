//! Rules applied to the generated OpenAPI document, so that it describes the
//! wire as the server really speaks it: authentication, the error statuses every
//! endpoint of a kind can answer, the bounds the server checks, event-stream
//! items, and links between operations (what schemathesis' stateful phase and
//! client generators follow).
//!
//! Written once here instead of on each of the 26 handlers: a rule such as "an
//! operation with a `min_revision` query answers 504" cannot then be forgotten
//! on the next handler. The document stays generated from the code (`make
//! openapi`), and `openapi_drift` fails when the committed copy differs.

use baton_core::CoreError;
use baton_raft::RaftLayerError;
use serde_json::{json, Map, Value};

use crate::error::ApiError;

/// Operations open without a token by default (`endpoints` in the auth file).
const OPTIONAL_AUTH: &[&str] = &["healthz", "readyz", "metrics"];
/// Operations always open: this document, its page and the console page.
const OPEN: &[&str] = &["openapi", "docs", "ui"];
/// Operations that also take the cluster secret instead of a token.
const MEMBERSHIP: &[&str] = &[
    "add_member",
    "remove_member",
    "force_release_lock",
    "force_release_election",
    "force_release_name",
];

/// `A-Z a-z 0-9 . _ - / @ + = ~`, `/` only between segments (see
/// `baton_core::validate_name`).
const NAME_PATTERN: &str = "^[A-Za-z0-9._@+=~-]+(/[A-Za-z0-9._@+=~-]+)*$";

/// Applies every rule to `doc`, the document utoipa generated.
pub(crate) fn apply(doc: &mut Value) {
    declare_security(doc);
    unsigned_integers(doc);
    body_bounds(doc);
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for operation in item.values_mut() {
            operation_rules(operation);
        }
    }
    add_links(doc);
    add_examples(doc);
}

fn declare_security(doc: &mut Value) {
    doc["components"]["securitySchemes"] = json!({
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "A token from the server's --auth-file (needed when auth is on; see SECURITY.md)."
        },
        "cluster_secret": {
            "type": "apiKey",
            "in": "header",
            "name": "baton-cluster-secret",
            "description": "The cluster secret (--cluster-secret): membership changes only."
        }
    });
    doc["security"] = json!([{"bearer": []}]);
}

fn operation_rules(operation: &mut Value) {
    let id = operation["operationId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if OPEN.contains(&id.as_str()) {
        operation["security"] = json!([{}]);
        return;
    }
    if OPTIONAL_AUTH.contains(&id.as_str()) {
        operation["security"] = json!([{}, {"bearer": []}]);
    }
    if MEMBERSHIP.contains(&id.as_str()) {
        operation["security"] = json!([{"bearer": []}, {"cluster_secret": []}]);
        if let Some(params) = operation
            .get_mut("parameters")
            .and_then(Value::as_array_mut)
        {
            params.retain(|p| p["name"] != "baton-cluster-secret");
        }
    }
    let mut has = Has::default();
    if let Some(params) = operation
        .get_mut("parameters")
        .and_then(Value::as_array_mut)
    {
        for param in params.iter_mut() {
            has.note(param);
            bound_parameter(param);
        }
    }
    has.body = operation.get("requestBody").is_some();
    let responses = &mut operation["responses"];
    ensure(
        responses,
        "401",
        "unauthenticated: auth is on and the request has no valid bearer token",
        ApiError::Unauthenticated(crate::auth::NO_TOKEN.into()),
    );
    ensure(
        responses,
        "403",
        "forbidden: the principal may not use this name, lease or endpoint",
        ApiError::Forbidden("principal 'ci' may not use locks named 'team-b/deploy'".into()),
    );
    if has.name || has.query || has.body || has.idempotency_key || id == "remove_member" {
        ensure(
            responses,
            "400",
            "invalid_name, invalid_query, invalid_body, invalid_idempotency_key (as the request's parts apply)",
            ApiError::InvalidBody("unknown field `ttl`, expected one of `lease_id`, `ttl_ms`, `holder`, `wait_ms`, `lock_delay_ms` at line 1 column 6".into()),
        );
    }
    if has.body {
        ensure(
            responses,
            "413",
            "body_too_large (over 16 KiB), value_too_large",
            ApiError::BodyTooLarge(16 * 1024),
        );
    }
    if has.idempotency_key {
        ensure(
            responses,
            "422",
            "idempotency_key_reused: the key was used for a different request",
            ApiError::Core(CoreError::IdempotencyKeyReused),
        );
    }
    if has.min_revision {
        ensure(
            responses,
            "504",
            "revision_not_reached: min_revision was not applied within the node's \
             --min-revision-wait-ms (3 s by default)",
            ApiError::Raft(RaftLayerError::RevisionNotReached {
                wanted: 1200,
                applied: 1187,
            }),
        );
    }
    if !OPTIONAL_AUTH.contains(&id.as_str()) {
        ensure(
            responses,
            "429",
            "quota_exceeded: a cap was reached, named in detail and, for admission quotas, given in limit: leases, holdings, waiters or idempotency keys per principal, leases in the cluster, holdings on one lease, waiters on one lock, watch streams, or the request rate (then with Retry-After)",
            ApiError::Core(CoreError::QuotaReached {
                what: "a principal owns at most 100000 leases".into(),
                limit: 100_000,
            }),
        );
        ensure(
            responses,
            "503",
            "unavailable (no leader or quorum) or overloaded (the write queue is full; nothing was applied): retry after Retry-After",
            ApiError::Raft(RaftLayerError::Overloaded { queued: 8192 }),
        );
        ensure(
            responses,
            "500",
            "internal: a bug in Baton, never an outage (logged, counted in baton_internal_errors_total); no Retry-After: retrying does not help",
            ApiError::Internal("the state machine gave a reply this request cannot have".into()),
        );
        for status in ["429", "503"] {
            if let Some(response) = responses.get_mut(status) {
                let required = status == "503";
                response["headers"]["Retry-After"] = json!({
                    "description": "Seconds to wait before retrying",
                    "required": required,
                    "schema": {"type": "integer", "minimum": 1}
                });
            }
        }
    }
    event_stream_items(responses);
}

/// What an operation's request has, which decides the errors it can answer.
#[derive(Default)]
struct Has {
    name: bool,
    query: bool,
    body: bool,
    idempotency_key: bool,
    min_revision: bool,
}

impl Has {
    fn note(&mut self, param: &Value) {
        let name = param["name"].as_str().unwrap_or_default();
        match (param["in"].as_str().unwrap_or_default(), name) {
            ("path", "name") => self.name = true,
            ("header", "Idempotency-Key") => self.idempotency_key = true,
            ("query", "min_revision") => {
                self.query = true;
                self.min_revision = true;
            }
            ("query", _) => self.query = true,
            _ => {}
        }
    }
}

/// The bounds the server checks, on the parameters it checks them on.
fn bound_parameter(param: &mut Value) {
    let schema = match (param["in"].as_str(), param["name"].as_str()) {
        (Some("path"), Some("name")) => json!({
            "type": "string", "minLength": 1, "maxLength": baton_core::MAX_NAME_BYTES,
            "pattern": NAME_PATTERN
        }),
        (Some("header"), Some("Idempotency-Key")) => json!({
            "type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[ -~]+$"
        }),
        (Some("query"), Some("limit")) => json!({"type": "integer", "minimum": 1, "maximum": 1000}),
        (Some("query"), Some("consistency")) => json!({
            "type": "string", "enum": ["linearizable", "local"]
        }),
        // The upper bound is the server's interval (10 s unless configured).
        (Some("query"), Some("bookmark_ms")) => {
            json!({"type": "integer", "minimum": 100, "maximum": 10000})
        }
        // From the kinds the watch accepts, so a new kind cannot be left out.
        (Some("query"), Some("kinds")) => {
            let kinds = baton_raft::WatchKind::ALL
                .map(|kind| kind.as_str())
                .join("|");
            json!({"type": "string", "pattern": format!("^(({kinds})(,({kinds}))*)?$")})
        }
        (Some("path"), Some("id")) => json!({"type": "integer", "format": "uint64", "minimum": 1}),
        (Some("header"), Some("Last-Event-ID")) => json!({
            "type": "integer", "format": "uint64", "minimum": 0, "maximum": u64::MAX
        }),
        // Opaque to clients, but only hex ever comes back from the server.
        (Some("query"), Some("page_token")) => {
            json!({"type": "string", "pattern": "^([0-9a-f]{2})*$"})
        }
        _ => return,
    };
    param["schema"] = schema;
}

/// Revisions, tokens and ids are unsigned 64-bit: the server takes values
/// above `i64::MAX`, so `int64` would call valid input invalid.
fn unsigned_integers(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("format") == Some(&json!("int64")) && map.get("minimum") == Some(&json!(0)) {
                map.insert("format".into(), json!("uint64"));
                map.insert("maximum".into(), json!(u64::MAX));
            }
            map.values_mut().for_each(unsigned_integers);
        }
        Value::Array(items) => items.iter_mut().for_each(unsigned_integers),
        _ => {}
    }
}

/// Body fields the state machine bounds (the defaults of `baton serve`'s
/// limits; a server configured otherwise says so in its problems).
fn body_bounds(doc: &mut Value) {
    let limits = baton_core::Limits::default();
    let schemas = doc
        .get_mut("components")
        .and_then(|c| c.get_mut("schemas"))
        .and_then(Value::as_object_mut);
    let Some(schemas) = schemas else {
        return;
    };
    for schema in schemas.values_mut() {
        let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
            continue;
        };
        for (name, property) in properties.iter_mut() {
            let (minimum, maximum) = match name.as_str() {
                "ttl_ms" => (limits.min_ttl_ms, limits.max_ttl_ms),
                "wait_ms" => (0, 300_000),
                "lock_delay_ms" => (0, limits.max_lock_delay_ms),
                _ => continue,
            };
            property["minimum"] = json!(minimum);
            property["maximum"] = json!(maximum);
        }
    }
    if let Some(semaphore) = schemas
        .get_mut("SemaphoreAcquireBody")
        .and_then(|s| s.get_mut("properties"))
    {
        for field in ["limit", "permits"] {
            semaphore[field]["minimum"] = json!(1);
            semaphore[field]["maximum"] = json!(baton_core::MAX_SEMAPHORE_LIMIT);
        }
    }
    if let Some(list) = schemas
        .get_mut("AcquireAllBody")
        .and_then(|s| s.get_mut("properties"))
    {
        list["locks"]["minItems"] = json!(1);
        list["locks"]["maxItems"] = json!(baton_core::MAX_LOCKS_PER_ACQUIRE);
    }
    if let Some(choice) = schemas
        .get_mut("LockChoice")
        .and_then(|s| s.get_mut("properties"))
    {
        choice["name"]["minLength"] = json!(1);
        choice["name"]["maxLength"] = json!(baton_core::MAX_NAME_BYTES);
        choice["name"]["pattern"] = json!(NAME_PATTERN);
    }
    let member = schemas
        .get_mut("AddMemberBody")
        .and_then(|s| s.get_mut("properties"));
    if let Some(member) = member {
        member["id"]["minimum"] = json!(1);
        for url in ["api_addr", "raft_addr"] {
            member[url]["pattern"] = json!("^https?://[!-~]*$");
            member[url]["maxLength"] = json!(256);
        }
    }
}

/// Adds a problem+json response for `status` unless the operation has one;
/// its example is `example` as the server would send it (the same table and
/// the same serialization), so examples cannot drift from the wire either.
fn ensure(responses: &mut Value, status: &str, description: &str, example: ApiError) {
    if responses.get(status).is_some() {
        return;
    }
    responses[status] = json!({
        "description": description,
        "content": {"application/problem+json": {
            "schema": {"$ref": "#/components/schemas/Problem"},
            "example": example.problem()
        }}
    });
}

/// Each item of a `text/event-stream` response (schemathesis and OpenAPI 3.2
/// read the media type's schema per event): `data` is JSON text.
fn event_stream_items(responses: &mut Value) {
    let Some(responses) = responses.as_object_mut() else {
        return;
    };
    for response in responses.values_mut() {
        let stream = response
            .get_mut("content")
            .and_then(|content| content.get_mut("text/event-stream"));
        if let Some(stream) = stream {
            stream["schema"] = json!({
                "type": "object",
                "required": ["data"],
                "properties": {
                    "id": {"type": "string", "description": "The revision; resume with Last-Event-ID"},
                    "event": {"type": "string", "description": "`<kind>.<what>`, `bookmark` or `resync`"},
                    "data": {"type": "string", "contentMediaType": "application/json"},
                    "retry": {"type": "integer"}
                }
            });
        }
    }
}

/// Links from the operations that create a lease or a holding to those that use
/// it (`$response.body#/...` of the first, into the path or body of the next).
/// The body expressions go under `x-request-body`, not `requestBody`: OpenAPI
/// 3.1 allows an object there, but openapi-generator's validator (which Go and
/// Java client generation run first) refuses anything but a string; the fuzz
/// harness renames the key back in the copy schemathesis reads.
fn add_links(doc: &mut Value) {
    let lease_links = |from: &str| {
        json!({
            "keepalive": {"operationId": "keepalive_lease", "parameters": {"lease_id": from}},
            "get_lease": {"operationId": "get_lease", "parameters": {"lease_id": from}},
            "revoke": {"operationId": "revoke_lease", "parameters": {"lease_id": from}}
        })
    };
    let mut links: Vec<(&str, &str, Value)> = vec![(
        "create_lease",
        "201",
        merge(
            lease_links("$response.body#/lease_id"),
            json!({
                "acquire": {"operationId": "acquire_lock", "x-request-body": {"lease_id": "$response.body#/lease_id"}},
                "campaign": {"operationId": "campaign", "x-request-body": {"lease_id": "$response.body#/lease_id"}},
                "register": {"operationId": "register_name", "x-request-body": {"lease_id": "$response.body#/lease_id", "value": null}}
            }),
        ),
    )];
    let holder = json!({"lease_id": "$response.body#/lease_id", "token": "$response.body#/token"});
    links.push((
        "acquire_lock",
        "200",
        merge(
            lease_links("$response.body#/lease_id"),
            json!({
                "renew": {"operationId": "renew_lock", "parameters": {"name": "$request.path.name"}, "x-request-body": holder},
                "release": {"operationId": "release_lock", "parameters": {"name": "$request.path.name"}, "x-request-body": holder},
                "validate": {"operationId": "validate_lock", "parameters": {"name": "$request.path.name"}, "x-request-body": {"token": "$response.body#/token"}},
                "get": {"operationId": "get_lock", "parameters": {"name": "$request.path.name"}}
            }),
        ),
    ));
    links.push((
        "renew_lock",
        "200",
        json!({
            "release": {"operationId": "release_lock", "parameters": {"name": "$request.path.name"},
                        "x-request-body": {"lease_id": "$request.body#/lease_id", "token": "$response.body#/token"}},
            "validate": {"operationId": "validate_lock", "parameters": {"name": "$request.path.name"}, "x-request-body": {"token": "$response.body#/token"}}
        }),
    ));
    links.push((
        "campaign",
        "200",
        merge(
            lease_links("$response.body#/lease_id"),
            json!({
                "proclaim": {"operationId": "proclaim", "parameters": {"name": "$request.path.name"},
                             "x-request-body": {"lease_id": "$response.body#/lease_id", "token": "$response.body#/token", "value": null}},
                "resign": {"operationId": "resign", "parameters": {"name": "$request.path.name"}, "x-request-body": holder},
                "get": {"operationId": "get_election", "parameters": {"name": "$request.path.name"}},
                "observe": {"operationId": "observe_election", "parameters": {"name": "$request.path.name"}}
            }),
        ),
    ));
    links.push((
        "proclaim",
        "200",
        json!({
            "resign": {"operationId": "resign", "parameters": {"name": "$request.path.name"},
                       "x-request-body": {"lease_id": "$request.body#/lease_id", "token": "$response.body#/token"}}
        }),
    ));
    let name_links = merge(
        lease_links("$response.body#/lease_id"),
        json!({
            "get": {"operationId": "get_name", "parameters": {"name": "$request.path.name"}},
            "unregister": {"operationId": "unregister_name", "parameters": {"name": "$request.path.name"},
                           "x-request-body": {"lease_id": "$response.body#/lease_id"}}
        }),
    );
    links.push(("register_name", "200", name_links.clone()));
    links.push(("register_name", "201", name_links));
    links.push((
        "add_member",
        "200",
        json!({"remove": {"operationId": "remove_member", "parameters": {"id": "$response.body#/id"}}}),
    ));
    for (operation_id, status, set) in links {
        if let Some(response) = find_operation(doc, operation_id)
            .and_then(|op| op.get_mut("responses").and_then(|r| r.get_mut(status)))
        {
            response["links"] = set;
        }
    }
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

fn find_operation<'a>(doc: &'a mut Value, operation_id: &str) -> Option<&'a mut Value> {
    doc.get_mut("paths")?
        .as_object_mut()?
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(Map::values_mut)
        .find(|op| op["operationId"] == operation_id)
}

/// An example on every answer that has none: JSON bodies from `spec_examples`
/// (values of the answer's own type), problems from the error the description
/// names first (`lock_held ...`: what `ApiError` sends for it), event streams
/// one item, `/metrics` a few lines.
fn add_examples(doc: &mut Value) {
    let examples: Map<String, Value> = crate::spec_examples::by_schema()
        .into_iter()
        .map(|(name, example)| (format!("#/components/schemas/{name}"), example))
        .collect();
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    let operations = paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(Map::values_mut);
    for operation in operations {
        let Some(responses) = operation
            .get_mut("responses")
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        for (status, response) in responses.iter_mut() {
            let named_code = response["description"]
                .as_str()
                .unwrap_or_default()
                .split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .next()
                .unwrap_or_default()
                .to_owned();
            let Some(content) = response.get_mut("content").and_then(Value::as_object_mut) else {
                continue;
            };
            for (media_type, body) in content.iter_mut() {
                if body.get("example").is_some() {
                    continue;
                }
                let example = match media_type.as_str() {
                    "text/event-stream" => Some(crate::spec_examples::event_stream_item()),
                    m if m.starts_with("text/plain") => Some(crate::spec_examples::metrics()),
                    "application/problem+json" => {
                        crate::spec_examples::problem(&named_code).map(|e| json!(e.problem()))
                    }
                    _ if status.starts_with('5') => Some(json!({"status": "not_ready"})),
                    _ => body["schema"]["$ref"]
                        .as_str()
                        .and_then(|reference| examples.get(reference))
                        .cloned(),
                };
                if let Some(example) = example {
                    body["example"] = example;
                }
            }
        }
    }
}
