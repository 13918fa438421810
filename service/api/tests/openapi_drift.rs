//! The committed OpenAPI document must be what the code generates.
#![allow(clippy::unwrap_used, missing_docs)]

#[test]
fn committed_openapi_matches_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../openapi/baton.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = baton_api::openapi_json();
    assert!(
        committed == generated,
        "openapi/baton.json is stale: run `make openapi` and commit the result"
    );
}

#[test]
fn every_route_is_documented() {
    let spec: serde_json::Value = serde_json::from_str(&baton_api::openapi_json()).unwrap();
    let paths = spec["paths"].as_object().unwrap();
    for path in [
        "/v1/leases",
        "/v1/leases/{lease_id}:keepalive",
        "/v1/leases/{lease_id}",
        "/v1/locks",
        "/v1/locks/{name}:acquire",
        "/v1/locks/{name}:renew",
        "/v1/locks/{name}:release",
        "/v1/locks/{name}:validate",
        "/v1/locks/{name}",
        "/v1/elections/{name}:campaign",
        "/v1/elections/{name}:proclaim",
        "/v1/elections/{name}:resign",
        "/v1/elections/{name}",
        "/v1/names",
        "/v1/names/{name}",
        "/v1/cluster",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(
            paths.contains_key(path),
            "{path} missing from the OpenAPI document"
        );
    }
}

#[test]
fn operation_ids_are_unique() {
    let spec: serde_json::Value = serde_json::from_str(&baton_api::openapi_json()).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(!id.is_empty(), "{method} {path} has no operationId");
            assert!(seen.insert(id.clone()), "operationId {id} is used twice");
        }
    }
}
