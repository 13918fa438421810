//! How values and keys are laid out in RocksDB.
//!
//! # Why postcard, for everything
//!
//! Every stored value (log entries, vote, committed and purged log ids, the
//! snapshot) is one format-version byte followed by postcard. postcard is
//! compact (a blank entry is a handful of bytes, which matters when every
//! append is an fsync'd WAL record), fast, and already used by baton-core for
//! its own snapshot. It is not self-describing, so it only works for types whose
//! serde derive is plain: no `untagged`, `flatten`, `skip_serializing_if` or
//! internally tagged enums. openraft 0.9's `Entry`, `EntryPayload`, `LogId`,
//! `Vote`, `Membership`, `StoredMembership` and `SnapshotMeta` and baton-core's
//! `Batch` all qualify; the round-trip tests in this module keep it that way.
//! JSON for the small meta values would be readable with `ldb`, but a second
//! codec is a second thing to get wrong, and nobody reads them by hand.
//!
//! The version byte lets a later build recognise (and migrate or refuse) values
//! written by an older one instead of misreading them.
//!
//! # Keys
//!
//! Log keys are the index as 8 big-endian bytes, so RocksDB's bytewise order is
//! index order: range scans, "last entry" and range deletes need no comparator.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::StoreError;

/// The only value format so far.
pub(crate) const FORMAT_V1: u8 = 1;

/// Serializes `value` as the format byte plus postcard.
pub(crate) fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    postcard::to_extend(value, vec![FORMAT_V1])
        .map_err(|source| StoreError::Encode { what, source })
}

/// The postcard bytes after the format byte, refusing unknown versions.
pub(crate) fn body_of<'a>(what: &'static str, bytes: &'a [u8]) -> Result<&'a [u8], StoreError> {
    match bytes.split_first() {
        Some((&FORMAT_V1, body)) => Ok(body),
        Some((&version, _)) => Err(StoreError::UnknownFormat { what, version }),
        None => Err(StoreError::UnknownFormat { what, version: 0 }),
    }
}

/// Reverses [`encode`], refusing unknown versions and trailing bytes.
pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    let body = body_of(what, bytes)?;
    let (value, rest) =
        postcard::take_from_bytes(body).map_err(|source| StoreError::Decode { what, source })?;
    if !rest.is_empty() {
        return Err(StoreError::TrailingBytes {
            what,
            extra: rest.len(),
        });
    }
    Ok(value)
}

/// The key of the log entry at `index`.
pub(crate) fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// A key greater than every log key: the exclusive end for "delete to the end".
pub(crate) const LOG_KEY_END: [u8; 9] = [0xff; 9];

/// The index a log key stands for.
pub(crate) fn log_index(key: &[u8]) -> Result<u64, StoreError> {
    let bytes: [u8; 8] = key
        .try_into()
        .map_err(|_| StoreError::MalformedLogKey(key.len()))?;
    Ok(u64::from_be_bytes(bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use baton_core::{Batch, Command, LeaseId, Limits, Request};
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::type_config::{BatonNode, Entry, LogId, Membership, StoredMembership, Vote};

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2_000, ..Default::default() })]

        /// Stored bytes this build never wrote (a corrupt or foreign value) are
        /// refused with a typed error, never a panic.
        #[test]
        fn arbitrary_stored_bytes_are_refused_or_read(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut versioned = vec![FORMAT_V1];
            versioned.extend(&bytes);
            for input in [&bytes, &versioned] {
                let _ = decode::<Entry>("log entry", input);
                let _ = decode::<Vote>("vote", input);
                let _ = decode::<LogId>("log id", input);
                let _ = decode::<StoredMembership>("membership", input);
            }
        }
    }

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn round_trip<T>(value: &T)
    where
        T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let bytes = encode("test value", value).unwrap();
        let back: T = decode("test value", &bytes).unwrap();
        assert_eq!(&back, value);
    }

    fn membership() -> Membership {
        let nodes: BTreeMap<u64, BatonNode> = (1..=3)
            .map(|id| {
                let node = BatonNode {
                    api_addr: format!("http://10.0.0.{id}:7878"),
                    raft_addr: format!("10.0.0.{id}:7879"),
                };
                (id, node)
            })
            .collect();
        Membership::new(vec![BTreeSet::from([1, 2]), BTreeSet::from([2, 3])], nodes)
    }

    #[test]
    fn blank_entry_round_trips() {
        round_trip(&Entry {
            log_id: log_id(3, 7),
            payload: EntryPayload::Blank,
        });
    }

    #[test]
    fn normal_entry_with_a_batch_round_trips() {
        let batch = Batch {
            now_ms: 1_700_000_000_000,
            limits: Limits::default(),
            requests: vec![
                Request::plain(Command::CreateLease {
                    lease_id: LeaseId(u128::MAX - 5),
                    ttl_ms: 10_000,
                    holder: "worker-1".into(),
                }),
                Request::plain(Command::Tick),
            ],
        };
        round_trip(&Entry {
            log_id: log_id(2, 9),
            payload: EntryPayload::Normal(batch),
        });
    }

    #[test]
    fn membership_entry_round_trips() {
        round_trip(&Entry {
            log_id: log_id(1, 1),
            payload: EntryPayload::Membership(membership()),
        });
    }

    #[test]
    fn meta_values_round_trip() {
        round_trip(&Vote::new(4, 2));
        let mut committed_vote = Vote::new(5, 3);
        committed_vote.commit();
        round_trip(&committed_vote);
        round_trip(&Some(log_id(4, 100)));
        round_trip(&None::<LogId>);
        round_trip(&StoredMembership::new(Some(log_id(1, 1)), membership()));
    }

    #[test]
    fn unknown_versions_and_trailing_bytes_are_refused() {
        let mut bytes = encode("vote", &Vote::new(1, 1)).unwrap();
        bytes.push(0);
        assert!(matches!(
            decode::<Vote>("vote", &bytes),
            Err(StoreError::TrailingBytes { .. })
        ));
        bytes[0] = 9;
        assert!(matches!(
            decode::<Vote>("vote", &bytes),
            Err(StoreError::UnknownFormat { version: 9, .. })
        ));
        assert!(matches!(
            decode::<Vote>("vote", &[]),
            Err(StoreError::UnknownFormat { version: 0, .. })
        ));
    }

    #[test]
    fn log_keys_sort_by_index() {
        let mut keys: Vec<[u8; 8]> = [300u64, 1, 256, 0, u64::MAX]
            .iter()
            .map(|i| log_key(*i))
            .collect();
        keys.sort();
        let indexes: Vec<u64> = keys.iter().map(|k| log_index(k).unwrap()).collect();
        assert_eq!(indexes, vec![0, 1, 256, 300, u64::MAX]);
        assert!(LOG_KEY_END.as_slice() > log_key(u64::MAX).as_slice());
    }
}
