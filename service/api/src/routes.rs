//! The route table.

use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{web, HttpRequest, HttpResponse};

use crate::error::ApiError;
use crate::respond::REVISION_HEADER;
use crate::state::ApiState;
use crate::{cluster, docs, elections, leases, locks, members, names};

async fn no_route(request: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::RouteNotFound(format!(
        "{} {}",
        request.method(),
        request.path()
    )))
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
                    .route("/healthz", web::get().to(cluster::healthz))
                    .route("/readyz", web::get().to(cluster::readyz))
                    .route("/metrics", web::get().to(cluster::metrics))
                    .route("/openapi.json", web::get().to(docs::openapi))
                    .route("/docs", web::get().to(docs::docs))
                    .route("/v1/cluster", web::get().to(cluster::cluster))
                    .route("/v1/cluster/members", web::post().to(members::add))
                    .route(
                        "/v1/cluster/members/{id}",
                        web::delete().to(members::remove),
                    )
                    .route("/v1/leases", web::post().to(leases::create))
                    .route(
                        "/v1/leases/{lease_id}:keepalive",
                        web::post().to(leases::keepalive),
                    )
                    .route("/v1/leases/{lease_id}", web::get().to(leases::get))
                    .route("/v1/leases/{lease_id}", web::delete().to(leases::revoke))
                    .route("/v1/locks", web::get().to(locks::list))
                    .route(
                        "/v1/locks/{name:[^:]+}:acquire",
                        web::post().to(locks::acquire),
                    )
                    .route("/v1/locks/{name:[^:]+}:renew", web::post().to(locks::renew))
                    .route(
                        "/v1/locks/{name:[^:]+}:release",
                        web::post().to(locks::release),
                    )
                    .route(
                        "/v1/locks/{name:[^:]+}:validate",
                        web::post().to(locks::validate),
                    )
                    .route("/v1/locks/{name:[^:]+}", web::get().to(locks::get))
                    .route(
                        "/v1/elections/{name:[^:]+}:campaign",
                        web::post().to(elections::campaign),
                    )
                    .route(
                        "/v1/elections/{name:[^:]+}:proclaim",
                        web::post().to(elections::proclaim),
                    )
                    .route(
                        "/v1/elections/{name:[^:]+}:resign",
                        web::post().to(elections::resign),
                    )
                    .route("/v1/elections/{name:[^:]+}", web::get().to(elections::get))
                    .route("/v1/names", web::get().to(names::list))
                    .route("/v1/names/{name:[^:]+}", web::put().to(names::register))
                    .route("/v1/names/{name:[^:]+}", web::get().to(names::get))
                    .route(
                        "/v1/names/{name:[^:]+}",
                        web::delete().to(names::unregister),
                    )
                    .default_service(web::to(no_route)),
            );
    }
}
