//! `/openapi.json` and `/docs`: the API description and a page that renders it
//! with no network access (no CDN; the page is compiled into the binary).

use actix_web::HttpResponse;

use crate::openapi::openapi_json;

/// The OpenAPI document.
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(openapi_json())
}

/// A self-contained HTML page that renders `/openapi.json`.
pub async fn docs() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(include_str!("../static/docs.html"))
}
