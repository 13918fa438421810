//! The auth file's contents: principals, their token digests, roles and prefixes.

use rustls::pki_types::{CertificateDer, ServerName};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// What a principal may do beyond its prefixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Uses locks, elections, names and watches under its prefixes.
    Client,
    /// Everything: every name, membership changes, force-release, metrics.
    Admin,
}

/// The kinds of names a prefix list governs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Locks (`/v1/locks`).
    Lock,
    /// Elections (`/v1/elections`).
    Election,
    /// Registered names (`/v1/names`).
    Name,
    /// Events on the watch stream (`/v1/watch`), any kind.
    Watch,
    /// Semaphores (`/v1/semaphores`).
    Semaphore,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Lock => "locks",
            Kind::Election => "elections",
            Kind::Name => "names",
            Kind::Watch => "watch",
            Kind::Semaphore => "semaphores",
        }
    }
}

/// Who may call an endpoint that is not part of the lock API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointAccess {
    /// Anyone who can reach the port, without a token.
    #[default]
    Open,
    /// Only an admin principal.
    Admin,
}

/// One principal of the auth file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Principal {
    /// Its name: owner of the leases it creates, shown in logs (never its token).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// `sha256:<64 hex digits>` digests of the bearer tokens it may present
    /// (several, so that a token can be rotated without downtime).
    #[serde(default)]
    pub tokens: Vec<String>,
    /// Names (DNS names or IP addresses) of client certificates that identify
    /// it (`--tls-client-ca`): a certificate valid for one of them, by its
    /// subject alternative names, is this principal.
    #[serde(default)]
    pub certificates: Vec<String>,
    /// Lock-name prefixes it may use (`""` is every name).
    #[serde(default)]
    pub locks: Vec<String>,
    /// Election-name prefixes it may use.
    #[serde(default)]
    pub elections: Vec<String>,
    /// Registered-name prefixes it may use.
    #[serde(default)]
    pub names: Vec<String>,
    /// Name prefixes whose events it may stream from `/v1/watch`.
    #[serde(default)]
    pub watch: Vec<String>,
    /// Semaphore-name prefixes it may use.
    #[serde(default)]
    pub semaphores: Vec<String>,
    /// Its own caps, where they differ from the node's `--max-*` flags.
    #[serde(default)]
    pub quota: QuotaOverrides,
}

/// A principal's caps that replace the node's defaults; unset ones keep them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaOverrides {
    /// Most live leases it owns.
    pub leases: Option<u64>,
    /// Most held locks, leaderships and names on its leases.
    pub holdings: Option<u64>,
    /// Most queued requests on its leases.
    pub waiters: Option<u64>,
    /// Most idempotency keys it has remembered at a time.
    pub idempotency_keys: Option<u64>,
    /// Requests per second it may send to one node (token bucket); 0 for no limit.
    pub requests_per_second: Option<u32>,
    /// Requests it may send at once after a quiet spell (the bucket's size).
    pub burst: Option<u32>,
}

impl QuotaOverrides {
    /// `defaults` with these overrides applied.
    pub fn apply(&self, defaults: &baton_core::Quota) -> baton_core::Quota {
        baton_core::Quota {
            max_leases: defaults.max_leases,
            max_leases_per_principal: self.leases.unwrap_or(defaults.max_leases_per_principal),
            max_holdings_per_principal: self
                .holdings
                .unwrap_or(defaults.max_holdings_per_principal),
            max_waiters_per_principal: self.waiters.unwrap_or(defaults.max_waiters_per_principal),
            max_idempotency_keys_per_principal: self
                .idempotency_keys
                .unwrap_or(defaults.max_idempotency_keys_per_principal),
        }
    }
}

impl Principal {
    /// Whether `other` grants what this principal grants (role and prefixes),
    /// whatever its tokens, certificates and quotas.
    pub fn same_rights(&self, other: &Principal) -> bool {
        (
            &self.name,
            self.role,
            &self.locks,
            &self.elections,
            &self.names,
            &self.watch,
            &self.semaphores,
        ) == (
            &other.name,
            other.role,
            &other.locks,
            &other.elections,
            &other.names,
            &other.watch,
            &other.semaphores,
        )
    }

    /// Whether this principal may use `name` of `kind`.
    pub fn may(&self, kind: Kind, name: &str) -> bool {
        if self.role == Role::Admin {
            return true;
        }
        self.prefixes(kind)
            .iter()
            .any(|prefix| name.starts_with(prefix.as_str()))
    }

