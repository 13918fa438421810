//! Trace spans of the Raft layer and the W3C trace context on leader calls.
//!
//! Every span Baton makes for tracing has the target `baton_trace`. The binary
//! sends that target to its OpenTelemetry layer only, and keeps it from the log
//! formatter, so with no exporter configured no subscriber wants these spans
//! and tracing's callsite cache turns each of them into one atomic load.
//!
//! With an exporter, sampling is decided once, at the root (the request span,
//! parent-based): the helpers here create a child span only when the current
//! OpenTelemetry context is sampled ([`sampled`]), so an unsampled request pays
//! for no child span and formats no attribute.
//!
//! The propagator is whatever the binary installed globally (W3C trace context
//! when tracing is on, the no-op one otherwise), so [`inject`] and [`extract`]
//! cost nothing with tracing off.

use std::time::SystemTime;

use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};

/// The `tracing` target of every trace span (and nothing else).
pub const TARGET: &str = "baton_trace";

/// Whether trace spans are on at all: a subscriber takes target `baton_trace`.
/// One cached callsite check; false whenever no exporter is configured.
pub fn enabled() -> bool {
    tracing::enabled!(target: "baton_trace", tracing::Level::INFO)
}

/// Whether the current OpenTelemetry context (the span being polled, once
/// tracing-opentelemetry has activated it) belongs to a sampled trace: the
/// gate in front of every child span.
pub fn sampled() -> bool {
    enabled() && Context::map_current(|cx| cx.span().span_context().is_sampled())
}

/// A child span of the current span when the trace is sampled, otherwise a
/// disabled span (no allocation, nothing recorded).
#[macro_export]
macro_rules! child_span {
    ($name:literal $(, $($fields:tt)*)?) => {
        if $crate::trace_context::sampled() {
            ::tracing::info_span!(target: "baton_trace", $name $(, $($fields)*)?)
        } else {
            ::tracing::Span::none()
        }
    };
}

struct HeaderInjector<'a>(&'a mut reqwest::header::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(key.as_bytes()),
            reqwest::header::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a actix_web::http::header::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}

/// Sets `traceparent` (and `tracestate`) on an outgoing request to the current
/// span's context, replacing any the request had, when that context is
/// sampled or came from a caller (an unsampled trace keeps its id downstream).
pub fn inject(headers: &mut reqwest::header::HeaderMap) {
    if !enabled() {
        return;
    }
    let cx = Context::current();
    if !cx.span().span_context().is_valid() {
        return;
    }
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&cx, &mut HeaderInjector(headers));
    });
}

/// The caller's trace context from `traceparent`/`tracestate`, if it sent a
/// valid one (an empty context otherwise, and always with tracing off).
pub fn extract(headers: &actix_web::http::header::HeaderMap) -> Context {
    if !enabled() || !headers.contains_key("traceparent") {
        return Context::new();
    }
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(headers))
    })
}

/// A server span for a leader call arriving from a follower, parented on the
/// follower's `leader_call` span that its `traceparent` names. Disabled when
/// the call carries no sampled context: the follower decided for the trace.
pub fn serving_leader_call(headers: &actix_web::http::header::HeaderMap) -> tracing::Span {
    let parent = extract(headers);
    if !parent.span().span_context().is_sampled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: "baton_trace",
        "serve_leader_call",
        otel.kind = "server",
        node.role = "leader"
    );
    set_parent(&span, parent);
    span
}

/// Makes `parent` the OpenTelemetry parent of `span` (a remote caller's context).
pub fn set_parent(span: &tracing::Span, parent: Context) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    // Fails only for a disabled span or one already started: nothing to parent.
    let _ = span.set_parent(parent);
}

/// Links `span` to the span whose context is `cx` (a request served by a batch
/// that another request's span is the parent of).
pub fn add_link(span: &tracing::Span, cx: &Context) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    span.add_link(cx.span().span_context().clone());
}

/// The OpenTelemetry context of `span` (its trace, and whether it is sampled).
pub fn context_of(span: &tracing::Span) -> Context {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    span.context()
}

