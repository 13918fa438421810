//! Remembered answers for retried mutations.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::reply::Reply;

/// How long an idempotency key is remembered, in leader-stamped milliseconds.
pub const IDEMPOTENCY_RETENTION_MS: u64 = 10 * 60 * 1000;

/// The answer first given to a keyed request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub fingerprint: u64,
    pub result: Result<Reply, CoreError>,
    pub revision: u64,
}

/// (principal, key) -> first answer, forgotten after [`IDEMPOTENCY_RETENTION_MS`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct IdempotencyTable {
    /// Persistent, like the rest of the state: a snapshot's copy shares it.
    #[serde(deserialize_with = "crate::persistent::hash_map")]
    records: imbl::HashMap<(String, String), Record>,
    /// Keys in the order they were recorded, with their recording time. Times are
    /// non-decreasing because the state machine's clock never goes back.
    #[serde(deserialize_with = "crate::persistent::vector")]
    by_age: imbl::Vector<(u64, String, String)>,
    /// Records per principal (derived: not in snapshots, rebuilt on restore).
    #[serde(skip)]
    per_principal: HashMap<String, usize>,
}

impl IdempotencyTable {
    pub fn get(&self, principal: &str, key: &str) -> Option<&Record> {
        // A tuple key cannot be borrowed as (&str, &str); the allocation is only
        // paid by requests that carry a key.
        self.records.get(&(principal.to_owned(), key.to_owned()))
    }

    pub fn insert(&mut self, now_ms: u64, principal: &str, key: &str, record: Record) {
        let id = (principal.to_owned(), key.to_owned());
        if self.records.insert(id, record).is_none() {
            self.by_age
                .push_back((now_ms, principal.to_owned(), key.to_owned()));
            *self.per_principal.entry(principal.to_owned()).or_default() += 1;
        }
    }

    /// A queued request's wait ended: later retries get the final answer.
    pub fn update(
        &mut self,
        principal: &str,
        key: &str,
        result: Result<Reply, CoreError>,
        revision: u64,
    ) {
        if let Some(record) = self
            .records
            .get_mut(&(principal.to_owned(), key.to_owned()))
        {
            record.result = result;
            record.revision = revision;
        }
    }

    pub fn expire(&mut self, now_ms: u64) {
        while let Some((at, _, _)) = self.by_age.front() {
            if at.saturating_add(IDEMPOTENCY_RETENTION_MS) > now_ms {
                break;
            }
            if let Some((_, principal, key)) = self.by_age.pop_front() {
                if let Some(count) = self.per_principal.get_mut(&principal) {
                    *count -= 1;
                    if *count == 0 {
                        self.per_principal.remove(&principal);
                    }
                }
                self.records.remove(&(principal, key));
            }
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// How many keys `principal` has remembered.
    pub fn count_of(&self, principal: &str) -> usize {
        self.per_principal.get(principal).copied().unwrap_or(0)
    }

    /// Rebuilds the per-principal counts (after a snapshot is restored).
    pub fn recount(&mut self) {
        self.per_principal.clear();
        for (principal, _) in self.records.keys() {
            *self.per_principal.entry(principal.clone()).or_default() += 1;
        }
    }
}
