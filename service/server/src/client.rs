//! The typed HTTP client the command line uses: one method per operation, the
//! request and answer bodies being the API crate's own types (the ones the
//! OpenAPI document is generated from), and refusals read back as the
//! documented [`Problem`].

use std::time::Duration;

use baton_api::cluster::ClusterInfo;
use baton_api::elections::{CampaignBody, Elected, ElectionInfo, ResignBody, Resigned};
use baton_api::error::Problem;
use baton_api::force_release::{ForceReleaseBody, ForceReleased};
use baton_api::leases::{CreateLeaseBody, LeaseCreated, LeaseInfo, LeaseKeptAlive, LeaseRevoked};
use baton_api::locks::{
    AcquireBody, HolderBody, LockGrant, LockInfo, LockPage, LockReleased, LockRenewed,
};
use baton_api::members::{AddMemberBody, MembershipChanged};
use baton_api::names::{NameInfo, NamePage, RegisterBody, Registered};
pub use baton_api::request::ListQuery;
use baton_api::semaphores::{PermitsGranted, PermitsRenewed, SemaphoreAcquireBody};
use reqwest::{Method, RequestBuilder, Response};
use serde::de::DeserializeOwned;

use crate::event_stream::EventStream;

/// Why a call did not return its answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused with a problem document.
    #[error("{} {}: {}", .0.status, .0.code, .0.detail)]
    Problem(Box<Problem>),
    /// No answer: connection refused, reset, timed out.
    #[error("cannot reach {endpoint}: {reason}")]
    Transport {
        /// The endpoint called.
        endpoint: String,
        /// What the transport said.
        reason: String,
    },
    /// An answer that is neither the documented success nor a problem.
    #[error("unexpected answer from {endpoint}: {detail}")]
    Unexpected {
        /// The endpoint called.
        endpoint: String,
        /// What was wrong with it.
        detail: String,
    },
}

impl ClientError {
    /// The problem's stable code, when the server refused.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Problem(problem) => Some(&problem.code),
            _ => None,
        }
    }
}

/// The kinds of holding an admin can force-release.
#[derive(Debug, Clone, Copy)]
pub enum HoldingKind {
    /// `/v1/locks`.
    Lock,
    /// `/v1/elections`.
    Election,
    /// `/v1/names`.
    Name,
}

impl HoldingKind {
    fn collection(self) -> &'static str {
        match self {
            HoldingKind::Lock => "locks",
            HoldingKind::Election => "elections",
            HoldingKind::Name => "names",
        }
    }
}

/// A connection to one Baton endpoint.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    endpoint: String,
    token: Option<String>,
    cluster_secret: Option<String>,
}

