//! Traces (issue 14) from real processes: an OTLP/HTTP receiver in this test
//! process (protobuf decoded with `opentelemetry-proto`) that the nodes export
//! to, a request carrying a W3C `traceparent`, and what arrives.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{web, App, HttpResponse, HttpServer};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use serde_json::{json, Value};

use crate::harness::{self, baton_bin, eventually, exited, free_port, Cluster};

/// One span as the receiver got it, with its resource's attributes.
#[derive(Clone, Debug)]
struct Got {
    /// `service.instance.id` of the process that sent it (`node-2`, `proxy-...`).
    instance: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, String>,
}

fn text(attributes: &[KeyValue]) -> HashMap<String, String> {
    attributes
        .iter()
        .filter_map(|kv| {
            let value = match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => s.clone(),
                AnyValue::IntValue(i) => i.to_string(),
                AnyValue::BoolValue(b) => b.to_string(),
                AnyValue::DoubleValue(d) => d.to_string(),
                _ => return None,
            };
            Some((kv.key.clone(), value))
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP trace receiver on 127.0.0.1: `POST /v1/traces` with an
/// `ExportTraceServiceRequest` in protobuf, every span kept.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Got>>>,
    /// Export requests received (also ones with no span).
    requests: Arc<Mutex<usize>>,
    handle: actix_web::dev::ServerHandle,
}

impl Receiver {
    async fn start_on(port: u16) -> Receiver {
        Receiver::start_with(port, None).await
    }

    /// A receiver on `https://127.0.0.1` with the certificate of `tls`.
    async fn start_tls(tls: rustls::ServerConfig) -> Receiver {
        Receiver::start_with(free_port(), Some(tls)).await
    }

    async fn start_with(port: u16, tls: Option<rustls::ServerConfig>) -> Receiver {
        let spans: Arc<Mutex<Vec<Got>>> = Arc::default();
        let requests: Arc<Mutex<usize>> = Arc::default();
        let (kept, counted) = (spans.clone(), requests.clone());
        let server = HttpServer::new(move || {
            let (kept, counted) = (kept.clone(), counted.clone());
            App::new().route(
                "/v1/traces",
                web::post().to(move |body: web::Bytes| {
                    let (kept, counted) = (kept.clone(), counted.clone());
                    async move {
                        *counted.lock().unwrap() += 1;
                        let Ok(export) = ExportTraceServiceRequest::decode(body.as_ref()) else {
                            return HttpResponse::BadRequest().finish();
                        };
                        let mut kept = kept.lock().unwrap();
                        for resource in export.resource_spans {
                            let resource_attributes = resource
                                .resource
                                .map(|r| text(&r.attributes))
                                .unwrap_or_default();
                            let instance = resource_attributes
                                .get("service.instance.id")
                                .cloned()
                                .unwrap_or_default();
                            for scope in resource.scope_spans {
                                for span in scope.spans {
                                    kept.push(Got {
                                        instance: instance.clone(),
                                        name: span.name,
                                        trace_id: hex(&span.trace_id),
                                        span_id: hex(&span.span_id),
                                        parent: hex(&span.parent_span_id),
                                        attributes: text(&span.attributes),
                                    });
                                }
                            }
                        }
                        // An empty ExportTraceServiceResponse encodes as no bytes.
                        HttpResponse::Ok()
                            .content_type("application/x-protobuf")
                            .finish()
                    }
                }),
            )
        })
        .workers(1)
        .disable_signals();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let server = match tls {
            None => server.bind(("127.0.0.1", port)),
            Some(tls) => server.bind_rustls_0_23(("127.0.0.1", port), tls),
        }
        .unwrap_or_else(|error| panic!("the OTLP receiver cannot bind 127.0.0.1:{port}: {error}"))
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Receiver {
            url: format!("{scheme}://127.0.0.1:{port}"),
            spans,
            requests,
            handle,
        }
    }

    async fn start() -> Receiver {
        Receiver::start_on(free_port()).await
    }

    fn spans_of(&self, trace_id: &str) -> Vec<Got> {
        let spans = self.spans.lock().unwrap();
        spans
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }

    /// Waits until spans of `trace_id` named `names` have all arrived.
    async fn wait_for(&self, trace_id: &str, names: &[&str]) -> Vec<Got> {
        let got = eventually(Duration::from_secs(30), || async {
            let spans = self.spans_of(trace_id);
            names
                .iter()
                .all(|name| spans.iter().any(|s| s.name == *name))
                .then_some(spans)
        })
        .await;
        got.unwrap_or_else(|| {
            panic!(
                "spans {names:?} of trace {trace_id} never all arrived; got {:#?}",
                self.spans_of(trace_id)
            )
        })
    }
}

/// A fresh W3C trace context from "the client": (trace id, span id, header).
fn client_context() -> (String, String, String) {
    client_context_flagged("01")
}

/// A fresh W3C trace context with trace flags `flags` (`01` sampled, `00` not).
fn client_context_flagged(flags: &str) -> (String, String, String) {
    use std::hash::{BuildHasher, Hasher};
    let random = || {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u8(0);
        hasher.finish()
    };
    let trace_id = format!("{:016x}{:016x}", random(), random());
    let span_id = format!("{:016x}", random());
    let header = format!("00-{trace_id}-{span_id}-{flags}");
    (trace_id, span_id, header)
}

fn one<'a>(spans: &'a [Got], instance: &str, name: &str) -> &'a Got {
    let found: Vec<&Got> = spans
        .iter()
        .filter(|s| s.instance == instance && s.name == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name} span from {instance} in {spans:#?}"
    );
    found[0]
}

