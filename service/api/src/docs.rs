//! `/openapi.json`, `/docs` and `/ui`: the API description, a page that renders
//! it, and a live console of the cluster's state. Both pages work with no network
//! access beyond this node (no CDN; they are compiled into the binary) and read
//! only the public API.

use actix_web::HttpResponse;

use crate::openapi::openapi_json;

/// What the pages may load: nothing but their own inline code and this origin
/// (the console also probes other members' `/healthz`), and no framing.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
    style-src 'unsafe-inline'; connect-src 'self' http: https:; img-src 'self' data:; \
    base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn page(html: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("content-security-policy", PAGE_POLICY))
        .insert_header(("x-content-type-options", "nosniff"))
        .body(html)
}

/// The OpenAPI document (this document). Open without a token.
#[utoipa::path(get, operation_id = "openapi", path = "/openapi.json", tag = "docs",
    responses((status = 200, content_type = "application/json", body = Object, description = "The OpenAPI 3.1 document")))]
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(openapi_json())
}

/// A self-contained HTML page that renders `/openapi.json`. Open without a token.
#[utoipa::path(get, operation_id = "docs", path = "/docs", tag = "docs",
    responses((status = 200, content_type = "text/html", body = String, description = "The API reference page")))]
pub async fn docs() -> HttpResponse {
    page(include_str!("../static/docs.html"))
}

/// The live console: locks, elections, names, leases and the cluster, listed
/// once and then followed on `/v1/watch` (see `static/ui.html`). The page is
/// open; what it shows needs the caller's token.
#[utoipa::path(get, operation_id = "ui", path = "/ui", tag = "docs",
    responses((status = 200, content_type = "text/html", body = String, description = "The console page")))]
pub async fn ui() -> HttpResponse {
    page(include_str!("../static/ui.html"))
}
