//! Request-level metrics: every answer by OpenAPI operation, status and stable
//! error code, latency by operation, refusals for overload or quota, and watch
//! streams. Counted by the outermost middleware (`request_span::observed`, so
//! refusals of the admission middleware count too) and by the watch handler.
//!
//! Labels are `&'static str`: the operation id from `operation_of` (never the
//! path, whose names would make every lock a series), the code from the error
//! table. A request costs two clock reads, a look-up of the matched resource's
//! data (the operation and its metrics slot) and a few relaxed atomic adds.

use std::time::Instant;

use actix_web::dev::{ServiceRequest, ServiceResponse};
use baton_core::CoreError;
use baton_metrics::{Counter, Exposition, Family, Histogram, REQUEST_SECONDS};
use baton_raft::{RaftLayerError, StreamEnd, WatchError};

use crate::error::ApiError;
use crate::operation::{noted_operation, operation_slots};

/// The `code` of an answer below 400.
const OK: &str = "ok";
/// The `code` of an error answer that carries no [`ApiError`] (`/readyz`'s 503).
const UNCLASSIFIED: &str = "unclassified";

/// Distinct `(status, code)` pairs kept per operation; an operation answers a
/// dozen or so.
const ANSWERS_PER_OPERATION: usize = 48;

/// Why a request was refused before anything was applied, for
/// `baton_requests_refused_total`.
const REFUSALS: [&str; 4] = ["overloaded", "rate_limit", "quota", "watch_streams"];

/// Why a watch stream ended with `resync`.
const RESYNC_REASONS: [&str; 5] = [
    "lagged",
    "compacted",
    "snapshot",
    "shutdown",
    "unauthorized",
];

/// One operation's series.
struct OperationMetrics {
    latency: Histogram,
    answers: Family<(u16, &'static str), Counter>,
}

/// The request metrics of one node's API (shared by every worker).
pub struct RequestMetrics {
    /// Operation ids, sorted, `unrouted` among them (`operation_slots`).
    operations: &'static [&'static str],
    /// Per operation, in the order of `operations`.
    per_operation: Vec<OperationMetrics>,
    refused: [Counter; 4],
    watch_opened: Counter,
    watch_resyncs: [Counter; 5],
}

impl std::fmt::Debug for RequestMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestMetrics")
            .field("operations", &self.operations.len())
            .finish_non_exhaustive()
    }
}

impl Default for RequestMetrics {
    /// Every operation of the route table, so a scrape shows each one's latency
    /// series from the start.
    fn default() -> Self {
        let operations = operation_slots();
        let per_operation = operations
            .iter()
            .map(|_| OperationMetrics {
                latency: Histogram::new(REQUEST_SECONDS),
                answers: Family::counters(ANSWERS_PER_OPERATION, (0, "other")),
            })
            .collect();
        RequestMetrics {
            operations,
            per_operation,
            refused: Default::default(),
            watch_opened: Counter::new(),
            watch_resyncs: Default::default(),
        }
    }
}

/// Why `error` refused a request for load or a cap, if it did.
fn refusal(error: &ApiError) -> Option<usize> {
    match error {
        ApiError::Raft(RaftLayerError::Overloaded { .. }) => Some(0),
        ApiError::RateLimited { .. } => Some(1),
        ApiError::Core(CoreError::QuotaExceeded { .. } | CoreError::QuotaReached { .. }) => Some(2),
        ApiError::Watch(WatchError::TooManyWatchers { .. }) => Some(3),
        _ => None,
    }
}

impl RequestMetrics {
    #[cfg(test)]
    fn operation(&self, id: &str) -> &OperationMetrics {
        &self.per_operation[crate::operation::slot_of(id)]
    }

    /// Counts one answer of the request `timing` was started for (called by
    /// the request middleware, `request_span::observed`, once it is answered).
    pub fn answered<B>(&self, timing: Timing, response: &ServiceResponse<B>) {
        let Timing { started } = timing;
        let operation = noted_operation(response.request());
        let status = response.status();
        let error = response
            .response()
            .error()
            .and_then(|error| error.as_error::<ApiError>());
        let code = match error {
            Some(error) => error.code(),
            None if status.as_u16() < 400 => OK,
            None => UNCLASSIFIED,
        };
        if let Some(reason) = error.and_then(refusal) {
            self.refused[reason].inc();
        }
        let metrics = &self.per_operation[operation.slot];
        metrics.latency.observe_duration(started.elapsed());
        metrics.answers.get((status.as_u16(), code)).inc();
    }