impl Client {
    /// A client for `endpoint` (`http(s)://host:port`), sending `token` as a
    /// bearer token when given; `tls` says whom to trust over https.
    pub fn new(
        endpoint: &str,
        token: Option<String>,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Client, ClientError> {
        let endpoint = endpoint.trim_end_matches('/').to_owned();
        // A redirect is reported, not followed: Baton never sends one, and
        // followed it took the cluster secret to whatever address it named.
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            // `baton lock` renews every ttl/3, 5 s by default: just when the
            // node closes the connection the last renew left idle.
            .pool_idle_timeout(crate::http_timeouts::POOL_IDLE_TIMEOUT);
        if let Some(tls) = tls {
            builder = builder.use_preconfigured_tls(tls);
        }
        let http = builder.build().map_err(|error| ClientError::Transport {
            endpoint: endpoint.clone(),
            reason: error.to_string(),
        })?;
        Ok(Client {
            http,
            endpoint,
            token: token.filter(|t| !t.is_empty()),
            cluster_secret: None,
        })
    }

    /// Also presents the cluster secret (membership changes, force-release).
    pub fn with_cluster_secret(mut self, secret: Option<String>) -> Client {
        self.cluster_secret = secret.filter(|s| !s.is_empty());
        self
    }

    /// The endpoint this client calls.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.endpoint));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(secret) = &self.cluster_secret {
            request = request.header("baton-cluster-secret", secret);
        }
        request
    }

    async fn send(&self, request: RequestBuilder) -> Result<Response, ClientError> {
        let response = request
            .send()
            .await
            .map_err(|error| self.transport(&error))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        // A redirect names where it points: most likely the endpoint is
        // wrong (http for an https node, a path, an ingress in between).
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|value| value.to_str().ok())
            .map(|location| format!(" to {location} (not followed: check --endpoint)"))
            .unwrap_or_default();
        let text = response
            .text()
            .await
            .map_err(|error| self.transport(&error))?;
        match serde_json::from_str::<Problem>(&text) {
            Ok(problem) => Err(ClientError::Problem(Box::new(problem))),
            Err(_) => Err(ClientError::Unexpected {
                endpoint: self.endpoint.clone(),
                detail: format!(
                    "{status}{location}: {}",
                    text.chars().take(200).collect::<String>()
                ),
            }),
        }
    }

    async fn call<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T, ClientError> {
        let response = self.send(request).await?;
        let bytes = response
            .bytes()
            .await
            .map_err(|error| self.transport(&error))?;
        serde_json::from_slice(&bytes).map_err(|error| ClientError::Unexpected {
            endpoint: self.endpoint.clone(),
            detail: error.to_string(),
        })
    }

    fn transport(&self, error: &reqwest::Error) -> ClientError {
        // reqwest's Display names only the outermost layer ("error sending
        // request"); the cause (connection refused) is what a user needs.
        let mut reason = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            reason = format!("{reason}: {cause}");
            source = cause.source();
        }
        ClientError::Transport {
            endpoint: self.endpoint.clone(),
            reason,
        }
    }

    /// `POST /v1/leases`.
    pub async fn create_lease(&self, body: &CreateLeaseBody) -> Result<LeaseCreated, ClientError> {
        self.call(self.request(Method::POST, "/v1/leases").json(body))
            .await
    }

    /// `POST /v1/leases/{id}:keepalive`, answered within `timeout` or refused.
    pub async fn keepalive(
        &self,
        lease_id: &str,
        timeout: Duration,
    ) -> Result<LeaseKeptAlive, ClientError> {
        let path = format!("/v1/leases/{}:keepalive", encode(lease_id));
        self.call(self.request(Method::POST, &path).timeout(timeout))
            .await
    }

    /// `GET /v1/leases/{id}`.
    pub async fn get_lease(&self, lease_id: &str) -> Result<LeaseInfo, ClientError> {
        let path = format!("/v1/leases/{}", encode(lease_id));
        self.call(self.request(Method::GET, &path)).await
    }

    /// `DELETE /v1/leases/{id}`.
    pub async fn revoke_lease(&self, lease_id: &str) -> Result<LeaseRevoked, ClientError> {
        let path = format!("/v1/leases/{}", encode(lease_id));
        self.call(self.request(Method::DELETE, &path)).await
    }

    /// `POST /v1/locks/{name}:acquire` (waits server-side up to `wait_ms`).
    pub async fn acquire(&self, name: &str, body: &AcquireBody) -> Result<LockGrant, ClientError> {
        let path = format!("/v1/locks/{}:acquire", encode(name));
        self.call(self.request(Method::POST, &path).json(body))
            .await
    }

    /// `POST /v1/locks/{name}:renew`, answered within `timeout` or refused.
    pub async fn renew(
        &self,
        name: &str,
        body: &HolderBody,
        timeout: Duration,
    ) -> Result<LockRenewed, ClientError> {
        let path = format!("/v1/locks/{}:renew", encode(name));
        self.call(
            self.request(Method::POST, &path)
                .json(body)
                .timeout(timeout),
        )
        .await
    }

    /// `POST /v1/locks/{name}:release`.
    pub async fn release(
        &self,
        name: &str,
        body: &HolderBody,
    ) -> Result<LockReleased, ClientError> {
        let path = format!("/v1/locks/{}:release", encode(name));
        self.call(self.request(Method::POST, &path).json(body))
            .await
    }

    /// `POST /v1/semaphores/{name}:acquire` (waits server-side up to `wait_ms`).
    pub async fn acquire_permits(
        &self,
        name: &str,
        body: &SemaphoreAcquireBody,
    ) -> Result<PermitsGranted, ClientError> {
        let path = format!("/v1/semaphores/{}:acquire", encode(name));
        self.call(self.request(Method::POST, &path).json(body))
            .await
    }

    /// `POST /v1/semaphores/{name}:renew`, answered within `timeout` or refused.
    pub async fn renew_permits(
        &self,
        name: &str,
        body: &HolderBody,
        timeout: Duration,
    ) -> Result<PermitsRenewed, ClientError> {
        let path = format!("/v1/semaphores/{}:renew", encode(name));
        self.call(
            self.request(Method::POST, &path)
                .json(body)
                .timeout(timeout),
        )
        .await
    }

    /// `POST /v1/semaphores/{name}:release`.
    pub async fn release_permits(
        &self,
        name: &str,
        body: &HolderBody,
    ) -> Result<LockReleased, ClientError> {
        let path = format!("/v1/semaphores/{}:release", encode(name));
        self.call(self.request(Method::POST, &path).json(body))
            .await
    }

    /// `GET /v1/locks/{name}`.
    pub async fn get_lock(&self, name: &str) -> Result<LockInfo, ClientError> {
        let path = format!("/v1/locks/{}", encode(name));
        self.call(self.request(Method::GET, &path)).await
    }

    /// `GET /v1/locks`.
    pub async fn list_locks(&self, query: &ListQuery) -> Result<LockPage, ClientError> {
        self.call(self.request(Method::GET, "/v1/locks").query(query))
            .await
    }

    /// `POST /v1/{kind}/{name}:revoke` (admin).
    pub async fn force_release(
        &self,
        kind: HoldingKind,
        name: &str,
        body: &ForceReleaseBody,
    ) -> Result<ForceReleased, ClientError> {
        let path = format!("/v1/{}/{}:revoke", kind.collection(), encode(name));
        self.call(self.request(Method::POST, &path).json(body))
            .await
    }

    /// `POST /v1/elections/{name}:campaign` (waits server-side up to `wait_ms`).
    pub async fn campaign(&self, name: &str, body: &CampaignBody) -> Result<Elected, ClientError> {
        let path = format!("/v1/elections/{}:campaign", encode(name));
        self.call(self.request(Method::POST, &path).json(body))
            .await
    }

    /// `POST /v1/elections/{name}:resign`.
    pub async fn resign(&self, name: &str, body: &ResignBody) -> Result<Resigned, ClientError> {
        let path = format!("/v1/elections/{}:resign", encode(name));
        self.call(self.request(Method::POST, &path).json(body))
            .await
    }

    /// `GET /v1/elections/{name}`.
    pub async fn get_election(&self, name: &str) -> Result<ElectionInfo, ClientError> {
        let path = format!("/v1/elections/{}", encode(name));
        self.call(self.request(Method::GET, &path)).await
    }

    /// `GET /v1/elections/{name}:observe`: leader changes as server-sent events.
    pub async fn observe(&self, name: &str) -> Result<EventStream, ClientError> {
        let path = format!("/v1/elections/{}:observe", encode(name));
        let response = self.send(self.request(Method::GET, &path)).await?;
        Ok(EventStream::new(response))
    }

    /// `GET /v1/watch`: changes under a prefix as server-sent events.
    pub async fn watch(&self, query: &[(&str, String)]) -> Result<EventStream, ClientError> {
        let response = self
            .send(self.request(Method::GET, "/v1/watch").query(query))
            .await?;
        Ok(EventStream::new(response))
    }

    /// `PUT /v1/names/{name}`.
    pub async fn register_name(
        &self,
        name: &str,
        body: &RegisterBody,
    ) -> Result<Registered, ClientError> {
        let path = format!("/v1/names/{}", encode(name));
        self.call(self.request(Method::PUT, &path).json(body)).await
    }

    /// `GET /v1/names/{name}`.
    pub async fn get_name(&self, name: &str) -> Result<NameInfo, ClientError> {
        let path = format!("/v1/names/{}", encode(name));
        self.call(self.request(Method::GET, &path)).await
    }

    /// `GET /v1/names`.
    pub async fn list_names(&self, query: &ListQuery) -> Result<NamePage, ClientError> {
        self.call(self.request(Method::GET, "/v1/names").query(query))
            .await
    }

    /// `GET /v1/cluster`.
    pub async fn cluster(&self) -> Result<ClusterInfo, ClientError> {
        self.call(self.request(Method::GET, "/v1/cluster")).await
    }

    /// `POST /v1/cluster/members` (admin).
    pub async fn add_member(&self, body: &AddMemberBody) -> Result<MembershipChanged, ClientError> {
        self.call(self.request(Method::POST, "/v1/cluster/members").json(body))
            .await
    }

    /// `DELETE /v1/cluster/members/{id}` (admin).
    pub async fn remove_member(&self, id: u64) -> Result<MembershipChanged, ClientError> {
        let path = format!("/v1/cluster/members/{id}");
        self.call(self.request(Method::DELETE, &path)).await
    }
}

