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

/// The operation a routed request was matched to: the data of the route's own
/// resource (`routes.rs`), which actix adds to the request when it matches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operation {
    /// The OpenAPI operation id.
    pub(crate) id: &'static str,
    /// Its place in [`operation_slots`]: where its metrics are, found without
    /// comparing strings on the hot path.
    pub(crate) slot: usize,
}

impl Operation {
    /// The operation `id` (an operation id of the route table, or [`UNROUTED`]).
    pub(crate) fn named(id: &'static str) -> Operation {
        Operation {
            id,
            slot: slot_of(id),
        }
    }
}

/// The operation noted on a routed request, or [`UNROUTED`] when no route
/// matched (or before routing).
///
/// Read from the matched resource's data:
/// `HttpRequest::match_pattern` and `match_name` both match the path against
/// every pattern again (regex searches and a `String`), which the callgrind
/// profile put at several thousand instructions a request.
pub(crate) fn noted_operation(request: &HttpRequest) -> Operation {
    request
        .app_data::<Operation>()
        .copied()
        .unwrap_or_else(|| Operation::named(UNROUTED))
}

/// The OpenAPI operation id of a routed request (`acquire_lock`), or
/// [`UNROUTED`] (see [`noted_operation`]).
pub fn operation_of(request: &HttpRequest) -> &'static str {
    noted_operation(request).id
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

/// Every operation id and [`UNROUTED`], sorted: one slot each for
/// per-operation metrics.
pub(crate) fn operation_slots() -> &'static [&'static str] {
    static SLOTS: OnceLock<Vec<&'static str>> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let mut ids = all_operations();
        ids.push(UNROUTED);
        ids.sort_unstable();
        ids.dedup();
        ids
    })
}

/// The slot of operation `id`; an id the router does not know shares
/// [`UNROUTED`]'s.
pub(crate) fn slot_of(id: &str) -> usize {
    let slots = operation_slots();
    let find = |wanted: &str| slots.binary_search_by(|probe| (*probe).cmp(wanted));
    find(id).or_else(|_| find(UNROUTED)).unwrap_or(0)
}
