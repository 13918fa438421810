//! The loaded auth file, its reloads, and deciding who a request is.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use actix_web::HttpRequest;
use tokio::sync::watch;

use super::caller::{Caller, Credential};
use super::policy::{token_digest, AuthPolicy, EndpointAccess};
use crate::disconnect::ClientCertificate;

/// Why the auth file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("cannot read auth file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file's contents are not a valid auth file.
    #[error("auth file {path} is invalid: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Why a request was not admitted.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or a token no principal has: 401.
    Unauthenticated(&'static str),
    /// A valid token without the right: 403.
    Forbidden(String),
}

impl From<Refusal> for crate::error::ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Unauthenticated(why) => crate::error::ApiError::Unauthenticated(why.into()),
            Refusal::Forbidden(why) => crate::error::ApiError::Forbidden(why),
        }
    }
}

/// How a path is guarded.
enum Guard {
    /// Static description pages: always open.
    Open,
    /// Health or metrics: as the file says.
    Endpoint(EndpointAccess),
    /// Membership changes: an admin token, or the cluster secret (checked by the
    /// handler, which knows the node's secret).
    Membership,
    /// Everything else: a principal.
    Principal,
}

/// A policy and the file bytes it was parsed from.
type Loaded = (Arc<AuthPolicy>, Vec<u8>);

/// The auth file in force. Reloaded in place: requests in flight keep the policy
/// they started with, and long-lived ones [`Authenticator::subscribe`] to hear of
/// reloads.
pub struct Authenticator {
    path: PathBuf,
    // A watch channel rather than a lock: streams wait on it for reloads.
    policy: watch::Sender<Loaded>,
}

impl Authenticator {
    /// Loads `path`; an unreadable or invalid file is an error (a node must not
    /// start open because its auth file has a typo).
    pub fn load(path: &Path) -> Result<Authenticator, AuthError> {
        let (policy, bytes) = read_policy(path)?;
        Ok(Authenticator {
            path: path.to_owned(),
            policy: watch::Sender::new((Arc::new(policy), bytes)),
        })
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<AuthPolicy> {
        self.policy.borrow().0.clone()
    }

    /// A receiver that changes whenever a reload puts a different file in force.
    pub fn subscribe(&self) -> watch::Receiver<(Arc<AuthPolicy>, Vec<u8>)> {
        self.policy.subscribe()
    }

    /// Re-reads the file. On success the new policy is in force and `Ok(true)`
    /// says it changed; on error the old one stays.
    pub fn reload(&self) -> Result<bool, AuthError> {
        let (policy, bytes) = read_policy(&self.path)?;
        Ok(self.policy.send_if_modified(|loaded| {
            if loaded.1 == bytes {
                return false;
            }
            *loaded = (Arc::new(policy), bytes);
            true
        }))
    }

    /// Reloads on SIGHUP and whenever the file's contents change (checked every
    /// `every`: a Kubernetes Secret volume swaps a symlink, which no inotify watch
    /// on the old file would see). Runs until the process ends.
    pub async fn reload_on_change(self: Arc<Self>, every: Duration) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(hangup) => Some(hangup),
            Err(error) => {
                tracing::warn!(%error, "no SIGHUP handler; the auth file is still polled");
                None
            }
        };
        let mut tick = tokio::time::interval(every);
        loop {
            let by_signal = tokio::select! {
                _ = tick.tick() => false,
                Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
            };
            match self.reload() {
                Ok(true) => tracing::info!(path = %self.path.display(), "auth file reloaded"),
                Ok(false) if by_signal => {
                    tracing::info!(path = %self.path.display(), "auth file unchanged")
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::error!(%error, "auth file not reloaded; the previous one stays in force")
                }
            }
        }
    }

    /// Decides who `request` is: `Ok(None)` for open endpoints, `Ok(Some)` with the
    /// principal otherwise.
    pub fn admit(&self, request: &HttpRequest) -> Result<Option<Caller>, Refusal> {
        let policy = self.policy();
        let guard = guard_of(request.path(), &policy);
        if matches!(guard, Guard::Open | Guard::Endpoint(EndpointAccess::Open)) {
            return Ok(None);
        }
        let caller = match bearer_token(request)? {
            Some(token) => {
                let digest = token_digest(token);
                let Some(index) = policy.identify_digest(&digest) else {
                    return Err(Refusal::Unauthenticated("the bearer token is not valid"));
                };
                Caller::principal(policy, index, Credential::Token(digest))
            }
            None => {
                // A verified client certificate stands for a token.
                let by_certificate = request
                    .conn_data::<ClientCertificate>()
                    .map(|certificate| (certificate, policy.identify_certificate(&certificate.0)));
                match by_certificate {
                    Some((certificate, Some(index))) => {
                        let credential = Credential::Certificate(Arc::new(certificate.0.clone()));
                        Caller::principal(policy, index, credential)
                    }
                    // The handler accepts the cluster secret instead (a joining
                    // node presents its node certificate, which names no principal).
                    _ if matches!(guard, Guard::Membership) => {
                        return Ok(Some(Caller::unidentified()));
                    }
                    Some((_, None)) => return Err(Refusal::Unauthenticated(
                        "the client certificate is valid but names no principal of the auth file",
                    )),
                    None => return Err(Refusal::Unauthenticated(super::caller::NO_TOKEN)),
                }
            }
        };
        if matches!(guard, Guard::Endpoint(EndpointAccess::Admin)) && !caller.is_admin() {
            return Err(Refusal::Forbidden(format!(
                "{} needs an admin principal",
                request.path()
            )));
        }
        Ok(Some(caller))
    }
}

fn guard_of(path: &str, policy: &AuthPolicy) -> Guard {
    match path {
        "/openapi.json" | "/docs" | "/ui" => Guard::Open,
        _ if path.starts_with("/ui/") => Guard::Open,
        "/healthz" | "/readyz" => Guard::Endpoint(policy.endpoints.health),
        "/metrics" => Guard::Endpoint(policy.endpoints.metrics),
        _ if path.starts_with("/v1/cluster/members") => Guard::Membership,
        _ => Guard::Principal,
    }
}

/// The token of an `Authorization: Bearer <token>` header, if there is one.
fn bearer_token(request: &HttpRequest) -> Result<Option<&str>, Refusal> {
    let Some(value) = request
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
    else {
        return Ok(None);
    };
    let malformed =
        || Refusal::Unauthenticated("the Authorization header must be 'Bearer <token>'");
    let text = value.to_str().map_err(|_| malformed())?;
    let (scheme, token) = text.split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(malformed());
    }
    Ok(Some(token))
}

fn read_policy(path: &Path) -> Result<(AuthPolicy, Vec<u8>), AuthError> {
    let bytes = std::fs::read(path).map_err(|source| AuthError::Read {
        path: path.to_owned(),
        source,
    })?;
    let invalid = |reason: String| AuthError::Invalid {
        path: path.to_owned(),
        reason,
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| invalid("not UTF-8".into()))?;
    let policy = AuthPolicy::parse(text).map_err(invalid)?;
    Ok((policy, bytes))
}
