//! Trace spans of the Raft layer and the W3C trace context on leader calls.
//!
//! Every span Baton makes for tracing has the target `baton_trace`. The binary
//! sends that target to its OpenTelemetry layer only, and keeps it from the log
//! formatter, so with no exporter configured no subscriber wants these spans
//! and tracing's callsite cache turns each of them into one atomic load.
//!
//! With an exporter, sampling is decided once, at the root, before any span
//! exists ([`root_sampled`], by the [`RootSampler`] that `OTEL_TRACES_SAMPLER`
//! names): an unsampled request gets no span at all (the OpenTelemetry SDK's
//! own sampler would only decide once the span is built, which costs as much
//! as a sampled span's start). The helpers here create a child span only when
//! the current OpenTelemetry context is sampled ([`sampled`]), so an unsampled
//! request pays for no child span and formats no attribute.
//!
//! The propagator is whatever the binary installed globally (W3C trace context
//! when tracing is on, the no-op one otherwise), so [`inject`] and [`extract`]
//! cost nothing with tracing off.

use std::sync::OnceLock;
use std::time::SystemTime;

use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::{Span as _, SpanContext, SpanKind, TraceContextExt, Tracer as _};
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

/// How the root of a trace (a request span, a proxy's span) decides whether
/// the trace is sampled: the samplers `OTEL_TRACES_SAMPLER` names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RootSampler {
    /// `always_on`: every trace.
    AlwaysOn,
    /// `always_off`: none.
    AlwaysOff,
    /// `traceidratio`: this share of traces, decided from the trace id (the
    /// caller's when it sent one), whatever the caller decided.
    Ratio(f64),
    /// `parentbased_always_on` (the default): the caller's decision when it
    /// sent a trace context, every trace otherwise.
    ParentAlwaysOn,
    /// `parentbased_always_off`: the caller's decision, none otherwise.
    ParentAlwaysOff,
    /// `parentbased_traceidratio`: the caller's decision, this share otherwise.
    ParentRatio(f64),
}

impl RootSampler {
    /// [`RootSampler::samples`] under an OpenTelemetry context: an empty one
    /// (no `traceparent`, or an invalid one) is no caller context.
    pub fn samples_under(self, parent: &Context, draw: impl FnOnce() -> u64) -> bool {
        let span = parent.span();
        let context = span.span_context();
        self.samples(context.is_valid().then_some(context), draw)
    }

    /// Whether a root with caller context `parent` (when the caller sent a
    /// valid one) is sampled; `draw` gives a random number, standing in for
    /// the trace id of a trace that starts here (asked for only by a ratio
    /// sampler with no caller context).
    pub fn samples(self, parent: Option<&SpanContext>, draw: impl FnOnce() -> u64) -> bool {
        let by_ratio = |ratio: f64| {
            let id = parent.map_or_else(draw, |parent| {
                let bytes = parent.trace_id().to_bytes();
                u64::from_be_bytes(bytes[8..].try_into().unwrap_or_default())
            });
            ratio_admits(ratio, id)
        };
        match (self, parent) {
            (RootSampler::AlwaysOn, _) => true,
            (RootSampler::AlwaysOff, _) => false,
            (RootSampler::Ratio(ratio), _) => by_ratio(ratio),
            (
                RootSampler::ParentAlwaysOn
                | RootSampler::ParentAlwaysOff
                | RootSampler::ParentRatio(_),
                Some(parent),
            ) => parent.is_sampled(),
            (RootSampler::ParentAlwaysOn, None) => true,
            (RootSampler::ParentAlwaysOff, None) => false,
            (RootSampler::ParentRatio(ratio), None) => by_ratio(ratio),
        }
    }
}

/// The specification's `TraceIdRatioBased` rule (what the OpenTelemetry SDKs
/// do): the lower 63 bits of the trace id's last eight bytes against the
/// ratio's share of 2^63, so every process that sees the same trace id with
/// the same ratio decides the same.
fn ratio_admits(ratio: f64, id: u64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    // The cast saturates: a ratio at or below 0 admits nothing.
    let bound = (ratio * (1u64 << 63) as f64) as u64;
    (id >> 1) < bound
}

