//! Who sent a request, as handlers see it.

use std::future::{ready, Ready};
use std::sync::Arc;

use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use baton_core::{Command, LeaseId, Quota};
use rustls::pki_types::CertificateDer;

use super::policy::{AuthPolicy, Kind, Principal};
use crate::error::ApiError;
use crate::rate_limit::RateLimit;
use crate::state::ApiState;

#[derive(Clone)]
enum Who {
    /// Auth is off: no principals, everything allowed (as before auth existed).
    Anyone,
    /// Auth is on and the request carried no token (membership requests, which
    /// may bring the cluster secret instead): refused everything else.
    Unidentified,
    /// Auth is on: this principal of this policy, identified by this
    /// credential (kept to judge the caller again after the file is reloaded).
    Principal(Arc<AuthPolicy>, usize, Credential),
}

/// What identified a principal.
#[derive(Clone)]
pub enum Credential {
    /// A bearer token, as its SHA-256 digest.
    Token([u8; 32]),
    /// A client certificate verified by the TLS handshake.
    Certificate(Arc<CertificateDer<'static>>),
}

impl Credential {
    /// The principal `policy` gives this credential.
    fn identify(&self, policy: &AuthPolicy) -> Option<usize> {
        match self {
            Credential::Token(digest) => policy.identify_digest(digest),
            Credential::Certificate(certificate) => policy.identify_certificate(certificate),
        }
    }
}

/// The caller of a request: extract it in a handler, then ask it before acting.
#[derive(Clone)]
pub struct Caller(Who);

impl Caller {
    /// The caller when auth is off.
    pub fn anyone() -> Caller {
        Caller(Who::Anyone)
    }

    /// A caller with no token while auth is on.
    pub fn unidentified() -> Caller {
        Caller(Who::Unidentified)
    }

    /// The principal at `index` of `policy`, identified by `credential`.
    pub fn principal(policy: Arc<AuthPolicy>, index: usize, credential: Credential) -> Caller {
        Caller(Who::Principal(policy, index, credential))
    }

    /// Whether `policy`, a reloaded auth file, still gives this caller's token
    /// the same principal with the same rights (role and prefixes; a token added
    /// for a rotation changes nothing). Long-lived requests (watch streams) end
    /// when it does not: a revoked token or a narrowed prefix must not keep a
    /// stream open.
    pub fn still_valid_under(&self, policy: &AuthPolicy) -> bool {
        match &self.0 {
            Who::Anyone => true,
            Who::Unidentified => false,
            Who::Principal(old, index, credential) => {
                let now = credential
                    .identify(policy)
                    .and_then(|i| policy.principals.get(i));
                match (now, old.principals.get(*index)) {
                    (Some(now), Some(before)) => now.same_rights(before),
                    _ => false,
                }
            }
        }
    }

    /// The caller the auth layer recorded for `request`. A request that reached
    /// a handler without one while auth is on is unidentified, never "anyone".
    pub fn of(request: &HttpRequest) -> Caller {
        if let Some(caller) = request.extensions().get::<Caller>() {
            return caller.clone();
        }
        let auth_on = request
            .app_data::<web::Data<ApiState>>()
            .is_some_and(|state| state.auth.is_some());
        if auth_on {
            Caller::unidentified()
        } else {
            Caller::anyone()
        }
    }

    fn principal_ref(&self) -> Option<&Principal> {
        match &self.0 {
            Who::Principal(policy, index, _) => policy.principals.get(*index),
            _ => None,
        }
    }

    /// The principal's name; `None` when auth is off.
    pub fn name(&self) -> Option<&str> {
        self.principal_ref().map(|p| p.name.as_str())
    }

    /// Whether the caller is an admin principal.
    pub fn is_admin(&self) -> bool {
        self.principal_ref().is_some_and(Principal::is_admin)
    }

    /// Auth off allows everything, a request without a principal nothing, a
    /// principal what `allowed` says of it.
    fn allows(&self, allowed: impl Fn(&Principal) -> bool) -> bool {
        match &self.0 {
            Who::Anyone => true,
            Who::Unidentified => false,
            Who::Principal(..) => self.principal_ref().is_some_and(allowed),
        }
    }

    /// [`Caller::allows`] as an answer: 403 with `refusal`'s reason for a
    /// principal, 401 without one.
    fn judge(
        &self,
        allowed: impl Fn(&Principal) -> bool,
        refusal: impl Fn(&Principal) -> String,
    ) -> Result<(), ApiError> {
        if self.allows(&allowed) {
            return Ok(());
        }
        match self.principal_ref() {
            Some(principal) => Err(ApiError::Forbidden(refusal(principal))),
            None => Err(no_token()),
        }
    }

    /// Whether the caller may use `name` of `kind` (always, with auth off).
    pub fn may(&self, kind: Kind, name: &str) -> bool {
        self.allows(|p| p.may(kind, name))
    }

    /// Whether the caller may see every name of `kind` under `prefix`.
    pub fn may_all_under(&self, kind: Kind, prefix: &str) -> bool {
        self.allows(|p| p.may_all_under(kind, prefix))
    }

