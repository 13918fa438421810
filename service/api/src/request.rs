//! Turning raw HTTP input into checked values: bodies, headers, query strings.

use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::HttpRequest;
use baton_core::{validate_name, IdempotencyKey, LeaseId};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

use crate::error::ApiError;
use crate::state::ApiState;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Parses a JSON body; an empty body means "all fields defaulted".
pub fn parse_body<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::BodyTooLarge(MAX_BODY_BYTES));
    }
    // The spec says such a body is optional (`null` or absent): both default.
    if body.iter().all(u8::is_ascii_whitespace) || body.trim_ascii() == b"null" {
        return Ok(T::default());
    }
    from_json(body)
}

/// Deserializes `body`. JSON has one number type: `5000.0` is the integer 5000
/// to JSON Schema and to most clients' encoders, so integral floats are taken
/// for integer fields (tried only after the plain parse failed: no cost on the
/// common path).
fn from_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let first = match serde_json::from_slice(body) {
        Ok(value) => return Ok(value),
        Err(error) => error,
    };
    let refused = || ApiError::InvalidBody(first.to_string());
    let mut value: serde_json::Value = serde_json::from_slice(body).map_err(|_| refused())?;
    if !integral_floats_to_integers(&mut value) {
        return Err(refused());
    }
    serde_json::from_value(value).map_err(|_| refused())
}

/// Rewrites every integral float in `value` as an integer; true if any was.
fn integral_floats_to_integers(value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Number(number) => {
            let Some(float) = number.as_f64().filter(|_| number.is_f64()) else {
                return false;
            };
            // Only below 2^53 is every integer a float exactly: above it
            // `9007199254740993.0` would read as ...992, a wrong token.
            const EXACT: f64 = 9_007_199_254_740_992.0;
            if float.fract() != 0.0 || float.abs() >= EXACT {
                return false;
            }
            *value = if float >= 0.0 {
                Value::from(float as u64)
            } else {
                Value::from(float as i64)
            };
            true
        }
        // Every element is rewritten: no short-circuit.
        Value::Array(items) => {
            let mut changed = false;
            for item in items {
                changed |= integral_floats_to_integers(item);
            }
            changed
        }
        Value::Object(map) => {
            let mut changed = false;
            for item in map.values_mut() {
                changed |= integral_floats_to_integers(item);
            }
            changed
        }
        _ => false,
    }
}

/// Parses a JSON body that must be present.
pub fn parse_required_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::BodyTooLarge(MAX_BODY_BYTES));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::InvalidBody("a JSON body is required".into()));
    }
    from_json(body)
}

/// A path segment that names a lock, election or registered name.
pub fn checked_name(name: &str) -> Result<String, ApiError> {
    validate_name(name)?;
    Ok(name.to_owned())
}

/// A lease id from a path or body. A malformed id cannot name a lease.
pub fn parse_lease_id(text: &str) -> Result<LeaseId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::Core(baton_core::CoreError::LeaseNotFound))
}

/// FNV-1a: a stable 64-bit hash (the same on every node and every build), used
/// to recognise a retried request.
fn fingerprint(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.iter().chain(std::iter::once(&0xff)) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// The request's `Idempotency-Key`, if any, with a fingerprint of the request.
pub fn idempotency_key(
    request: &HttpRequest,
    body: &[u8],
) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(value) = request.headers().get("idempotency-key") else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .map_err(|_| ApiError::InvalidIdempotencyKey)?;
    if key.is_empty() || key.len() > 128 || !key.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(ApiError::InvalidIdempotencyKey);
    }
    let method = request.method().as_str().as_bytes();
    let path = request.path().as_bytes();
    // Keyed per principal: a replay never crosses principals.
    let caller = crate::auth::Caller::of(request);
    Ok(Some(IdempotencyKey {
        principal: caller.name().unwrap_or_default().to_owned(),
        key: key.to_owned(),
        fingerprint: fingerprint(&[method, path, body]),
    }))
}

/// How a read wants to be served.
#[derive(Debug, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReadQuery {
    /// `linearizable` (default: Raft ReadIndex through the leader) or `local`
    /// (this replica's state, possibly stale).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consistency: Option<String>,
    /// Answer from this replica once it has applied this revision (waits up to
    /// the node's `--min-revision-wait-ms`, 3 s by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

/// Waits as the read query asks, before reading the state.
pub async fn settle_read(state: &ApiState, query: &ReadQuery) -> Result<(), ApiError> {
    // Checked before min_revision is looked at: with both given, a bad
    // consistency used to pass unchecked (schemathesis, GET /v1/semaphores).
    let linearizable = match query.consistency.as_deref() {
        None | Some("linearizable") => true,
        Some("local") => false,
        Some(other) => {
            return Err(ApiError::InvalidQuery(format!(
                "consistency must be 'linearizable' or 'local', got '{other}'"
            )))
        }
    };
    if let Some(revision) = query.min_revision {
        state
            .node
            .wait_for_revision(
                revision,
                Duration::from_millis(state.settings.min_revision_wait_ms),
            )
            .await?;
    } else if linearizable {
        state.node.linearizable().await?;
    }
    Ok(())
}