static ROOT_SAMPLER: OnceLock<RootSampler> = OnceLock::new();

/// Sets the sampler of every trace root in this process (once, at start;
/// [`RootSampler::ParentAlwaysOn`] until then). A second call is ignored.
pub fn set_root_sampler(sampler: RootSampler) {
    let _ = ROOT_SAMPLER.set(sampler);
}

/// Whether a trace rooted here, under the caller's context `parent` (empty
/// when it sent none), is sampled. Call it only with tracing [`enabled`].
pub fn root_sampled(parent: &Context) -> bool {
    let sampler = ROOT_SAMPLER
        .get()
        .copied()
        .unwrap_or(RootSampler::ParentAlwaysOn);
    sampler.samples_under(parent, rand::random::<u64>)
}

/// `future` inside `span`, or `future` itself when the span is disabled
/// (tracing off or the trace unsampled): a disabled span's `Instrumented`
/// wrapper would still enter and leave it on every poll, for nothing. Not an
/// `async fn`: that would move the (often large) future twice more.
pub fn in_span<F: std::future::Future>(
    span: tracing::Span,
    future: F,
) -> futures_util::future::Either<F, tracing::instrument::Instrumented<F>> {
    use futures_util::future::Either;
    use tracing::Instrument;
    if span.is_disabled() {
        Either::Left(future)
    } else {
        Either::Right(future.instrument(span))
    }
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

/// The W3C trace-context fields a caller's request may carry.
const W3C_FIELDS: [&str; 2] = ["traceparent", "tracestate"];

/// Reads a request's W3C fields through `field` (a header lookup), whatever
/// the HTTP stack's header map: the API's actix one or the peer listener's.
struct FieldExtractor<'a, F>(F, std::marker::PhantomData<&'a str>);

impl<'a, F: Fn(&str) -> Option<&'a str>> Extractor for FieldExtractor<'a, F> {
    fn get(&self, key: &str) -> Option<&str> {
        (self.0)(key)
    }

    fn keys(&self) -> Vec<&str> {
        W3C_FIELDS
            .into_iter()
            .filter(|name| (self.0)(name).is_some())
            .collect()
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
    extract_fields(|name| headers.get(name).and_then(|value| value.to_str().ok()))
}

/// [`extract`] for a peer request, whose headers are hyper's (the peer
/// listener is not actix).
fn extract_peer(headers: &reqwest::header::HeaderMap) -> Context {
    extract_fields(|name| headers.get(name).and_then(|value| value.to_str().ok()))
}

/// The context the W3C fields that `field` looks up name.
fn extract_fields<'a>(field: impl Fn(&str) -> Option<&'a str>) -> Context {
    if !enabled() || field("traceparent").is_none() {
        return Context::new();
    }
    let fields = FieldExtractor(field, std::marker::PhantomData);
    opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(&fields))
}

