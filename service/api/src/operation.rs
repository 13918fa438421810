//! The OpenAPI operation a request was routed to: the name request metrics and
//! trace spans carry, rather than the route regex or the raw path (whose names
//! would make every lock its own label value).

use std::collections::HashMap;
use std::sync::OnceLock;

use actix_web::http::Method;
use actix_web::HttpRequest;
use utoipa::OpenApi;

use crate::openapi::ApiDoc;
use crate::routes::route_table;

/// The operation name of requests no route matched (404, 405, a name with `:`).
pub const UNROUTED: &str = "unrouted";

/// `(method, router pattern)` -> OpenAPI `operationId`, built once from the
/// route table and the generated document, so it cannot disagree with either.
fn operations() -> &'static HashMap<(Method, String), &'static str> {
    static TABLE: OnceLock<HashMap<(Method, String), &'static str>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let doc = ApiDoc::openapi();
        let mut table = HashMap::new();
        for entry in route_table() {
            let Some(item) = doc.paths.paths.get(&entry.template()) else {
                continue;
            };
            let operation = match entry.method {
                Method::GET => item.get.as_ref(),
                Method::POST => item.post.as_ref(),
                Method::PUT => item.put.as_ref(),
                Method::DELETE => item.delete.as_ref(),
                _ => None,
            };
            if let Some(id) = operation.and_then(|operation| operation.operation_id.clone()) {
                // Leaked once per route at start-up: label values and span
                // names are `&'static str` on the hot path, never allocated.
                let id: &'static str = Box::leak(id.into_boxed_str());
                table.insert(
                    (
                        entry.method.clone(),
                        format!("{}{}", entry.scope, entry.pattern),
                    ),
                    id,
                );
            }
        }
        table
    })
}

/// The operation id of the route `method` + `pattern` (the scope's prefix and
/// the pattern inside it), for naming its resource when the router is built.
pub(crate) fn operation_id(method: &Method, pattern: &str) -> Option<&'static str> {
    operations()
        .get(&(method.clone(), pattern.to_owned()))
        .copied()
}

/// The OpenAPI operation id of a routed request (`acquire_lock`), or
/// [`UNROUTED`] when no route matched.
///
/// Every route's resource is registered under its operation id (`routes.rs`).
/// actix reports the name of the first resource whose pattern matches the path,
/// whatever its method guard (GET, PUT and DELETE of `/v1/names/{name}` all say
/// the first one's), so the id is looked up by that name and the method. No
/// allocation per request, where `HttpRequest::match_pattern` builds a `String`.
pub fn operation_of(request: &HttpRequest) -> &'static str {
    let ids = sorted_operations();
    request
        .match_name()
        .and_then(|name| ids.binary_search(&name).ok().map(|at| ids[at]))
        .and_then(|first| {
            by_first_and_method()
                .get(&(first, request.method().clone()))
                .copied()
        })
        .unwrap_or(UNROUTED)
}

/// `(operation id of the first route of a pattern, method)` -> operation id.
fn by_first_and_method() -> &'static HashMap<(&'static str, Method), &'static str> {
    static TABLE: OnceLock<HashMap<(&'static str, Method), &'static str>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut first_of_pattern: HashMap<String, &'static str> = HashMap::new();
        let mut table = HashMap::new();
        for entry in route_table() {
            let pattern = format!("{}{}", entry.scope, entry.pattern);
            let Some(id) = operation_id(&entry.method, &pattern) else {
                continue;
            };
            let first = *first_of_pattern.entry(pattern).or_insert(id);
            table.insert((first, entry.method.clone()), id);
        }
        table
    })
}

fn sorted_operations() -> &'static [&'static str] {
    static SORTED: OnceLock<Vec<&'static str>> = OnceLock::new();
    SORTED.get_or_init(|| {
        let mut ids: Vec<&'static str> = operations().values().copied().collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    })
}

/// Every operation id the router can report (for pre-registering metric
/// series, so a scrape shows zeros rather than missing series).
pub fn all_operations() -> Vec<&'static str> {
    sorted_operations().to_vec()
}
