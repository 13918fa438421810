//! The persisted snapshot: what a snapshot's bytes contain and where the
//! current one is kept.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use baton_core::StateMachine;
use rocksdb::DB;
use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode};
use crate::db::{self, CF_SNAPSHOT, KEY_SNAPSHOT};
use crate::error::StoreError;
use crate::shared::AppliedState;
use crate::type_config::{LogId, SnapshotMeta, StoredMembership};

/// The bytes of a snapshot, as sent to followers: self-describing, so a
/// receiver can check them against the meta it was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SnapshotEnvelope {
    /// The last log entry the state covers.
    pub last_applied: Option<LogId>,
    /// The last membership the state covers.
    pub membership: StoredMembership,
    /// `baton_core::StateMachine::to_snapshot()` (which carries its own version).
    pub machine: Vec<u8>,
}

impl SnapshotEnvelope {
    /// Captures `applied` (serializing the state machine).
    pub(crate) fn of(applied: &AppliedState) -> Self {
        SnapshotEnvelope {
            last_applied: applied.last_applied,
            membership: applied.membership.clone(),
            machine: applied.machine.to_snapshot(),
        }
    }

    pub(crate) fn encode(&self) -> Result<Vec<u8>, StoreError> {
        encode("snapshot data", self)
    }

    /// Decodes snapshot bytes and checks they cover what `meta` says.
    pub(crate) fn decode_for(meta: &SnapshotMeta, data: &[u8]) -> Result<Self, StoreError> {
        let envelope: SnapshotEnvelope = decode("snapshot data", data)?;
        if envelope.last_applied != meta.last_log_id {
            return Err(StoreError::SnapshotMismatch {
                meta: format!("{:?}", meta.last_log_id),
                data: format!("{:?}", envelope.last_applied),
            });
        }
        Ok(envelope)
    }

    /// Rebuilds the applied state from these bytes, trusting `meta` for the
    /// Raft bookkeeping (it was checked against the envelope).
    pub(crate) fn restore(&self, meta: &SnapshotMeta) -> Result<AppliedState, StoreError> {
        let machine = StateMachine::from_snapshot(&self.machine).map_err(StoreError::Restore)?;
        Ok(AppliedState {
            machine,
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        })
    }
}

/// The current snapshot as stored under one key of the `snapshot` column family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredSnapshot {
    /// This node's sequence number for snapshots it built or installed; it only
    /// keeps snapshot ids unique across restarts.
    pub seq: u64,
    /// openraft's description of the snapshot.
    pub meta: SnapshotMeta,
    /// The encoded [`SnapshotEnvelope`].
    pub data: Vec<u8>,
}

/// Reads and replaces the one current snapshot.
pub(crate) struct SnapshotStore {
    db: Arc<DB>,
    durability: crate::Durability,
    /// The last log id the stored snapshot covers (`None`: none stored, or
    /// one covering no entry), behind the lock that serializes "compare with
    /// the stored snapshot, then replace it": a snapshot build runs in its own
    /// task and may finish after a newer snapshot was installed. Kept in memory
    /// so that the comparison never reads and decodes the stored snapshot
    /// (hundreds of megabytes with a million locks held).
    stored_last_log_id: Mutex<Option<LogId>>,
    seq: AtomicU64,
}

impl fmt::Debug for SnapshotStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotStore")
            .field("seq", &self.seq.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SnapshotStore {
    /// Opens the store and returns the current snapshot, if any.
    pub(crate) fn open(
        db: Arc<DB>,
        durability: crate::Durability,
    ) -> Result<(Self, Option<StoredSnapshot>), StoreError> {
        let store = SnapshotStore {
            db,
            durability,
            stored_last_log_id: Mutex::new(None),
            seq: AtomicU64::new(0),
        };
        let current = store.load()?;
        if let Some(current) = &current {
            store.seq.store(current.seq, Ordering::Relaxed);
            *store.stored_last_log_id() = current.meta.last_log_id;
        }
        Ok((store, current))
    }

    /// The current snapshot, if any.
    pub(crate) fn load(&self) -> Result<Option<StoredSnapshot>, StoreError> {
        let cf = db::cf(&self.db, CF_SNAPSHOT)?;
        match self.db.get_pinned_cf(cf, KEY_SNAPSHOT)? {
            Some(bytes) => Ok(Some(decode("stored snapshot", &bytes)?)),
            None => Ok(None),
        }
    }

    /// A fresh sequence number and the snapshot id to go with it.
    pub(crate) fn next_id(&self, last_log_id: Option<&LogId>) -> (u64, String) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let id = match last_log_id {
            Some(log_id) => format!("{}-{}-{}", log_id.leader_id.term, log_id.index, seq),
            None => format!("none-{seq}"),
        };
        (seq, id)
    }

    /// Makes `snapshot` the current one, synced. With `only_if_newer`, a stored
    /// snapshot covering more of the log is kept instead and `false` returned.
    pub(crate) fn save(
        &self,
        snapshot: &StoredSnapshot,
        only_if_newer: bool,
    ) -> Result<bool, StoreError> {
        let bytes = encode("stored snapshot", snapshot)?;
        let mut stored_last_log_id = self.stored_last_log_id();
        if only_if_newer && *stored_last_log_id > snapshot.meta.last_log_id {
            return Ok(false);
        }
        let cf = db::cf(&self.db, CF_SNAPSHOT)?;
        let opts = db::write_options(self.durability, true);
        self.db.put_cf_opt(cf, KEY_SNAPSHOT, bytes, &opts)?;
        *stored_last_log_id = snapshot.meta.last_log_id;
        Ok(true)
    }

    fn stored_last_log_id(&self) -> MutexGuard<'_, Option<LogId>> {
        self.stored_last_log_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