    /// Whether this principal may see every name of `kind` starting with `prefix`
    /// (so a list or watch of that prefix needs no per-name filter).
    pub fn may_all_under(&self, kind: Kind, prefix: &str) -> bool {
        self.role == Role::Admin
            || self
                .prefixes(kind)
                .iter()
                .any(|allowed| prefix.starts_with(allowed.as_str()))
    }

    /// Whether this principal may use any name of `kind` at all.
    pub fn may_any(&self, kind: Kind) -> bool {
        self.role == Role::Admin || !self.prefixes(kind).is_empty()
    }

    /// Whether this principal is an admin.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    fn prefixes(&self, kind: Kind) -> &[String] {
        match kind {
            Kind::Lock => &self.locks,
            Kind::Election => &self.elections,
            Kind::Name => &self.names,
            Kind::Watch => &self.watch,
            Kind::Semaphore => &self.semaphores,
        }
    }

    /// A human-readable refusal for every name of `kind`.
    pub fn refusal_of_kind(&self, kind: Kind) -> String {
        format!(
            "principal '{}' may not use any {} name",
            self.name,
            kind.label()
        )
    }

    /// A human-readable refusal for `name` of `kind`.
    pub fn refusal(&self, kind: Kind, name: &str) -> String {
        format!(
            "principal '{}' may not use {} name '{name}'",
            self.name,
            kind.label()
        )
    }
}

/// Who may call the endpoints outside the lock API.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoints {
    /// `/healthz` and `/readyz` (default open: probes rarely carry tokens).
    #[serde(default)]
    pub health: EndpointAccess,
    /// `/metrics` (default admin).
    #[serde(default = "admin")]
    pub metrics: EndpointAccess,
}

fn admin() -> EndpointAccess {
    EndpointAccess::Admin
}

impl Default for Endpoints {
    fn default() -> Self {
        Endpoints {
            health: EndpointAccess::Open,
            metrics: EndpointAccess::Admin,
        }
    }
}

/// A parsed and checked auth file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthPolicy {
    /// Every principal.
    pub principals: Vec<Principal>,
    /// Access to health and metrics.
    #[serde(default)]
    pub endpoints: Endpoints,
    /// Token digests, decoded, with the index of their principal.
    #[serde(skip)]
    digests: Vec<([u8; 32], usize)>,
    /// Certificate names, parsed, with the index of their principal.
    #[serde(skip)]
    certificate_names: Vec<(ServerName<'static>, usize)>,
}

