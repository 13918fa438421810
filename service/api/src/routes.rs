//! The route table.

use std::sync::OnceLock;

use actix_web::dev::{ResourceDef, Service, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};

use crate::error::ApiError;
use crate::respond::REVISION_HEADER;
use crate::state::ApiState;
use crate::{cluster, docs, elections, force_release, leases, locks, members, names, watch};

async fn no_route(request: HttpRequest) -> Result<HttpResponse, ApiError> {
    if let Some(allowed) = allowed_methods(request.path()) {
        return Err(ApiError::MethodNotAllowed {
            method: request.method().to_string(),
            allowed,
        });
    }
    Err(ApiError::RouteNotFound(format!(
        "{} {}",
        request.method(),
        request.path()
    )))
}

/// The methods a documented path serves (for 405 and `Allow`), read from the
/// OpenAPI document: every operation there is routed (the drift and route
/// tests keep the two together), so the answer cannot disagree with the router.
fn allowed_methods(path: &str) -> Option<String> {
    static TABLE: OnceLock<Vec<(ResourceDef, String)>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let doc: serde_json::Value =
            serde_json::from_str(&crate::openapi_json()).unwrap_or_default();
        let Some(paths) = doc["paths"].as_object() else {
            return Vec::new();
        };
        paths
            .iter()
            .map(|(template, item)| {
                // `{name}` matches as the router's `{name:[^:]+}` does.
                let pattern = template.replace('}', ":[^:]+}");
                let methods: Vec<String> = item
                    .as_object()
                    .map(|ops| ops.keys().map(|m| m.to_uppercase()).collect())
                    .unwrap_or_default();
                (ResourceDef::new(pattern), methods.join(", "))
            })
            .collect()
    });
    table
        .iter()
        .find(|(def, _)| def.is_match(path))
        .map(|(_, methods)| methods.clone())
}

fn query_error(error: actix_web::error::QueryPayloadError, _: &HttpRequest) -> actix_web::Error {
    ApiError::InvalidQuery(error.to_string()).into()
}

fn path_error(error: actix_web::error::PathError, _: &HttpRequest) -> actix_web::Error {
    ApiError::InvalidQuery(error.to_string()).into()
}

/// Registers every route, the extractor error handlers and the `Baton-Revision`
/// header on every response.
pub fn configure(state: ApiState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        let revision_state = state.clone();
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
                        let call = match admitted {
                            Ok(caller) => {
                                if let Some(caller) = caller {
                                    request.extensions_mut().insert(caller);
                                }
                                Ok(service.call(request))
                            }
                            Err(refusal) => Err(request.error_response(ApiError::from(refusal))),
                        };
                        async move {
                            match call {
                                Ok(call) => call.await,
                                Err(refused) => Ok(refused),
                            }
                        }
                    })
                    .route("/healthz", web::get().to(cluster::healthz))
                    .route("/readyz", web::get().to(cluster::readyz))
                    .route("/metrics", web::get().to(cluster::metrics))
                    .route("/openapi.json", web::get().to(docs::openapi))
                    .route("/docs", web::get().to(docs::docs))
                    .route("/ui", web::get().to(docs::ui))
                    // One scope per resource: the router tests a scope's static
                    // prefix first, so a request runs only its own resource's route
                    // patterns instead of every one in turn (the profile put route
                    // matching at ~12% of a lock cycle's CPU; a before/after run
                    // showed no difference beyond the machine's noise, ±5%). Each
                    // scope keeps the problem+json 404 for paths it does not know.
                    .service(
                        web::scope("/v1/locks")
                            .route("", web::get().to(locks::list))
                            .route("/{name:[^:]+}:acquire", web::post().to(locks::acquire))
                            .route("/{name:[^:]+}:release", web::post().to(locks::release))
                            .route("/{name:[^:]+}:renew", web::post().to(locks::renew))
                            .route("/{name:[^:]+}:validate", web::post().to(locks::validate))
                            .route("/{name:[^:]+}:revoke", web::post().to(force_release::lock))
                            .route("/{name:[^:]+}", web::get().to(locks::get))
                            .default_service(web::to(no_route)),
                    )
                    .service(
                        web::scope("/v1/leases")
                            .route("", web::post().to(leases::create))
                            .route("/{lease_id}:keepalive", web::post().to(leases::keepalive))
                            .route("/{lease_id}", web::get().to(leases::get))
                            .route("/{lease_id}", web::delete().to(leases::revoke))
                            .default_service(web::to(no_route)),
                    )
                    .service(
                        web::scope("/v1/elections")
                            .route(
                                "/{name:[^:]+}:campaign",
                                web::post().to(elections::campaign),
                            )
                            .route(
                                "/{name:[^:]+}:proclaim",
                                web::post().to(elections::proclaim),
                            )
                            .route("/{name:[^:]+}:resign", web::post().to(elections::resign))
                            .route(
                                "/{name:[^:]+}:revoke",
                                web::post().to(force_release::election),
                            )
                            .route("/{name:[^:]+}:observe", web::get().to(watch::observe))
                            .route("/{name:[^:]+}", web::get().to(elections::get))
                            .default_service(web::to(no_route)),
                    )
                    .service(
                        web::scope("/v1/names")
                            .route("", web::get().to(names::list))
                            .route("/{name:[^:]+}:revoke", web::post().to(force_release::name))
                            .route("/{name:[^:]+}", web::put().to(names::register))
                            .route("/{name:[^:]+}", web::get().to(names::get))
                            .route("/{name:[^:]+}", web::delete().to(names::unregister))
                            .default_service(web::to(no_route)),
                    )
                    .service(
                        web::scope("/v1/cluster")
                            .route("", web::get().to(cluster::cluster))
                            .route("/members", web::post().to(members::add))
                            .route("/members/{id}", web::delete().to(members::remove))
                            .default_service(web::to(no_route)),
                    )
                    .route("/v1/watch", web::get().to(watch::watch))
                    .default_service(web::to(no_route)),
            );
    }
}