    /// Refuses unless the caller may use `name` of `kind`.
    pub fn require(&self, kind: Kind, name: &str) -> Result<(), ApiError> {
        self.judge(|p| p.may(kind, name), |p| p.refusal(kind, name))
    }

    /// Refuses a list or watch of `kind` by a principal that may use no name of
    /// that kind (one with some prefixes gets a filtered answer instead).
    pub fn require_any(&self, kind: Kind) -> Result<(), ApiError> {
        self.judge(|p| p.may_any(kind), |p| p.refusal_of_kind(kind))
    }

    /// Refuses a lease that another principal owns, judged on this replica's
    /// state. Writes are judged again by the state machine ([`Caller::command`]).
    pub fn require_lease(&self, state: &ApiState, lease_id: LeaseId) -> Result<(), ApiError> {
        if let Who::Unidentified = self.0 {
            return Err(no_token());
        }
        let name = self.name();
        Ok(state.node.read(|sm| sm.check_lease_owner(lease_id, name))?)
    }

    /// [`Caller::require_lease`] for a request that writes no log entry (a
    /// keepalive), so that no state machine judges it again. A lease this
    /// replica has not applied yet (a follower a moment behind the leader that
    /// created it) has no owner here and would pass anyone's token, so the
    /// replica first catches up with a ReadIndex. An owner never changes, so a
    /// lease already known is judged without that round trip, and with auth off
    /// there is nothing to judge.
    pub async fn require_lease_caught_up(
        &self,
        state: &ApiState,
        lease_id: LeaseId,
    ) -> Result<(), ApiError> {
        let principal = matches!(self.0, Who::Principal(..));
        if principal && state.node.read(|sm| sm.lease_ttl_ms(lease_id).is_none()) {
            state.node.linearizable().await?;
        }
        self.require_lease(state, lease_id)
    }

    /// `command` as this caller sends it: the state machine records and checks
    /// lease ownership for a principal, and judges it by the caller's quota
    /// (`defaults` with the principal's overrides). An unidentified caller (auth
    /// on, no principal) may send nothing.
    pub fn command(&self, command: Command, defaults: &Quota) -> Result<Command, ApiError> {
        match &self.0 {
            Who::Unidentified => Err(no_token()),
            _ => Ok(command.within(self.name(), self.quota(defaults))),
        }
    }

    /// The caps this caller is judged by: `defaults`, with a principal's
    /// overrides from the auth file.
    pub fn quota(&self, defaults: &Quota) -> Quota {
        match self.principal_ref() {
            Some(principal) => principal.quota.apply(defaults),
            None => *defaults,
        }
    }

    /// The request rate this caller may use on this node: the principal's
    /// override, else `default`.
    pub fn rate(&self, default: RateLimit) -> RateLimit {
        match self.principal_ref() {
            Some(principal) => RateLimit {
                per_second: principal
                    .quota
                    .requests_per_second
                    .unwrap_or(default.per_second),
                burst: principal.quota.burst.unwrap_or(default.burst),
            },
            None => default,
        }
    }

    /// The prefixes of names whose events the caller may stream; `None` for all.
    pub fn watch_prefixes(&self) -> Option<Vec<String>> {
        match &self.0 {
            Who::Anyone => None,
            Who::Unidentified => Some(Vec::new()),
            Who::Principal(..) => match self.principal_ref() {
                Some(p) if p.is_admin() => None,
                Some(p) => Some(p.watch.clone()),
                None => Some(Vec::new()),
            },
        }
    }
}

/// Why a request without a principal is refused (auth on).
pub(crate) const NO_TOKEN: &str = "this endpoint needs an 'Authorization: Bearer <token>' header";

fn no_token() -> ApiError {
    ApiError::Unauthenticated(NO_TOKEN.into())
}

/// Refuses unless the caller is an admin principal or presents the cluster
/// secret; a node with neither auth nor a secret refuses everyone (such
/// operations are never open by default).
pub fn require_admin_or_secret(state: &ApiState, http: &HttpRequest) -> Result<(), ApiError> {
    let caller = Caller::of(http);
    if caller.is_admin() {
        return Ok(());
    }
    let config = state.node.config();
    let secret = config.cluster_secret.as_deref();
    if secret.is_some()
        && baton_raft::secret_matches(
            http.headers()
                .get(baton_raft::CLUSTER_SECRET_HEADER)
                .map(|value| value.as_bytes()),
            &config.accepted_secrets(),
        )
    {
        return Ok(());
    }
    if secret.is_none() && state.auth.is_none() {
        return Err(ApiError::AdminDisabled);
    }
    match caller.name() {
        Some(name) => Err(ApiError::Forbidden(format!(
            "principal '{name}' is not an admin"
        ))),
        None => Err(ApiError::Unauthenticated(
            "membership changes need an admin token or the cluster secret \
             (baton-cluster-secret header)"
                .into(),
        )),
    }
}

impl FromRequest for Caller {
    type Error = actix_web::Error;
    type Future = Ready<Result<Caller, actix_web::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(Ok(Caller::of(request)))
    }
}