    /// A watch stream was opened.
    pub fn watch_opened(&self) {
        self.watch_opened.inc();
    }

    /// A watch stream ended with `resync` for `reason` (a [`StreamEnd`], or
    /// `unauthorized` after an auth reload).
    pub fn watch_resynced(&self, reason: Option<StreamEnd>) {
        let index = match reason {
            Some(StreamEnd::Lagged) => 0,
            Some(StreamEnd::Compacted) => 1,
            Some(StreamEnd::Snapshot) => 2,
            Some(StreamEnd::Shutdown) => 3,
            None => 4,
        };
        self.watch_resyncs[index].inc();
    }

    /// Renders the request families into `out`.
    pub fn write(&self, out: &mut Exposition) {
        let mut answers = Vec::new();
        for (operation, metrics) in self.operations.iter().zip(&self.per_operation) {
            for ((status, code), counter) in metrics.answers.series() {
                let count = counter.get();
                // The spill series, unused unless an operation answered more
                // distinct pairs than it has room for.
                if *status == 0 && count == 0 {
                    continue;
                }
                answers.push((
                    vec![
                        (*operation).to_owned(),
                        status.to_string(),
                        (*code).to_owned(),
                    ],
                    count,
                ));
            }
        }
        out.counter_series(
            "baton_requests_total",
            "HTTP requests answered, by OpenAPI operation, status and stable error code (ok below 400).",
            &["operation", "status", "code"],
            &answers,
        );
        let latencies: Vec<(Vec<String>, &Histogram)> = self
            .operations
            .iter()
            .zip(&self.per_operation)
            .map(|(operation, metrics)| (vec![(*operation).to_owned()], &metrics.latency))
            .collect();
        out.histogram_series(
            "baton_request_duration_seconds",
            "Time from a request's arrival to its answer (for a watch stream, to its first byte), by OpenAPI operation.",
            &["operation"],
            &latencies,
        );
        let refused: Vec<(Vec<String>, u64)> = REFUSALS
            .iter()
            .zip(&self.refused)
            .map(|(reason, counter)| (vec![(*reason).to_owned()], counter.get()))
            .collect();
        out.counter_series(
            "baton_requests_refused_total",
            "Requests refused before anything was applied: overloaded (503, the proposer's queue is full), rate_limit and quota (429), watch_streams (429, too many streams).",
            &["reason"],
            &refused,
        );
        out.counter(
            "baton_watch_streams_opened_total",
            "Watch and observe streams opened on this node.",
            &self.watch_opened,
        );
        let resyncs: Vec<(Vec<String>, u64)> = RESYNC_REASONS
            .iter()
            .zip(&self.watch_resyncs)
            .map(|(reason, counter)| (vec![(*reason).to_owned()], counter.get()))
            .collect();
        out.counter_series(
            "baton_watch_resyncs_total",
            "Watch streams this node ended with a resync event, by reason.",
            &["reason"],
            &resyncs,
        );
    }
}

/// A request on its way in: when it arrived. Its operation is read once it
/// was routed (the matched resource notes it, see `operation::operation_of`).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    started: Instant,
}

impl Timing {
    /// Starts timing `request` (before it is handed on).
    pub fn start(_request: &ServiceRequest) -> Timing {
        Timing {
            started: Instant::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::UNROUTED;

    #[test]
    fn an_unknown_operation_counts_as_unrouted() {
        let metrics = RequestMetrics::default();
        let unrouted = metrics.operation(UNROUTED) as *const OperationMetrics;
        assert_eq!(
            metrics.operation("no_such_operation") as *const OperationMetrics,
            unrouted
        );
        assert_ne!(
            metrics.operation("acquire_lock") as *const OperationMetrics,
            unrouted
        );
    }
}
