//! The follower's side of [`LeaderCall`]: one pooled HTTP client to the peer
//! listeners, the cluster secret on every request.

use std::time::Duration;

use crate::leader_call::{LeaderCall, LeaderResult, PeerStatus};
use crate::network::CLUSTER_SECRET_HEADER;

/// Why a call to another node got no answer.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The request never reached the peer (connection refused or not made in
    /// time, or refused before it was read): retrying elsewhere is safe.
    #[error("not sent to {peer}: {reason}")]
    NotSent {
        /// The peer URL.
        peer: String,
        /// What failed.
        reason: String,
    },
    /// The request was sent but no answer came back: it may have taken effect.
    #[error("no answer from {peer}: {reason}")]
    Lost {
        /// The peer URL.
        peer: String,
        /// What failed.
        reason: String,
    },
}

/// Calls other nodes' peer listeners.
#[derive(Clone)]
pub struct LeaderLink {
    client: reqwest::Client,
    secret: Option<String>,
}

impl LeaderLink {
    /// A link on a shared client.
    pub fn new(client: reqwest::Client, secret: Option<String>) -> Self {
        LeaderLink { client, secret }
    }

    /// Sends `call` to the node whose peer listener is `base`, waiting up to
    /// `timeout` for the answer.
    pub async fn call(
        &self,
        base: &str,
        call: &LeaderCall,
        timeout: Duration,
    ) -> Result<LeaderResult, LinkError> {
        let span = crate::child_span!(
            "leader_call",
            otel.kind = "client",
            raft.call = crate::trace_context::call_name(call),
            raft.leader = base
        );
        crate::trace_context::in_span(span, self.call_once(base, call, timeout)).await
    }

    async fn call_once(
        &self,
        base: &str,
        call: &LeaderCall,
        timeout: Duration,
    ) -> Result<LeaderResult, LinkError> {
        let request = self.client.post(format!("{base}/raft/leader")).json(call);
        // Inside the `leader_call` span: the leader's spans become its children.
        let request = crate::trace_context::propagate(request);
        let response = self.send(base, request, timeout).await?;
        read_json(base, response).await
    }

    /// Posts `body` as JSON to a client API `url` with the cluster secret (a
    /// joining node asking to be added); `Ok` on any 2xx answer.
    pub async fn post_json<T: serde::Serialize>(
        &self,
        url: &str,
        body: &T,
        timeout: Duration,
    ) -> Result<(), LinkError> {
        let request = self.client.post(url).json(body);
        self.send(url, request, timeout).await.map(drop)
    }

    /// Asks the node at `base` about itself.
    pub async fn status(&self, base: &str, timeout: Duration) -> Result<PeerStatus, LinkError> {
        let request = self.client.get(format!("{base}/raft/status"));
        let response = self.send(base, request, timeout).await?;
        read_json(base, response).await
    }

    /// Sends `request` with the secret and a timeout. A refusal (non-2xx) means
    /// the peer did not act on it, so it counts as not sent.
    async fn send(
        &self,
        peer: &str,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<reqwest::Response, LinkError> {
        let request = match &self.secret {
            Some(secret) => request.header(CLUSTER_SECRET_HEADER, secret),
            None => request,
        };
        let response = request
            .timeout(timeout)
            .send()
            .await
            .map_err(|error| classify(peer, &error))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        Err(LinkError::NotSent {
            peer: peer.to_owned(),
            reason: format!("answered {status}: {text}"),
        })
    }
}

/// The body of a 2xx answer; a body that does not arrive or parse leaves the
/// outcome unknown.
async fn read_json<T: serde::de::DeserializeOwned>(
    peer: &str,
    response: reqwest::Response,
) -> Result<T, LinkError> {
    response.json().await.map_err(|error| LinkError::Lost {
        peer: peer.to_owned(),
        reason: error.to_string(),
    })
}

fn classify(peer: &str, error: &reqwest::Error) -> LinkError {
    let reason = error.to_string();
    let peer = peer.to_owned();
    if error.is_connect() || error.is_builder() {
        LinkError::NotSent { peer, reason }
    } else {
        LinkError::Lost { peer, reason }
    }
}
