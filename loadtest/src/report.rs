//! The JSON report of one run, and the checks `make test-loadtest` applies to it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::recorder::{DistributionPoint, IntervalHistograms, Latency, TimelinePoint};

/// What one run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Scenario name (`lock-cycle`, ...).
    pub scenario: String,
    /// `baton` or `etcd`.
    pub target_kind: String,
    /// Base URL of the target.
    pub target: String,
    /// `closed` (clients loop) or `open` (operations start at a fixed rate).
    pub mode: String,
    /// Concurrent clients (closed loop), or the pool serving the rate (open loop).
    pub clients: usize,
    /// Intended operations per second (open loop only).
    pub rate_per_s: Option<f64>,
    /// Length of the measured phase (setup excluded), seconds.
    pub duration_s: f64,
    /// Successful operations.
    pub operations: u64,
    /// Failed operations.
    pub errors: u64,
    /// Failed operations by stable code.
    pub errors_by_code: BTreeMap<String, u64>,
    /// Successful operations per second.
    pub throughput_per_s: f64,
    /// Latency percentiles (µs). In open loop, measured from each operation's
    /// intended start time (no coordinated omission).
    pub latency_us: Latency,
    /// What one operation is in this scenario.
    pub operation: String,
    /// Server CPU used during the measured phase, in cores (when `--server-pid`).
    pub server_cpu_cores: Option<f64>,
    /// This process's CPU during the measured phase, in cores (same machine).
    pub client_cpu_cores: Option<f64>,
    /// fsync + fdatasync calls by the server during the measured phase (when counted).
    pub server_fsyncs: Option<u64>,
    /// Scenario-specific numbers (keepalive: leases, expiries; watch: deliveries ...).
    pub extra: BTreeMap<String, Value>,
    /// Per-interval latency and throughput.
    pub timeline: Vec<TimelinePoint>,
    /// Latency distribution.
    pub distribution: Vec<DistributionPoint>,
    /// The timeline's histograms (not written out): percentiles of a stretch.
    #[serde(skip)]
    pub intervals: IntervalHistograms,
}

/// Fields every report must carry (checked on the JSON, so a renamed field fails).
pub const REQUIRED_FIELDS: &[&str] = &[
    "scenario",
    "target_kind",
    "mode",
    "clients",
    "duration_s",
    "operations",
    "errors",
    "errors_by_code",
    "throughput_per_s",
    "latency_us",
    "timeline",
    "distribution",
];

/// Latency fields every report must carry.
pub const REQUIRED_LATENCY_FIELDS: &[&str] = &["p50", "p90", "p99", "p999", "max"];

/// Checks a report's JSON for shape and sanity: required fields, operations > 0,
/// ordered percentiles, and (when `expect_no_errors`) zero errors. Returns every
/// problem found.
pub fn validate(json: &Value, expect_no_errors: bool) -> Vec<String> {
    let mut problems = Vec::new();
    for field in REQUIRED_FIELDS {
        if json.get(field).is_none() {
            problems.push(format!("missing field `{field}`"));
        }
    }
    let latency = &json["latency_us"];
    let mut last = 0;
    for field in REQUIRED_LATENCY_FIELDS {
        match latency[field].as_u64() {
            None => problems.push(format!("missing latency_us.{field}")),
            Some(v) if v < last => problems.push(format!("latency_us.{field} = {v} < {last}")),
            Some(v) => last = v,
        }
    }
    let operations = json["operations"].as_u64().unwrap_or(0);
    if operations == 0 {
        problems.push("operations == 0".into());
    }
    // `is_some_and(> 0)` also rejects NaN and a missing field.
    if !json["throughput_per_s"].as_f64().is_some_and(|t| t > 0.0) {
        problems.push("throughput_per_s is not > 0".into());
    }
    let errors = json["errors"].as_u64().unwrap_or(u64::MAX);
    let by_code: u64 = json["errors_by_code"]
        .as_object()
        .map(|m| m.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0);
    if errors != by_code {
        problems.push(format!(
            "errors = {errors} but errors_by_code sums to {by_code}"
        ));
    }
    if expect_no_errors && errors != 0 {
        problems.push(format!("{errors} errors: {}", json["errors_by_code"]));
    }
    if json["timeline"].as_array().is_none_or(Vec::is_empty) {
        problems.push("empty timeline".into());
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn good() -> Value {
        json!({
            "scenario": "lock-cycle", "target_kind": "baton", "mode": "closed",
            "clients": 4, "duration_s": 2.0, "operations": 10, "errors": 1,
            "errors_by_code": {"timeout": 1}, "throughput_per_s": 5.0,
            "latency_us": {"p50": 1, "p90": 2, "p99": 3, "p999": 4, "max": 5},
            "timeline": [{"t_s": 0.0}], "distribution": [],
        })
    }

    #[test]
    fn a_good_report_passes() {
        assert_eq!(validate(&good(), false), Vec::<String>::new());
    }

    #[test]
    fn errors_fail_when_none_are_expected() {
        assert_eq!(validate(&good(), true).len(), 1);
    }

    #[test]
    fn missing_fields_and_empty_runs_fail() {
        let mut r = good();
        r.as_object_mut().map(|m| m.remove("latency_us"));
        r["operations"] = json!(0);
        let problems = validate(&r, false);
        assert!(
            problems.iter().any(|p| p.contains("latency_us`")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("operations == 0")),
            "{problems:?}"
        );
    }

    #[test]
    fn unordered_percentiles_fail() {
        let mut r = good();
        r["latency_us"]["p99"] = json!(0);
        assert!(!validate(&r, false).is_empty());
    }
}
