//! `baton serve --proxy URL`: a stateless sidecar that forwards every request to
//! the cluster, so an application pod can always call `localhost:7878`.
//!
//! It keeps no state and no disk. It learns the members (and who leads) from
//! `GET /v1/cluster` and sends requests to the leader first, saving the
//! follower-to-leader hop. When a node cannot be reached it tries the next; a
//! request that was sent but got no answer is retried only when that is safe
//! (a read, or a write carrying an `Idempotency-Key`), otherwise the client hears
//! 503 with "outcome unknown".

use std::sync::{Arc, RwLock};
use std::time::Duration;

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use baton_api::error::ApiError;
use baton_raft::RaftLayerError;
use futures_util::TryStreamExt;
use serde::Deserialize;

/// Headers that describe one hop, not the request.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// The cluster as the proxy knows it.
pub struct Proxy {
    client: reqwest::Client,
    seeds: Vec<String>,
    /// Leader first, then the other members, then the seeds.
    order: RwLock<Vec<String>>,
}

#[derive(Deserialize)]
struct ClusterView {
    leader_id: Option<u64>,
    members: Vec<MemberView>,
}

#[derive(Deserialize)]
struct MemberView {
    id: u64,
    api_addr: String,
}

impl Proxy {
    /// A proxy for the comma-separated cluster URLs in `targets`.
    /// With `tls`, https cluster URLs are reached with that client configuration.
    pub fn new(targets: &str, tls: Option<rustls::ClientConfig>) -> reqwest::Result<Arc<Proxy>> {
        let seeds: Vec<String> = targets
            .split(',')
            .map(|url| url.trim().trim_end_matches('/').to_owned())
            .filter(|url| !url.is_empty())
            .collect();
        let mut builder = reqwest::Client::builder()
            // A redirect goes back to the client as it came (`relay`): followed
            // here, it took the client's headers, `baton-cluster-secret`
            // included, to whatever address it named.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(1))
            // The nodes close idle connections; this pool lets go first.
            .pool_idle_timeout(crate::http_timeouts::POOL_IDLE_TIMEOUT)
            .tcp_nodelay(true);
        if let Some(tls) = tls {
            builder = builder.use_preconfigured_tls(tls);
        }
        let client = builder.build()?;
        Ok(Arc::new(Proxy {
            client,
            order: RwLock::new(seeds.clone()),
            seeds,
        }))
    }

    /// Where to send the next request, best first.
    fn candidates(&self) -> Vec<String> {
        self.order
            .read()
            .map(|order| order.clone())
            .unwrap_or_else(|_| self.seeds.clone())
    }

    /// Refreshes the member list from any reachable node, every `every`.
    pub async fn discover(self: Arc<Self>, every: Duration) {
        loop {
            for base in self.candidates() {
                let url = format!("{base}/v1/cluster?consistency=local");
                let Ok(response) = self.client.get(&url).timeout(every).send().await else {
                    continue;
                };
                let Ok(view) = response.json::<ClusterView>().await else {
                    continue;
                };
                let mut order: Vec<String> = Vec::new();
                let leader = view.members.iter().find(|m| Some(m.id) == view.leader_id);
                let rest = view.members.iter().filter(|m| Some(m.id) != view.leader_id);
                for addr in leader
                    .into_iter()
                    .chain(rest)
                    .map(|m| m.api_addr.trim_end_matches('/').to_owned())
                    .chain(self.seeds.iter().cloned())
                {
                    if !addr.is_empty() && !order.contains(&addr) {
                        order.push(addr);
                    }
                }
                if let Ok(mut current) = self.order.write() {
                    *current = order;
                }
                break;
            }
            tokio::time::sleep(every).await;
        }
    }
}

fn unavailable(reason: String) -> HttpResponse {
    ApiError::Raft(RaftLayerError::Unavailable {
        reason,
        retry_after: Duration::from_secs(1),
    })
    .error_response()
}

/// Forwards one request (the proxy's only route besides `/healthz`), in a
/// trace span of its own when tracing is on: a child of the caller's
/// `traceparent`, and the parent the node it forwards to sees.
pub async fn forward(
    proxy: web::Data<Proxy>,
    http: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    use tracing::Instrument;
    let span = forward_span(&http);
    forward_once(proxy, http, payload).instrument(span).await
}

/// The proxy's span for one request (disabled with tracing off).
fn forward_span(http: &HttpRequest) -> tracing::Span {
    use baton_raft::trace_context;
    if !trace_context::enabled() {
        return tracing::Span::none();
    }
    let parent = trace_context::extract(http.headers());
    if !trace_context::root_sampled(&parent) {
        // The caller's own traceparent, if any, goes on to the node unchanged.
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: "baton_trace",
        "proxy_forward",
        otel.kind = "server",
        http.request.method = http.method().as_str(),
    );
    trace_context::set_parent(&span, parent);
    span
}

async fn forward_once(
    proxy: web::Data<Proxy>,
    http: HttpRequest,
    payload: web::Payload,
) -> HttpResponse {
    // The API's own reader: the same 16 KiB limit and the same 413 problem.
    let body = match baton_api::request::read_body(payload).await {
        Ok(body) => body,
        Err(error) => return error.error_response(),
    };
    let retry_safe = matches!(*http.method(), Method::GET | Method::HEAD)
        || http.headers().contains_key("idempotency-key");
    let path = http
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut last_error = String::from("no cluster URL configured");
    for base in proxy.candidates() {
        let method = reqwest::Method::from_bytes(http.method().as_str().as_bytes())
            .unwrap_or(reqwest::Method::GET);
        let mut request = proxy
            .client
            .request(method, format!("{base}{path}"))
            .body(body.clone());
        for (name, value) in http.headers() {
            if !HOP_BY_HOP.contains(&name.as_str()) && name != "content-length" {
                request = request.header(name.as_str(), value.as_bytes());
            }
        }
        // With tracing on, the node sees this proxy's span as the parent.
        let request = baton_raft::trace_context::propagate(request);
        let sent = tokio::select! {
            sent = request.send() => sent,
            () = baton_api::client_gone(&http) => return ApiError::ClientGone.error_response(),
        };
        match sent {
            Ok(response) => return relay(&http, response),
            Err(error) if error.is_connect() || retry_safe => {
                last_error = format!("{base}: {error}");
            }
            Err(error) => {
                return unavailable(format!(
                    "{base} did not answer ({error}); the request may or may not have taken effect: retry with an Idempotency-Key"
                ));
            }
        }
    }
    unavailable(format!("no cluster node reachable (last: {last_error})"))
}

/// Streams the upstream answer back unchanged (status, headers, body; SSE too).
/// A watch stream's connection gives up its hang-up duplicate, as on a node:
/// each stream then holds two descriptors here, the client's and the node's.
fn relay(http: &HttpRequest, response: reqwest::Response) -> HttpResponse {
    let status =
        StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut answer = HttpResponse::build(status);
    let event_stream = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    if event_stream {
        baton_api::hand_over_to_stream(http, &mut answer);
    }
    for (name, value) in response.headers() {
        if HOP_BY_HOP.contains(&name.as_str()) || name == "content-length" {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            answer.append_header((name, value));
        }
    }
    answer.streaming(
        response
            .bytes_stream()
            .map_err(actix_web::error::ErrorBadGateway),
    )
}

/// The proxy's own liveness (everything else, `/readyz` included, is the
/// cluster's answer).
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok", "mode": "proxy"}))
}