/// A name or id as a path segment: names may contain `/`, which stays a path
/// separator (the server's routes take it); anything outside the characters
/// names may use is percent-encoded, so the server sees it and refuses it
/// with `invalid_name` instead of the URL breaking.
pub fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || b"._@+=~-/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_slashes_and_everything_else_is_escaped() {
        assert_eq!(encode("team-a/db/migrate"), "team-a/db/migrate");
        assert_eq!(encode("a b:c?d#e%"), "a%20b%3Ac%3Fd%23e%25");
        assert_eq!(encode("é"), "%C3%A9");
    }

    // The load tool and the chaos harness keep the same limit as the CLI and
    // the proxy (`baton_chaos` stays free of the service crates, so the value
    // cannot be shared).
    const _: () = assert!(
        baton_chaos::client::POOL_IDLE_TIMEOUT.as_millis()
            == crate::http_timeouts::POOL_IDLE_TIMEOUT.as_millis()
    );

    /// Requests `baton lock` sends ttl/3 apart (5 s by default) went out on
    /// the previous request's connection, which the node closes after 5 s
    /// idle: a quiet spell of half a second past the pool limit must not reuse
    /// a connection.
    #[tokio::test]
    async fn a_connection_idle_past_the_pool_limit_is_not_reused() {
        use baton_chaos::idle_server::IdleRecordingServer;
        let node = IdleRecordingServer::start(Duration::ZERO)
            .await
            .expect("a local listener");
        let client = Client::new(&node.base, None, None).expect("a client");
        let quiet = crate::http_timeouts::POOL_IDLE_TIMEOUT + Duration::from_millis(500);
        // The recorder's `{}` is no election: only the requests matter here.
        let _ = client.get_election("nightly").await;
        tokio::time::sleep(quiet).await;
        let _ = client.get_election("nightly").await;
        assert_eq!(node.requests(), 2);
        assert!(
            node.longest_idle() < quiet,
            "a connection idle for {:?} was reused",
            node.longest_idle()
        );
    }
}