/// Exports quickly (the batch processor's delay is 5 s by default).
const FAST_EXPORT: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "100");

/// Three nodes started with `extra`, exporting their spans to `receiver`.
async fn traced_cluster(receiver: &Receiver, extra: &[&str]) -> Cluster {
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        FAST_EXPORT,
    ];
    Cluster::start_env(3, extra, &env).await
}

#[tokio::test]
async fn a_request_sent_to_a_follower_is_one_trace_on_both_nodes() {
    let receiver = Receiver::start().await;
    let cluster = traced_cluster(&receiver, &[]).await;
    let leader = cluster.wait_leader(None).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let (trace_id, client_span, traceparent) = client_context();
    let response = cluster
        .client
        .post(format!(
            "{}/v1/locks/traced-lock:acquire",
            cluster.node(follower).api
        ))
        .header("traceparent", &traceparent)
        .header("idempotency-key", "never-an-attribute")
        .json(&json!({"ttl_ms": 10_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let grant: Value = response.json().await.unwrap();
    let lease_id = grant["lease_id"].as_str().unwrap().to_owned();
    let token = grant["token"].as_u64().unwrap();

    let spans = receiver
        .wait_for(
            &trace_id,
            &[
                "acquire_lock",
                "leader_call",
                "serve_leader_call",
                "proposal",
                "log.append",
                "commit",
                "apply",
            ],
        )
        .await;
    let (on_follower, on_leader) = (format!("node-{follower}"), format!("node-{leader}"));
    // The follower's request span is a child of the client's span...
    let request = one(&spans, &on_follower, "acquire_lock");
    assert_eq!(request.parent, client_span);
    assert_eq!(request.attributes["baton.name"], "traced-lock");
    assert_eq!(request.attributes["http.response.status_code"], "200");
    assert_eq!(request.attributes["baton.fencing_token"], token.to_string());
    // ...its call to the leader a child of the request...
    let call = one(&spans, &on_follower, "leader_call");
    assert_eq!(call.parent, request.span_id);
    assert_eq!(call.attributes["raft.call"], "propose");
    // ...which the leader serves under the follower's call span...
    let served = one(&spans, &on_leader, "serve_leader_call");
    assert_eq!(served.parent, call.span_id);
    // ...proposing an entry whose append, commit and apply are its children.
    let proposal = one(&spans, &on_leader, "proposal");
    assert_eq!(proposal.parent, served.span_id);
    let batch: u64 = proposal.attributes["raft.batch_size"].parse().unwrap();
    assert!(batch >= 1, "{proposal:?}");
    for stage in ["log.append", "commit", "apply"] {
        assert_eq!(
            one(&spans, &on_leader, stage).parent,
            proposal.span_id,
            "{stage}"
        );
    }
    // Secrets never become attributes.
    for span in &spans {
        for value in span.attributes.values() {
            assert!(!value.contains(&lease_id), "lease id in {span:?}");
            assert!(
                !value.contains("never-an-attribute"),
                "idempotency key in {span:?}"
            );
        }
    }
    // The third node took no part in this request.
    let third = (1..=3).find(|id| *id != leader && *id != follower).unwrap();
    assert!(
        spans.iter().all(|s| s.instance != format!("node-{third}")),
        "{spans:#?}"
    );
    receiver.handle.stop(false).await;
}

/// A leader replicates an entry while it syncs it, so the two followers can
/// make the quorum first: the entry is applied and answered before the
/// leader's own append is noted. Its `log.append` and `commit` spans still come
/// (once the append lands). Found as a flaky failure of the test above once
/// followers answered faster (session 49); here the leader's own appends are
/// held 300 ms (`--unsafe-leader-append-delay-ms`), so it happens every time.
#[tokio::test]
async fn the_stage_spans_come_when_the_followers_commit_before_the_leader_syncs() {
    let receiver = Receiver::start().await;
    let cluster = traced_cluster(&receiver, &["--unsafe-leader-append-delay-ms", "300"]).await;
    let leader = cluster.wait_leader(None).await;
    let (trace_id, _, traceparent) = client_context();
    let response = cluster
        .client
        .post(format!(
            "{}/v1/locks/traced-before-sync:acquire",
            cluster.node(leader).api
        ))
        .header("traceparent", &traceparent)
        .json(&json!({"ttl_ms": 10_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let spans = receiver
        .wait_for(
            &trace_id,
            &["acquire_lock", "proposal", "log.append", "commit", "apply"],
        )
        .await;
    let on_leader = format!("node-{leader}");
    let proposal = one(&spans, &on_leader, "proposal");
    for stage in ["log.append", "commit", "apply"] {
        assert_eq!(
            one(&spans, &on_leader, stage).parent,
            proposal.span_id,
            "{stage}"
        );
    }
    receiver.handle.stop(false).await;
}

/// Spawns one node with `env` and waits until it is ready.
async fn single_node(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    args: &[&str],
    stdout: Stdio,
) -> (std::process::Child, String) {
    let port = free_port();
    let child = Command::new(baton_bin())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--raft-listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .env("BATON_LOG", "warn")
        .env(harness::TEST_WAL_PREWRITE.0, harness::TEST_WAL_PREWRITE.1)
        .envs(env.iter().copied())
        .stdout(stdout)
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let api = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let ready = eventually(Duration::from_secs(60), || async {
        let response = client.get(format!("{api}/readyz")).send().await.ok()?;
        response.status().is_success().then_some(())
    })
    .await;
    assert!(ready.is_some(), "node never became ready");
    (child, api)
}

/// Sends a traced acquire and a traced read to `api`.
async fn traced_requests(api: &str, traceparent: &str) {
    traced_requests_on(api, traceparent, "quiet").await;
}

/// Sends a traced acquire and a traced read of lock `name` to `api`.
async fn traced_requests_on(api: &str, traceparent: &str, name: &str) {
    let client = reqwest::Client::new();
    let acquired = client
        .post(format!("{api}/v1/locks/{name}:acquire"))
        .header("traceparent", traceparent)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(acquired.status(), 200);
    let read = client
        .get(format!("{api}/v1/locks/{name}"))
        .header("traceparent", traceparent)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
}

/// SIGTERM, and the exit status once the process is gone (the exporter has
/// flushed by then).
async fn stop(child: &mut std::process::Child) -> std::process::ExitStatus {
    harness::signal(child.id(), "TERM");
    exited(child, Duration::from_secs(30))
        .await
        .expect("baton did not stop on SIGTERM")
}

/// With no OTEL_* variable, nothing is exported, not even to the default
/// endpoint an SDK falls back to (`http://localhost:4318`), where this test's
/// receiver listens: the one fixed port of the suite, because a node that
/// wrongly exported without configuration would send exactly there. The same
/// receiver then gets the same requests' spans from a node told to use it.
#[tokio::test]
async fn with_no_otel_variable_the_receiver_gets_nothing() {
    let receiver = Receiver::start_on(4318).await;
    let dir = tempfile::tempdir().unwrap();
    let (trace_id, _, traceparent) = client_context();

    let (mut quiet, api) = single_node(&dir.path().join("quiet"), &[], &[], Stdio::null()).await;
    traced_requests(&api, &traceparent).await;
    assert!(stop(&mut quiet).await.success());
    assert_eq!(
        *receiver.requests.lock().unwrap(),
        0,
        "an untraced node exported"
    );

    // The control: the same receiver, told by the standard variable.
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        FAST_EXPORT,
    ];
    let (mut traced, api) = single_node(&dir.path().join("traced"), &env, &[], Stdio::null()).await;
    traced_requests(&api, &traceparent).await;
    assert!(stop(&mut traced).await.success());
    // Flushed on SIGTERM: everything is there once the process has exited.
    let spans = receiver.spans_of(&trace_id);
    assert!(spans.iter().any(|s| s.name == "acquire_lock"), "{spans:#?}");
    assert!(spans.iter().any(|s| s.name == "get_lock"), "{spans:#?}");
    assert!(
        spans.iter().any(|s| s.name == "linearizable_read"),
        "{spans:#?}"
    );
    receiver.handle.stop(false).await;
}

#[tokio::test]
async fn an_unsupported_otlp_protocol_fails_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(baton_bin())
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--raft-listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--data-dir")
        .arg(dir.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    assert!(!output.status.success(), "started with protocol grpc");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported"),
        "{stderr}"
    );
    assert!(stderr.contains("http/protobuf"), "{stderr}");
    // Refused before anything was written.
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[tokio::test]
async fn json_log_lines_inside_a_request_carry_its_trace_id() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        // Every request logs one line when it is answered (at debug).
        ("BATON_LOG", "info,baton::request=debug"),
    ];
    let (mut node, api, log) = json_logging_node(dir.path(), &env).await;
    let (trace_id, _, traceparent) = client_context();
    traced_requests(&api, &traceparent).await;
    assert!(stop(&mut node).await.success());
    let (text, lines) = harness::json_lines(&log);
    let answered: Vec<&Value> = lines
        .iter()
        .filter(|line| line["fields"]["message"] == "answered")
        .collect();
    let ours: Vec<&&Value> = answered
        .iter()
        .filter(|line| line["trace_id"] == trace_id.as_str())
        .collect();
    // The acquire and the read, each answered inside its own request span.
    assert_eq!(ours.len(), 2, "{text}");
    assert!(ours
        .iter()
        .any(|line| line["fields"]["operation"] == "acquire_lock"));
    // Lines outside any request have no trace id.
    assert!(lines
        .iter()
        .any(|line| line["fields"]["message"] == "baton is serving"
            && line.get("trace_id").is_none()));
    receiver.handle.stop(false).await;
}

/// A node under `dir` that logs JSON lines to a file: (process, API, log file).
async fn json_logging_node(
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (std::process::Child, String, std::path::PathBuf) {
    let log = dir.join("stdout.log");
    let stdout = Stdio::from(std::fs::File::create(&log).unwrap());
    let (node, api) = single_node(&dir.join("data"), env, &["--log-format", "json"], stdout).await;
    (node, api, log)
}

/// `baton serve --proxy` forwards in a span of its own: a child of the
/// client's, and the parent of the node's request span.
#[tokio::test]
async fn the_proxy_carries_the_trace_to_the_node() {
    let receiver = Receiver::start().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        FAST_EXPORT,
    ];
    let cluster = Cluster::start_env(1, &[], &env).await;
    let port = free_port();
    let mut proxy = Command::new(baton_bin())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--proxy", &cluster.node(1).api])
        .env("BATON_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let proxied = format!("http://127.0.0.1:{port}");
    let ready = eventually(Duration::from_secs(30), || async {
        let response = cluster
            .client
            .get(format!("{proxied}/readyz"))
            .send()
            .await
            .ok()?;
        response.status().is_success().then_some(())
    })
    .await;
    assert!(ready.is_some(), "the proxy never answered /readyz");
    let (trace_id, client_span, traceparent) = client_context();
    let acquired = cluster
        .client
        .post(format!("{proxied}/v1/locks/via-proxy:acquire"))
        .header("traceparent", &traceparent)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(acquired.status(), 200);
    let spans = receiver
        .wait_for(&trace_id, &["proxy_forward", "acquire_lock"])
        .await;
    let forward = one(&spans, &format!("proxy-127.0.0.1:{port}"), "proxy_forward");
    assert_eq!(forward.parent, client_span);
    let request = one(&spans, "node-1", "acquire_lock");
    assert_eq!(request.parent, forward.span_id);
    assert!(stop(&mut proxy).await.success());
    receiver.handle.stop(false).await;
}

/// Sampling is decided at the root, before a span exists: with
/// `parentbased_traceidratio` at 0, a caller's sampled trace is still traced
/// in full, a caller's unsampled trace and traces that start at the node are
/// not (nothing of them is exported), and a JSON log line of the unsampled
/// request still carries the caller's trace id.
#[tokio::test]
async fn the_root_decides_sampling_and_unsampled_requests_export_nothing() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0"),
        ("BATON_LOG", "warn,baton::request=debug"),
        FAST_EXPORT,
    ];
    let (mut node, api, log) = json_logging_node(dir.path(), &env).await;
    let (sampled_id, _, sampled) = client_context_flagged("01");
    let (unsampled_id, _, unsampled) = client_context_flagged("00");
    traced_requests_on(&api, &sampled, "sampled").await;
    traced_requests_on(&api, &unsampled, "unsampled").await;
    let client = reqwest::Client::new();
    for i in 0..20 {
        let response = client
            .post(format!("{api}/v1/locks/rooted-{i}:acquire"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    assert!(stop(&mut node).await.success());

    let spans = receiver.spans.lock().unwrap().clone();
    let sampled_spans: Vec<&Got> = spans.iter().filter(|s| s.trace_id == sampled_id).collect();
    for name in ["acquire_lock", "get_lock", "proposal", "linearizable_read"] {
        assert!(
            sampled_spans.iter().any(|s| s.name == name),
            "no {name} span of the sampled trace in {spans:#?}"
        );
    }
    let others: Vec<&Got> = spans.iter().filter(|s| s.trace_id != sampled_id).collect();
    assert!(others.is_empty(), "unsampled requests exported {others:#?}");

    let (text, lines) = harness::json_lines(&log);
    let answered_in = |trace_id: &str| {
        lines
            .iter()
            .filter(|line| line["fields"]["message"] == "answered")
            .filter(|line| line["trace_id"] == trace_id)
            .count()
    };
    assert_eq!(answered_in(&unsampled_id), 2, "{text}");
    assert_eq!(answered_in(&sampled_id), 2, "{text}");
    receiver.handle.stop(false).await;
}

/// An `https://` collector whose certificate is signed by the CA that
/// `OTEL_EXPORTER_OTLP_CERTIFICATE` names gets the spans; without that
/// variable the same node cannot verify it and exports nothing.
#[tokio::test]
async fn spans_reach_an_https_collector_trusted_through_otel_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let certs = harness::write_certs(dir.path());
    let tls = baton_raft::Tls::load(baton_raft::TlsFiles {
        cert: certs.join("node.crt"),
        key: certs.join("node.key"),
        client_ca: None,
        peer_ca: None,
    })
    .unwrap();
    let receiver = Receiver::start_tls(tls.api_server_config().unwrap()).await;
    assert!(receiver.url.starts_with("https://"));
    let ca = certs.join("ca.crt");
    let ca = ca.to_str().unwrap();

    let (trusted_id, _, traceparent) = client_context();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca),
        FAST_EXPORT,
    ];
    let (mut node, api) = single_node(&dir.path().join("trusted"), &env, &[], Stdio::null()).await;
    traced_requests(&api, &traceparent).await;
    assert!(stop(&mut node).await.success());
    let spans = receiver.spans_of(&trusted_id);
    assert!(spans.iter().any(|s| s.name == "acquire_lock"), "{spans:#?}");

    // The control: no trust root for the dev CA, so the handshake fails.
    let (untrusted_id, _, traceparent) = client_context();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        FAST_EXPORT,
    ];
    let (mut node, api) =
        single_node(&dir.path().join("untrusted"), &env, &[], Stdio::null()).await;
    traced_requests(&api, &traceparent).await;
    assert!(stop(&mut node).await.success());
    assert!(receiver.spans_of(&untrusted_id).is_empty());
    receiver.handle.stop(false).await;
}

/// A certificate file that cannot be read fails the start, naming the file.
#[tokio::test]
async fn an_unreadable_otlp_certificate_fails_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-ca.crt");
    let output = Command::new(baton_bin())
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--raft-listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:4318")
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &missing)
        .output()
        .unwrap();
    assert!(!output.status.success(), "started without its CA file");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no-such-ca.crt"), "{stderr}");
}
