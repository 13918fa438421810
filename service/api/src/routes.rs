//! The route table.

use std::sync::OnceLock;

use actix_web::dev::{ResourceDef, Service, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::Method;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse, Route};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::respond::REVISION_HEADER;
use crate::state::ApiState;
use crate::{
    cluster, docs, elections, force_release, leases, locks, members, multi_acquire, names,
    semaphores, watch,
};

async fn no_route(request: HttpRequest) -> Result<HttpResponse, ApiError> {
    // The path as the router matched it (percent-decoded where actix decodes),
    // not the raw one: `%3A` in a name is a `:` to the router.
    let path = request.match_info().as_str().to_owned();
    let method = request.method().clone();
    if let Some(routed) = routed_methods(&path) {
        if routed.names_colon {
            if !routed.methods.contains(&method) {
                return Err(ApiError::RouteNotFound(format!("{method} {path}")));
            }
            // A name with a `:` in it: the verb suffix cannot be told apart.
            return Err(ApiError::Core(baton_core::CoreError::InvalidName {
                reason: "a name may not contain ':'".into(),
            }));
        }
        return Err(ApiError::MethodNotAllowed {
            method: method.to_string(),
            allowed: routed
                .methods
                .iter()
                .map(Method::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Err(ApiError::RouteNotFound(format!("{method} {path}")))
}

/// What the route table says about a path no route matched.
struct Routed {
    /// The methods its pattern serves.
    methods: Vec<Method>,
    /// It matched only once its name was allowed to contain `:`.
    names_colon: bool,
}

/// The methods a routed path serves (for 405 and `Allow`), read from the route
/// table the router is built from, so the answer cannot disagree with it. A
/// path that matches only when its name may contain `:` is reported as such.
fn routed_methods(path: &str) -> Option<Routed> {
    type Table = Vec<(ResourceDef, ResourceDef, Vec<Method>)>;
    static TABLE: OnceLock<Table> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table: Table = Vec::new();
        for entry in route_table() {
            let pattern = format!("{}{}", entry.scope, entry.pattern);
            match table
                .iter_mut()
                .find(|(def, _, _)| def.pattern() == Some(&pattern))
            {
                Some((_, _, methods)) => methods.push(entry.method),
                None => {
                    let loose = ResourceDef::new(pattern.replace(NAME_SEGMENT, "{name:.+}"));
                    table.push((ResourceDef::new(pattern), loose, vec![entry.method]));
                }
            }
        }
        table
    });
    if let Some((_, _, methods)) = table.iter().find(|(def, _, _)| def.is_match(path)) {
        return Some(Routed {
            methods: methods.clone(),
            names_colon: false,
        });
    }
    table
        .iter()
        .find(|(strict, loose, _)| strict.pattern() != loose.pattern() && loose.is_match(path))
        .map(|(_, _, methods)| Routed {
            methods: methods.clone(),
            names_colon: true,
        })
}

fn query_error(error: actix_web::error::QueryPayloadError, _: &HttpRequest) -> actix_web::Error {
    ApiError::InvalidQuery(error.to_string()).into()
}

fn path_error(error: actix_web::error::PathError, _: &HttpRequest) -> actix_web::Error {
    ApiError::InvalidQuery(error.to_string()).into()
}

/// One routed operation: its method, the scope it lives in (the router tests
/// a scope's static prefix first, so a request runs only its own resource's
/// route patterns instead of every one in turn: the profile put route matching
/// at ~12% of a lock cycle's CPU) and its pattern inside the scope.
pub struct RouteEntry {
    /// HTTP method.
    pub method: Method,
    /// Static prefix (`/v1/locks`), or `""` for a route of its own.
    pub scope: &'static str,
    /// Pattern inside the scope (`/{name:[^:]+}:acquire`).
    pub pattern: &'static str,
    handler: fn() -> Route,
}

impl RouteEntry {
    /// This route as a resource of its own, whose data is its operation (what
    /// request metrics and spans read back, see
    /// `operation::operation_of`), guarded by its method as `route()` on a scope
    /// would guard it: a request of another method falls through to the next
    /// resource of the same path.
    fn resource(&self) -> impl actix_web::dev::HttpServiceFactory + 'static {
        let pattern = format!("{}{}", self.scope, self.pattern);
        let resource =
            web::resource(self.pattern).guard(actix_web::guard::Method(self.method.clone()));
        let operation = crate::operation::Operation::named(
            crate::operation::operation_id(&self.method, &pattern)
                .unwrap_or(crate::operation::UNROUTED),
        );
        // Resource data, not a middleware: actix hands a matched resource's
        // data to the request as one more container (an `Rc` clone), where a
        // `wrap_fn` inserting into the extensions cost a service layer, a
        // boxed value and a hash insert per request.
        resource.app_data(operation).route((self.handler)())
    }

    /// The path as the OpenAPI document writes it (`/v1/locks/{name}:acquire`).
    pub fn template(&self) -> String {
        format!("{}{}", self.scope, self.pattern).replace(NAME_SEGMENT, "{name}")
    }
}

/// A name path segment: anything up to the `:verb` suffix (names may contain `/`).
const NAME_SEGMENT: &str = "{name:[^:]+}";

macro_rules! routes {
    ($($method:ident $scope:literal $pattern:literal => $handler:path),* $(,)?) => {
        vec![$(RouteEntry {
            method: Method::$method,
            scope: $scope,
            pattern: $pattern,
            handler: || web::route().method(Method::$method).to($handler),
        }),*]
    };
}

/// Every route the server answers, in registration order: the router is built
/// from this table and the route-coverage test compares it with the OpenAPI
/// document, so neither can have an operation the other lacks.
pub fn route_table() -> Vec<RouteEntry> {
    routes![
        GET "" "/healthz" => cluster::healthz,
        GET "" "/readyz" => cluster::readyz,
        GET "" "/metrics" => cluster::metrics,
        GET "" "/openapi.json" => docs::openapi,
        GET "" "/docs" => docs::docs,
        GET "" "/ui" => docs::ui,
        POST "" "/v1/locks:acquire" => multi_acquire::acquire_all,
        GET "/v1/locks" "" => locks::list,
        POST "/v1/locks" "/{name:[^:]+}:acquire" => locks::acquire,
        POST "/v1/locks" "/{name:[^:]+}:release" => locks::release,
        POST "/v1/locks" "/{name:[^:]+}:renew" => locks::renew,
        POST "/v1/locks" "/{name:[^:]+}:validate" => locks::validate,
        POST "/v1/locks" "/{name:[^:]+}:revoke" => force_release::lock,
        GET "/v1/locks" "/{name:[^:]+}" => locks::get,
        GET "/v1/semaphores" "" => semaphores::list,
        POST "/v1/semaphores" "/{name:[^:]+}:acquire" => semaphores::acquire,
        POST "/v1/semaphores" "/{name:[^:]+}:release" => semaphores::release,
        POST "/v1/semaphores" "/{name:[^:]+}:renew" => semaphores::renew,
        GET "/v1/semaphores" "/{name:[^:]+}" => semaphores::get,
        POST "/v1/leases" "" => leases::create,
        POST "/v1/leases" "/{lease_id}:keepalive" => leases::keepalive,
        GET "/v1/leases" "/{lease_id}" => leases::get,
        DELETE "/v1/leases" "/{lease_id}" => leases::revoke,
        POST "/v1/elections" "/{name:[^:]+}:campaign" => elections::campaign,
        POST "/v1/elections" "/{name:[^:]+}:proclaim" => elections::proclaim,
        POST "/v1/elections" "/{name:[^:]+}:resign" => elections::resign,
        POST "/v1/elections" "/{name:[^:]+}:revoke" => force_release::election,
        GET "/v1/elections" "/{name:[^:]+}:observe" => watch::observe,
        GET "/v1/elections" "/{name:[^:]+}" => elections::get,
        GET "/v1/names" "" => names::list,
        POST "/v1/names" "/{name:[^:]+}:revoke" => force_release::name,
        PUT "/v1/names" "/{name:[^:]+}" => names::register,
        GET "/v1/names" "/{name:[^:]+}" => names::get,
        DELETE "/v1/names" "/{name:[^:]+}" => names::unregister,
        GET "/v1/cluster" "" => cluster::cluster,
        POST "/v1/cluster" "/members" => members::add,
        DELETE "/v1/cluster" "/members/{id}" => members::remove,
        GET "" "/v1/watch" => watch::watch,
    ]
}

/// Registers the route table: routes of one scope share one `web::scope`, and
/// each scope keeps the problem+json 404/405 for paths it does not know.
fn register_routes(cfg: &mut web::ServiceConfig) {
    let mut scopes: Vec<(&'static str, Vec<RouteEntry>)> = Vec::new();
    for entry in route_table() {
        if entry.scope.is_empty() {
            cfg.service(entry.resource());
            continue;
        }
        match scopes.iter_mut().find(|(scope, _)| *scope == entry.scope) {
            Some((_, entries)) => entries.push(entry),
            None => scopes.push((entry.scope, vec![entry])),
        }
    }
    for (prefix, entries) in scopes {
        let scope = entries
            .into_iter()
            .fold(web::scope(prefix), |scope, entry| {
                scope.service(entry.resource())
            });
        cfg.service(scope.default_service(web::to(no_route)));
    }
}

/// Registers every route, the extractor error handlers and the `Baton-Revision`
/// header on every response.
pub fn configure(state: ApiState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        let revision_state = state.clone();
        let admission_state = state.clone();
        let metrics = state.metrics.clone();
        let auth = state.auth.clone();
        cfg.app_data(web::Data::new(state))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .app_data(web::PathConfig::default().error_handler(path_error))
            .service(
                web::scope("")
                    .wrap_fn(move |request, service| {
                        let state = revision_state.clone();
                        let call = service.call(request);
                        async move {
                            let mut response: ServiceResponse = call.await?;
                            let name = HeaderName::from_static(REVISION_HEADER);
                            if !response.headers().contains_key(&name) {
                                let revision = state.node.revision().to_string();
                                if let Ok(value) = HeaderValue::from_str(&revision) {
                                    response.headers_mut().insert(name, value);
                                }
                            }
                            Ok(response)
                        }
                    })
                    // Outermost: decides who the caller is before any handler runs.
                    .wrap_fn(move |request, service| {
                        let admitted = match &auth {
                            Some(auth) => auth.admit(request.request()),
                            None => Ok(None),
                        };
                        let admitted = admitted.map_err(ApiError::from).and_then(|caller| {
                            rate_limited(&admission_state, request.path(), caller.as_ref())
                                .map(|()| caller)
                        });
                        let call = match admitted {
                            Ok(caller) => {
                                if let Some(caller) = caller {
                                    request.extensions_mut().insert(caller);
                                }
                                Ok(service.call(request))
                            }
                            Err(refused) => Err(request.error_response(refused)),
                        };
                        async move {
                            match call {
                                Ok(call) => call.await,
                                Err(refused) => Ok(refused),
                            }
                        }
                    })
                    // Outermost of all, one layer for both: the request's
                    // trace span and its metrics (issue 14); admission's
                    // refusals (401, 403, 429) are traced and counted too.
                    .wrap_fn(move |request, service| {
                        let timing = crate::request_metrics::Timing::start(&request);
                        let metrics = metrics.clone();
                        crate::request_span::observed(request, service, move |response| {
                            metrics.answered(timing, response);
                        })
                    })
                    .configure(register_routes)
                    .default_service(web::to(no_route)),
            );
    }
}

/// Paths never rate limited: health, metrics and the static pages. Everything
/// else is, whatever its spelling: the router decodes percent-escapes this raw
/// path still has, so a list of limited paths could be walked around.
fn unlimited(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/readyz" | "/metrics" | "/openapi.json" | "/docs" | "/ui"
    ) || path.starts_with("/ui/")
}

/// Takes a token from the caller's request-rate bucket (the principal's, or
/// the node's single bucket with auth off): 429 `quota_exceeded` with
/// `Retry-After` when it is empty.
fn rate_limited(state: &ApiState, path: &str, caller: Option<&Caller>) -> Result<(), ApiError> {
    if unlimited(path) {
        return Ok(());
    }
    let rate = match caller {
        Some(caller) => caller.rate(state.settings.rate),
        None => state.settings.rate,
    };
    let who = caller.and_then(Caller::name).unwrap_or("");
    state
        .rate_limiter
        .take(who, rate, std::time::Instant::now())
        .map_err(|retry_after| ApiError::RateLimited {
            per_second: rate.per_second,
            retry_after,
        })
}