/// Paging parameters of list endpoints (the `baton` client sends this type too).
#[derive(Debug, Default, Clone, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only names starting with this prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Page size, 1..=1000 (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// `next_page_token` of the previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_token: Option<String>,
    /// `linearizable` (default: Raft ReadIndex through the leader) or `local`
    /// (this replica's state, possibly stale).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consistency: Option<String>,
    /// Answer from this replica once it has applied this revision (waits up to
    /// the node's `--min-revision-wait-ms`, 3 s by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

impl ListQuery {
    /// The read settings of this list request.
    pub fn read(&self) -> ReadQuery {
        ReadQuery {
            consistency: self.consistency.clone(),
            min_revision: self.min_revision,
        }
    }

    /// Page size, checked.
    pub fn limit(&self) -> Result<usize, ApiError> {
        match self.limit {
            None => Ok(100),
            Some(n @ 1..=1000) => Ok(n),
            Some(n) => Err(ApiError::InvalidQuery(format!(
                "limit must be between 1 and 1000, got {n}"
            ))),
        }
    }

    /// The name after which the page starts.
    pub fn after(&self) -> Result<Option<String>, ApiError> {
        self.page_token
            .as_deref()
            .map(decode_page_token)
            .transpose()
    }
}

/// Page tokens are hex-encoded names: opaque to clients, safe in any URL.
pub fn encode_page_token(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_page_token(token: &str) -> Result<String, ApiError> {
    let bad = || ApiError::InvalidQuery("page_token is not one this server issued".into());
    if !token.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2).unwrap_or("zz"), 16).map_err(|_| bad()))
        .collect::<Result<Vec<u8>, ApiError>>()?;
    // Any position in name order will do, even one no server issued.
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Reads a request body, refusing (with problem+json, not a dropped connection)
/// anything over [`MAX_BODY_BYTES`].
pub async fn read_body(mut payload: actix_web::web::Payload) -> Result<Bytes, ApiError> {
    use futures_util::StreamExt;
    let mut body = actix_web::web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|error| ApiError::InvalidBody(error.to_string()))?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ApiError::BodyTooLarge(MAX_BODY_BYTES));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        /// Request parsers fed what no client should send answer with a typed
        /// refusal (never a panic), and integral floats read as the integer.
        #[test]
        fn parsers_refuse_or_read_anything(
            bytes in prop::collection::vec(any::<u8>(), 0..300),
            json in r#"\{("(ttl_ms|wait_ms|holder|lease_id|lock_delay_ms)": ?(-?[0-9]{1,22}(\.[0-9]{0,3})?(e[0-9]{1,3})?|null|"[^"]{0,8}"|\[\]|\{\}),? ?){0,4}\}"#,
            text in ".{0,64}",
        ) {
            let raw = Bytes::from(bytes);
            let _ = parse_body::<crate::locks::AcquireBody>(&raw);
            let _ = parse_required_body::<crate::locks::AcquireBody>(&raw);
            let _ = parse_body::<crate::locks::AcquireBody>(&Bytes::from(json.clone()));
            let _ = decode_page_token(&text);
            let _ = validate_name(&text);
            let _ = parse_lease_id(&text);
        }

        #[test]
        fn integral_floats_read_as_the_integer(n in 0u64..(1 << 53), above in (1u64 << 53)..u64::MAX) {
            let body = Bytes::from(format!("{{\"ttl_ms\": {n}.0}}"));
            let parsed: crate::locks::AcquireBody = parse_body(&body).unwrap();
            prop_assert_eq!(parsed.ttl_ms, Some(n));
            // Past 2^53 a float may not be the integer it spells: refused.
            let body = Bytes::from(format!("{{\"ttl_ms\": {above}.0}}"));
            prop_assert!(parse_body::<crate::locks::AcquireBody>(&body).is_err());
        }
    }

    #[test]
    fn page_tokens_round_trip() {
        for name in ["a", "team-a/db/migrate", "x~y=z"] {
            assert_eq!(
                decode_page_token(&encode_page_token(name)).ok().as_deref(),
                Some(name)
            );
        }
        assert!(decode_page_token("zz").is_err());
        assert!(decode_page_token("abc").is_err());
    }

    #[test]
    fn fingerprints_tell_requests_apart() {
        assert_eq!(
            fingerprint(&[b"POST", b"/a", b"{}"]),
            fingerprint(&[b"POST", b"/a", b"{}"])
        );
        assert_ne!(
            fingerprint(&[b"POST", b"/a", b"{}"]),
            fingerprint(&[b"POST", b"/a{", b"}"])
        );
        assert_ne!(
            fingerprint(&[b"POST", b"/a", b"{}"]),
            fingerprint(&[b"PUT", b"/a", b"{}"])
        );
    }
}
