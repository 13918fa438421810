//! The trace span of each HTTP request: the root of everything this node does
//! for it, named after the request's OpenAPI operation (`acquire_lock`), with
//! the caller's W3C `traceparent`/`tracestate` as its parent when it sent one.
//!
//! Attributes: the operation, the resource name, the status code, the error
//! code, the revision and the fencing token of the answer. Never the path (it
//! holds lease ids), a lease id, a token secret or an idempotency key.
//!
//! Cost: with tracing off the span is disabled (see `baton_raft::trace_context`)
//! and the middleware only polls the inner future. With tracing on, sampling is
//! decided when the span starts (parent-based, in the SDK's sampler); the route
//! lookup for its name and every attribute are computed only for a sampled
//! request.

use std::future::Future;

use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::HttpRequest;
use baton_raft::trace_context;
use opentelemetry::trace::TraceContextExt;
use tracing::field::Empty;
use tracing::Instrument;

use crate::error::ApiError;
use crate::operation::operation_of;
use crate::respond::{REVISION_HEADER, TOKEN_HEADER};

/// The request span middleware (`wrap_fn`): the outermost layer, so refusals by
/// admission (401, 403, 429) are traced too.
pub fn traced<S>(
    request: ServiceRequest,
    service: &S,
) -> impl Future<Output = Result<ServiceResponse, actix_web::Error>>
where
    S: Service<ServiceRequest, Response = ServiceResponse, Error = actix_web::Error>,
{
    let span = start(request.request());
    let call = match &span {
        Some((span, _)) => span.in_scope(|| service.call(request)),
        None => service.call(request),
    };
    async move {
        let Some((span, sampled)) = span else {
            let result = call.await;
            if let Ok(response) = &result {
                answered(response);
            }
            return result;
        };
        let result = call.instrument(span.clone()).await;
        if let Ok(response) = &result {
            if sampled {
                finish(&span, response);
            }
            span.in_scope(|| answered(response));
        }
        result
    }
}

/// One line per request for operators who ask for it
/// (`BATON_LOG=baton::request=debug`); inside the request's span when traced,
/// so a JSON line carries its trace id. A disabled callsite costs one load.
fn answered(response: &ServiceResponse) {
    tracing::debug!(
        target: "baton::request",
        operation = operation_of(response.request()),
        status = response.status().as_u16(),
        "answered"
    );
}

/// The request's span and whether its trace is sampled; `None` with tracing off.
fn start(request: &HttpRequest) -> Option<(tracing::Span, bool)> {
    if !trace_context::enabled() {
        return None;
    }
    let span = tracing::info_span!(
        target: "baton_trace::request",
        "request",
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = request.method().as_str(),
        baton.operation = Empty,
        baton.name = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
        baton.revision = Empty,
        baton.fencing_token = Empty
    );
    let parent = trace_context::extract(request.headers());
    if parent.span().span_context().is_valid() {
        trace_context::set_parent(&span, parent);
    }
    // Starts the OpenTelemetry span: the sampler decides here.
    let cx = trace_context::context_of(&span);
    let span_context = cx.span().span_context().clone();
    let sampled = span_context.is_sampled();
    Some((span, sampled))
}

/// Records what the answer says: status, error code, revision, fencing token,
/// and the resource name the router extracted (never a lease id: only the
/// `name` segment is read).
fn finish(span: &tracing::Span, response: &ServiceResponse) {
    // Named once routed: the matched resource notes the operation in the
    // request's extensions (`operation::operation_of`). The span has started
    // (the sampler needed it), so the live span is renamed.
    let operation = operation_of(response.request());
    trace_context::context_of(span)
        .span()
        .update_name(operation);
    span.record("baton.operation", operation);
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if let Some(name) = response.request().match_info().get("name") {
        span.record("baton.name", name);
    }
    if let Some(code) = response
        .response()
        .error()
        .and_then(|error| error.as_error::<ApiError>())
        .map(ApiError::code)
    {
        span.record("error.type", code);
    }
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok())
    };
    if let Some(revision) = header(REVISION_HEADER) {
        span.record("baton.revision", revision);
    }
    if let Some(token) = header(TOKEN_HEADER) {
        span.record("baton.fencing_token", token);
    }
}
