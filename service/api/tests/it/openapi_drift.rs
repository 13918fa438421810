//! The committed OpenAPI document must be what the code generates.

#[test]
fn committed_openapi_matches_the_code() {
    // Embedded at compile time, not read through CARGO_MANIFEST_DIR: a target
    // directory shared by two clones (the developer's and CI's) keeps a binary
    // whose compiled-in path names the other clone.
    let committed = include_str!("../../../../openapi/baton.json");
    let generated = baton_api::openapi_json();
    assert!(
        committed == generated,
        "openapi/baton.json is stale: run `make openapi` and commit the result"
    );
}

#[test]
fn every_route_is_documented_and_every_operation_routed() {
    // Both directions, from the table the router is built from: a route the
    // document lacks, or an operation nothing serves, fails here.
    let spec: serde_json::Value = serde_json::from_str(&baton_api::openapi_json()).unwrap();
    let documented: std::collections::BTreeSet<(String, String)> = spec["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |method| (method.to_uppercase(), path.clone()))
        })
        .collect();
    let routed: std::collections::BTreeSet<(String, String)> = baton_api::route_table()
        .iter()
        .map(|route| (route.method.to_string(), route.template()))
        .collect();
    assert_eq!(
        baton_api::route_table().len(),
        routed.len(),
        "a route is registered twice"
    );
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from the OpenAPI document: {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "documented operations nothing serves: {unrouted:?}"
    );
    assert!(routed.contains(&("GET".to_owned(), "/v1/elections/{name}:observe".to_owned())));
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

#[test]
fn descriptions_carry_no_rustdoc_link_syntax() {
    let text = baton_api::openapi_json();
    assert!(
        !text.contains("[`"),
        "a doc comment's intra-doc link leaked into the document"
    );
}

#[test]
fn problem_bodies_have_only_documented_fields() {
    use baton_api::error::ApiError;
    use baton_core::CoreError;
    let spec: serde_json::Value = serde_json::from_str(&baton_api::openapi_json()).unwrap();
    let schema = &spec["components"]["schemas"]["Problem"];
    let documented: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    for error in [
        ApiError::Core(CoreError::LockHeld {
            holder: Some("w-1".into()),
            token: Some(7),
        }),
        ApiError::Core(CoreError::LockLost {
            current_token: Some(9),
        }),
        ApiError::Core(CoreError::NotElected {
            leader: Some("db-1".into()),
            token: Some(3),
        }),
        ApiError::Core(CoreError::TokenMismatch { current_token: 4 }),
        ApiError::Core(CoreError::QuotaReached {
            what: "a principal owns at most 2 leases".into(),
            limit: 2,
        }),
        ApiError::RateLimited {
            per_second: 5,
            retry_after: std::time::Duration::from_millis(200),
        },
        ApiError::Raft(baton_raft::RaftLayerError::RevisionNotReached {
            wanted: 10,
            applied: 8,
        }),
        ApiError::Watch(baton_raft::WatchError::Compacted {
            since: 1,
            oldest: 5,
        }),
        ApiError::InvalidQuery("limit".into()),
    ] {
        let body = serde_json::to_value(error.problem()).unwrap();
        for key in body.as_object().unwrap().keys() {
            assert!(
                documented.contains(&key),
                "{key} is sent but not in the Problem schema"
            );
        }
        for key in &required {
            assert!(body.get(*key).is_some(), "{key} is required but not sent");
        }
    }
}

#[test]
fn every_success_answer_with_a_body_has_an_example_of_its_schema() {
    let spec: serde_json::Value = serde_json::from_str(&baton_api::openapi_json()).unwrap();
    let mut missing = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            for (status, response) in operation["responses"].as_object().unwrap() {
                let Some(content) = response["content"].as_object() else {
                    continue;
                };
                for (media_type, body) in content {
                    let page = media_type.starts_with("text/html") || path == "/openapi.json";
                    if !page && body.get("example").is_none() {
                        missing.push(format!("{method} {path} {status} {media_type}"));
                    }
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "answers without an example: {missing:#?}"
    );
}

#[test]
fn every_route_has_an_operation_id_for_telemetry() {
    // Request metrics and spans are named by operation id: a route the lookup
    // cannot name would be counted as `unrouted`.
    let operations = baton_api::operation::all_operations();
    assert_eq!(operations.len(), baton_api::route_table().len());
    assert!(operations.contains(&"acquire_lock"), "{operations:?}");
    assert!(!operations.contains(&baton_api::operation::UNROUTED));
}