/// A server span for a leader call arriving from a follower, parented on the
/// follower's `leader_call` span that its `traceparent` names. Disabled when
/// the call carries no sampled context: the follower decided for the trace.
pub fn serving_leader_call(headers: &reqwest::header::HeaderMap) -> tracing::Span {
    let parent = extract_peer(headers);
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
///
/// A leader does not wait for its own sync to replicate, so two followers can
/// make the quorum first: the entry is then applied, and answered, before this
/// node's append is noted. The spans are made once it is (polled for a while on
/// a task of their own).
pub fn entry_stages(index: u64) {
    if !sampled() {
        return;
    }
    let Some(times) = baton_store::stage_times(index) else {
        return;
    };
    let parent = Context::current();
    if times.synced.is_some() {
        return stages_of(index, times, &parent);
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return stages_of(index, times, &parent);
    };
    runtime.spawn(async move {
        let mut times = times;
        for _ in 0..SYNC_POLLS {
            tokio::time::sleep(SYNC_POLL).await;
            match baton_store::stage_times(index) {
                Some(now) if now.synced.is_some() => {
                    times = now;
                    break;
                }
                Some(_) => {}
                // Forgotten: far more entries went by meanwhile.
                None => break,
            }
        }
        stages_of(index, times, &parent);
    });
}

/// How often, and how many times, [`entry_stages`] looks for a sync noted
/// after the apply: a sync takes well under a millisecond, a slow disk's tens.
const SYNC_POLL: std::time::Duration = std::time::Duration::from_millis(2);
const SYNC_POLLS: usize = 500;

/// Makes the spans of [`entry_stages`] under `parent` (a stage whose times
/// were not noted is left out).
fn stages_of(index: u64, times: baton_store::StageTimes, parent: &Context) {
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
                .start_with_context(&tracer, parent);
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
    // When the followers made the quorum before this node synced, there was no
    // wait for one: the commit span is empty, at the apply's start.
    let commit_start = times.synced.zip(times.apply_started).map(|(s, a)| s.min(a));
    stage(
        "commit",
        commit_start,
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

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    use super::*;

    /// A caller's context whose trace id ends in `low` (the bytes the ratio
    /// rule reads).
    fn caller(low: u64, sampled: bool) -> SpanContext {
        let mut id = [0x11u8; 16];
        id[8..].copy_from_slice(&low.to_be_bytes());
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanContext::new(
            TraceId::from_bytes(id),
            SpanId::from_bytes([7; 8]),
            flags,
            true,
            TraceState::default(),
        )
    }

    #[test]
    fn parent_based_samplers_follow_the_callers_decision() {
        let (on, off) = (caller(u64::MAX, true), caller(0, false));
        for sampler in [
            RootSampler::ParentAlwaysOn,
            RootSampler::ParentAlwaysOff,
            RootSampler::ParentRatio(0.0),
            RootSampler::ParentRatio(1.0),
        ] {
            assert!(sampler.samples(Some(&on), || 0), "{sampler:?}");
            assert!(!sampler.samples(Some(&off), || 0), "{sampler:?}");
        }
        assert!(RootSampler::ParentAlwaysOn.samples(None, || u64::MAX));
        assert!(!RootSampler::ParentAlwaysOff.samples(None, || 0));
    }

    #[test]
    fn plain_samplers_ignore_the_callers_decision() {
        let (on, off) = (caller(u64::MAX, true), caller(0, false));
        assert!(RootSampler::AlwaysOn.samples(Some(&off), || u64::MAX));
        assert!(!RootSampler::AlwaysOff.samples(Some(&on), || 0));
        // The ratio reads the caller's trace id, not its flag.
        assert!(RootSampler::Ratio(0.5).samples(Some(&off), || u64::MAX));
        assert!(!RootSampler::Ratio(0.5).samples(Some(&on), || 0));
    }

    #[test]
    fn the_ratio_admits_its_share_of_trace_ids_and_of_draws() {
        // The rule: (id >> 1) < ratio * 2^63.
        let half = 1u64 << 63;
        assert!(RootSampler::Ratio(0.5).samples(Some(&caller(half - 1, false)), || 0));
        assert!(!RootSampler::Ratio(0.5).samples(Some(&caller(half, false)), || 0));
        assert!(RootSampler::ParentRatio(0.5).samples(None, || half - 1));
        assert!(!RootSampler::ParentRatio(0.5).samples(None, || half));
        assert!(!RootSampler::ParentRatio(0.0).samples(None, || 0));
        assert!(RootSampler::ParentRatio(1.0).samples(None, || u64::MAX));
        // Over evenly spread draws, 1 % of them.
        let step = u64::MAX / 10_000 + 1;
        let admitted = (0..10_000u64)
            .filter(|i| RootSampler::ParentRatio(0.01).samples(None, || i * step))
            .count();
        assert_eq!(admitted, 100);
    }

    #[test]
    fn an_empty_caller_context_counts_as_none() {
        // No traceparent: the root decides alone (ratio 0 samples nothing
        // even though an empty context is "not sampled").
        let empty = Context::new();
        assert!(!RootSampler::ParentRatio(0.0).samples_under(&empty, || 0));
        assert!(RootSampler::ParentAlwaysOn.samples_under(&empty, || u64::MAX));
        let unsampled = Context::new().with_remote_span_context(caller(0, false));
        assert!(!RootSampler::ParentAlwaysOn.samples_under(&unsampled, || u64::MAX));
    }
}
