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
//! decided before any span exists (`trace_context::root_sampled`): an
//! unsampled request gets no span, and its caller's context, when it sent one,
//! is only made current so that JSON log lines carry its trace id. The span's
//! name and attributes are computed only for a sampled request.

use std::future::Future;

use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::HttpRequest;
use baton_raft::trace_context;
use futures_util::future::Either;
use futures_util::FutureExt as _;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::TraceContextExt;
use tracing::field::Empty;
use tracing::Instrument;

use crate::error::ApiError;
use crate::operation::operation_of;
use crate::respond::{REVISION_HEADER, TOKEN_HEADER};

/// The request middleware (`wrap_fn`): the outermost layer, so refusals by
/// admission (401, 403, 429) are traced too. `counted` is called with the
/// answer (inside the span when traced): the request metrics ride in this
/// layer rather than a second one of their own, which cost a service call,
/// a future and its moves per request.
pub fn observed<S>(
    request: ServiceRequest,
    service: &S,
    counted: impl FnOnce(&ServiceResponse) + 'static,
) -> impl Future<Output = Result<ServiceResponse, actix_web::Error>>
where
    S: Service<ServiceRequest, Response = ServiceResponse, Error = actix_web::Error>,
{
    // Combinators, not an `async` block: each wraps the inner call's (large)
    // future with one move, where a block would move it in and again into
    // its await (the memcpy showed in the callgrind profile).
    match start(request.request()) {
        Root::Untraced => Either::Left(service.call(request).map(move |result| {
            if let Ok(response) = &result {
                counted(response);
                answered(response);
            }
            result
        })),
        Root::Unsampled(caller) => {
            let current = caller.clone();
            Either::Right(Either::Left(
                service
                    .call(request)
                    .with_context(caller)
                    .map(move |result| {
                        if let Ok(response) = &result {
                            counted(response);
                            let _current = current.attach();
                            answered(response);
                        }
                        result
                    }),
            ))
        }
        Root::Sampled(span) => {
            let call = span.in_scope(|| service.call(request));
            let answer_span = span.clone();
            Either::Right(Either::Right(call.instrument(span).map(move |result| {
                if let Ok(response) = &result {
                    finish(&answer_span, response);
                    answer_span.in_scope(|| {
                        counted(response);
                        answered(response);
                    });
                }
                result
            })))
        }
    }
}

/// What tracing does for one request.
enum Root {
    /// Tracing is off, or the trace starts here and is not sampled.
    Untraced,
    /// Not sampled by the caller's trace: its context is current while the
    /// request runs, so log lines carry the caller's trace id.
    Unsampled(opentelemetry::Context),
    /// Sampled: the request's span.
    Sampled(tracing::Span),
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

/// The request's span when its trace is sampled (decided here, before the
/// span exists, from the caller's `traceparent` and `OTEL_TRACES_SAMPLER`).
fn start(request: &HttpRequest) -> Root {
    if !trace_context::enabled() {
        return Root::Untraced;
    }
    let parent = trace_context::extract(request.headers());
    if !trace_context::root_sampled(&parent) {
        let caller_sent_one = parent.span().span_context().is_valid();
        return if caller_sent_one {
            Root::Unsampled(parent)
        } else {
            Root::Untraced
        };
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
    if parent.span().span_context().is_valid() {
        trace_context::set_parent(&span, parent);
    }
    // Starts the OpenTelemetry span now, so that its context (trace id,
    // sampled) is current for what the request does.
    let _ = trace_context::context_of(&span);
    Root::Sampled(span)
}

/// Records what the answer says: status, error code, revision, fencing token,
/// and the resource name the router extracted (never a lease id: only the
/// `name` segment is read).
fn finish(span: &tracing::Span, response: &ServiceResponse) {
    // Named once routed: the matched resource's data is its operation
    // (`operation::operation_of`); the span started before routing, so the
    // live span is renamed.
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