impl AuthPolicy {
    /// Parses an auth file (YAML, of which JSON is a subset) and checks it: unique
    /// non-empty principal names, well-formed digests, no digest shared by two
    /// principals.
    pub fn parse(text: &str) -> Result<AuthPolicy, String> {
        let mut policy: AuthPolicy =
            serde_yaml_ng::from_str(text).map_err(|error| error.to_string())?;
        let mut digests: Vec<([u8; 32], usize)> = Vec::new();
        let mut certificate_names: Vec<(ServerName<'static>, usize)> = Vec::new();
        for (index, principal) in policy.principals.iter().enumerate() {
            if principal.name.is_empty() || principal.name.len() > 128 {
                return Err("a principal's name must be 1 to 128 bytes".into());
            }
            if policy.principals[..index]
                .iter()
                .any(|p| p.name == principal.name)
            {
                return Err(format!("principal '{}' appears twice", principal.name));
            }
            for token in &principal.tokens {
                let digest = parse_digest(token).ok_or_else(|| {
                    format!(
                        "principal '{}': tokens must be 'sha256:' and 64 hex digits \
                         (see `baton auth hash-token`)",
                        principal.name
                    )
                })?;
                if digests.iter().any(|(d, _)| *d == digest) {
                    return Err(format!(
                        "principal '{}': a token digest appears twice",
                        principal.name
                    ));
                }
                digests.push((digest, index));
            }
            for name in &principal.certificates {
                let parsed = ServerName::try_from(name.clone()).map_err(|_| {
                    format!(
                        "principal '{}': certificate name '{name}' is not a DNS name or IP address",
                        principal.name
                    )
                })?;
                if certificate_names.iter().any(|(n, _)| *n == parsed) {
                    return Err(format!(
                        "principal '{}': certificate name '{name}' appears twice",
                        principal.name
                    ));
                }
                certificate_names.push((parsed, index));
            }
        }
        policy.digests = digests;
        policy.certificate_names = certificate_names;
        Ok(policy)
    }

    /// The principal a client certificate (verified by the TLS handshake)
    /// identifies: the one with a certificate name that is exactly one of the
    /// certificate's subject alternative names. Exactly: a wildcard name in a
    /// certificate (`*.example.com`) names no principal, so one certificate
    /// cannot stand for several principals.
    pub fn identify_certificate(&self, certificate: &CertificateDer<'_>) -> Option<usize> {
        let certificate = webpki::EndEntityCert::try_from(certificate).ok()?;
        self.certificate_names
            .iter()
            .find(|(name, _)| match name {
                ServerName::DnsName(dns) => certificate
                    .valid_dns_names()
                    .any(|presented| presented.eq_ignore_ascii_case(dns.as_ref())),
                // IP addresses match only an identical IP address name.
                _ => certificate.verify_is_valid_for_subject_name(name).is_ok(),
            })
            .map(|(_, index)| *index)
    }

    /// The principal whose token this is, comparing every digest in constant time
    /// (no early exit), so timing tells nothing about which digest came close.
    pub fn identify(&self, token: &str) -> Option<&Principal> {
        self.identify_index(token)
            .and_then(|index| self.principals.get(index))
    }

    /// As [`AuthPolicy::identify`], the principal's index in [`AuthPolicy::principals`].
    pub fn identify_index(&self, token: &str) -> Option<usize> {
        self.identify_digest(&token_digest(token))
    }

    /// As [`AuthPolicy::identify_index`], for a token already hashed with
    /// [`token_digest`] (a request keeps the digest, never the token, to be judged
    /// again after a reload).
    pub fn identify_digest(&self, presented: &[u8; 32]) -> Option<usize> {
        use subtle::ConstantTimeEq;
        let mut found = None;
        for (digest, index) in &self.digests {
            if bool::from(digest.ct_eq(presented)) {
                found = Some(*index);
            }
        }
        found
    }
}

/// The SHA-256 digest of a bearer token, as the auth file stores it (decoded).
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The digest to put in an auth file for `token`: `sha256:<hex>`.
pub fn hash_token(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn parse_digest(text: &str) -> Option<[u8; 32]> {
    let hex = text.strip_prefix("sha256:")?;
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(digest)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn file(tokens: &str) -> String {
        format!(
            "principals:\n  - name: billing\n    role: client\n    tokens: [{tokens}]\n    locks: [\"billing/\"]\n  - name: ops\n    role: admin\n    tokens: [\"{}\"]\n",
            hash_token("ops-token")
        )
    }

    #[test]
    fn a_token_maps_to_its_principal_and_nothing_else_does() {
        let policy = AuthPolicy::parse(&file(&format!("\"{}\"", hash_token("b-token")))).unwrap();
        assert_eq!(policy.identify("b-token").unwrap().name, "billing");
        assert_eq!(policy.identify("ops-token").unwrap().name, "ops");
        assert!(policy.identify("b-token ").is_none());
        assert!(policy.identify("").is_none());
        let billing = policy.identify("b-token").unwrap();
        assert!(billing.may(Kind::Lock, "billing/nightly"));
        assert!(!billing.may(Kind::Lock, "payroll/nightly"));
        assert!(
            !billing.may(Kind::Election, "billing/x"),
            "no election prefix"
        );
        assert!(billing.may_all_under(Kind::Lock, "billing/a"));
        assert!(!billing.may_all_under(Kind::Lock, "bill"));
        assert!(policy
            .identify("ops-token")
            .unwrap()
            .may(Kind::Name, "anything"));
        assert_eq!(policy.endpoints.health, EndpointAccess::Open);
        assert_eq!(policy.endpoints.metrics, EndpointAccess::Admin);
    }

    #[test]
    fn json_is_accepted_and_mistakes_are_refused_with_a_reason() {
        let json = format!(
            r#"{{"principals": [{{"name": "a", "role": "admin", "tokens": ["{}"]}}], "endpoints": {{"metrics": "open"}}}}"#,
            hash_token("t")
        );
        let policy = AuthPolicy::parse(&json).unwrap();
        assert_eq!(policy.endpoints.metrics, EndpointAccess::Open);
        for (bad, why) in [
            (file("\"plain-text-token\""), "sha256"),
            (file("\"sha256:abc\""), "sha256"),
            (
                file(&format!("\"{}\"", hash_token("ops-token"))),
                "appears twice",
            ),
            ("principals: []\nextra: 1\n".to_owned(), "unknown field"),
            (
                "principals:\n  - name: a\n    role: root\n".to_owned(),
                "unknown variant",
            ),
            (
                "principals:\n  - {name: a, role: client}\n  - {name: a, role: admin}\n".into(),
                "appears twice",
            ),
        ] {
            let error = AuthPolicy::parse(&bad).unwrap_err();
            assert!(error.contains(why), "{bad:?}: {error}");
        }
    }
}
