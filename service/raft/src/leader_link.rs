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

    fn authenticated(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.secret {
            Some(secret) => builder.header(CLUSTER_SECRET_HEADER, secret),
            None => builder,
        }
    }

    /// Sends `call` to the node whose peer listener is `base`, waiting up to
    /// `timeout` for the answer.
    pub async fn call(
        &self,
        base: &str,
        call: &LeaderCall,
        timeout: Duration,
    ) -> Result<LeaderResult, LinkError> {
        let request = self
            .client
            .post(format!("{base}/raft/leader"))
            .timeout(timeout)
            .json(call);
        let response = self
            .authenticated(request)
            .send()
            .await
            .map_err(|error| classify(base, &error))?;
        if !response.status().is_success() {
            // The peer's listener refused the request before acting on it
            // (wrong secret, bad body): nothing happened there.
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            return Err(LinkError::NotSent {
                peer: base.to_owned(),
                reason: format!("answered {status}: {text}"),
            });
        }
        response.json().await.map_err(|error| LinkError::Lost {
            peer: base.to_owned(),
            reason: error.to_string(),
        })
    }

    /// Posts `body` as JSON to a client API `url` with the cluster secret (a
    /// joining node asking to be added); `Ok` on any 2xx answer.
    pub async fn post_json<T: serde::Serialize>(
        &self,
        url: &str,
        body: &T,
        timeout: Duration,
    ) -> Result<(), LinkError> {
        let request = self.client.post(url).timeout(timeout).json(body);
        let response = self
            .authenticated(request)
            .send()
            .await
            .map_err(|error| classify(url, &error))?;
        if response.status().is_success() {
            return Ok(());
        }
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        Err(LinkError::NotSent {
            peer: url.to_owned(),
            reason: format!("answered {status}: {text}"),
        })
    }

    /// Asks the node at `base` about itself.
    pub async fn status(&self, base: &str, timeout: Duration) -> Result<PeerStatus, LinkError> {
        let request = self
            .client
            .get(format!("{base}/raft/status"))
            .timeout(timeout);
        let response = self
            .authenticated(request)
            .send()
            .await
            .map_err(|error| classify(base, &error))?;
        if !response.status().is_success() {
            return Err(LinkError::NotSent {
                peer: base.to_owned(),
                reason: format!("answered {}", response.status()),
            });
        }
        response.json().await.map_err(|error| LinkError::Lost {
            peer: base.to_owned(),
            reason: error.to_string(),
        })
    }
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