/// Adds `log.append` (append and fsync), `commit` (synced here until the
/// entry could be applied, that is until a quorum had it) and `apply` spans
/// for log entry `index` under the current span, from the times the store
/// noted, when the current trace is sampled. They are made after the fact, with
/// the times as their start and end: the store's tasks cannot know which
/// request an entry serves.
pub fn entry_stages(index: u64) {
    if !sampled() {
        return;
    }
    let Some(times) = baton_store::stage_times(index) else {
        return;
    };
    let parent = Context::current();
    let tracer = opentelemetry::global::tracer("baton");
    let stage = |name: &'static str,
                 start: Option<SystemTime>,
                 end: Option<SystemTime>,
                 attributes: Vec<KeyValue>| {
        if let (Some(start), Some(end)) = (start, end) {
            let mut span = tracer
                .span_builder(name)
                .with_kind(SpanKind::Internal)
                .with_start_time(start)
                .with_attributes(attributes)
                .start_with_context(&tracer, &parent);
            span.end_with_timestamp(end);
        }
    };
    let log_index = KeyValue::new("raft.log_index", i64::try_from(index).unwrap_or(i64::MAX));
    stage(
        "log.append",
        times.append_started,
        times.synced,
        vec![
            log_index.clone(),
            KeyValue::new(
                "raft.append_entries",
                i64::try_from(times.append_entries).unwrap_or(i64::MAX),
            ),
            KeyValue::new("raft.fsync", true),
        ],
    );
    stage(
        "commit",
        times.synced,
        times.apply_started,
        vec![log_index.clone()],
    );
    stage("apply", times.apply_started, times.applied, vec![log_index]);
}

/// Adds the current span's trace context to an outgoing peer request.
pub fn propagate(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    if !sampled() {
        return request;
    }
    let mut headers = reqwest::header::HeaderMap::new();
    inject(&mut headers);
    request.headers(headers)
}

/// The span name of a leader call's kind (never its arguments: a lease id).
pub fn call_name(call: &crate::LeaderCall) -> &'static str {
    use crate::LeaderCall;
    match call {
        LeaderCall::Propose(_) => "propose",
        LeaderCall::ReadIndex => "read_index",
        LeaderCall::KeepAlive(_) => "keep_alive",
        LeaderCall::Remaining(_) => "remaining",
        LeaderCall::AddMember { .. } => "add_member",
        LeaderCall::RemoveMember { .. } => "remove_member",
        LeaderCall::Campaign => "campaign",
    }
}

/// The span of a proposal (one log entry) serving the requests whose sampled
/// contexts are `requests`: a child of the first, linked to the others (one
/// entry serves many traces, and a span has one parent). Disabled when none
/// of its requests is sampled.
pub fn proposal_span(requests: &[Context], batch_size: usize, in_flight: usize) -> tracing::Span {
    let Some((first, rest)) = requests.split_first() else {
        return tracing::Span::none();
    };
    let span = tracing::info_span!(
        target: "baton_trace",
        "proposal",
        raft.batch_size = batch_size,
        raft.entries_in_flight = in_flight,
        raft.traced_requests = requests.len()
    );
    set_parent(&span, first.clone());
    for cx in rest {
        add_link(&span, cx);
    }
    span
}

/// The current context when it is sampled: what a queued proposal carries to
/// the batching task, which runs in a task of its own.
pub fn sampled_context() -> Option<Context> {
    sampled().then(Context::current)
}

/// The span of a request waiting in a queue for its grant: how long it may
/// wait, how long it waited and how the wait ended.
pub struct QueuedWait {
    span: tracing::Span,
    started: Option<std::time::Instant>,
}

impl QueuedWait {
    /// Starts the span (a child of the current one) if the trace is sampled.
    pub fn start(timeout: std::time::Duration) -> QueuedWait {
        let span = crate::child_span!(
            "queued_wait",
            wait.timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            wait.ended = tracing::field::Empty,
            wait.waited_ms = tracing::field::Empty
        );
        let started = (!span.is_disabled()).then(std::time::Instant::now);
        QueuedWait { span, started }
    }

    /// Records how the wait ended (`granted`, `timed_out`, `abandoned`, ...).
    pub fn end(&self, how: &'static str) {
        if let Some(started) = self.started {
            let waited = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.span.record("wait.ended", how);
            self.span.record("wait.waited_ms", waited);
        }
    }
}
