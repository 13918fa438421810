//! Baton's durable storage for openraft 0.9 (storage-v2 API) on RocksDB.
//!
//! [`open`] gives the two halves openraft wants:
//!
//! - [`LogStore`]: the Raft log, vote and log pointers, synced as Raft requires
//!   (an append is reported flushed only after its one synced write batch);
//! - [`StateMachineStore`]: baton-core's state machine, in memory, with the
//!   current snapshot persisted; readers reach the state through
//!   [`SharedState`] and the raft layer hears about outcomes through an
//!   [`ApplyObserver`].
//!
//! Only this crate touches RocksDB. See the crate's README for the on-disk
//! layout and the recovery story.
//!
//! ## Modules
//!
//! The modules are private; everything public is re-exported here.
//!
//! - `log_store`: [`LogStore`], openraft's log storage: entries, the vote and the log
//!   pointers, each append one synced write batch.
//! - `log_tail`: the newest log entries in memory, so that openraft's reads of what
//!   was just appended (apply, replication) skip RocksDB.
//! - `state_machine_store`: [`StateMachineStore`], openraft's state machine: applies
//!   batches to baton-core's machine in memory, tells the observer, installs snapshots.
//! - `shared`: [`SharedState`], the applied state behind a lock for readers, and the
//!   [`ApplyObserver`] hook through which the raft layer hears about outcomes.
//! - `snapshot`: what a persisted snapshot's bytes hold and where the current one is kept.
//! - `snapshot_builder`: [`SnapshotBuilder`], building a snapshot off the state-machine
//!   task, on a thread of lowered priority.
//! - `paced_sync`: writing a snapshot file with its data synced in steps, so the log's
//!   syncs never wait behind one flush of the whole file.
//! - `type_config`: [`TypeConfig`] and [`BatonNode`], the openraft types every crate
//!   shares.
//! - `codec`: how values and keys are laid out: a format-version byte then postcard,
//!   log keys as big-endian indexes.
//! - `db`: opening RocksDB with its column families (`log`, `meta`, `snapshot`) and keys.
//! - `error`: [`StoreError`], failures of opening, encoding and RocksDB.
//! - `wal_prewrite`: RocksDB's write-ahead log files written in full when the store
//!   opens and recycled after, so synced appends overwrite blocks instead of growing
//!   a file (no journal commit per sync).
//! - `metrics`: [`StoreMetrics`], append and fsync latency, entries written, snapshots
//!   built, commit-to-apply lag.
//! - `stage_times`: [`stage_times()`], when this node appended, synced and applied each
//!   recent entry, noted only while trace spans are on.

mod apply_run;
mod codec;
mod committed_mark;
mod db;
mod error;
mod log_store;
mod log_tail;
mod log_writer;
mod metrics;
mod paced_sync;
mod receiving_sync;
mod shared;
mod snapshot;
mod snapshot_builder;
mod stage_times;
mod state_machine_store;
mod type_config;
mod wal_prewrite;

use std::path::Path;

pub use apply_run::{APPLY_RUN_REQUESTS, APPLY_RUN_TIME};
pub use error::StoreError;
pub use log_store::LogStore;
pub use metrics::StoreMetrics;
pub use shared::{AppliedState, ApplyObserver, SharedState};
pub use snapshot_builder::SnapshotBuilder;
pub use stage_times::{stage_times, StageTimes};
pub use state_machine_store::StateMachineStore;
pub use type_config::{
    BatonNode, Entry, EntryPayload, LogId, LogState, Membership, NodeId, Snapshot, SnapshotMeta,
    StorageError, StorageResult, StoredMembership, TypeConfig, Vote,
};
pub use wal_prewrite::{active_wal_size, MAX_WAL_PREWRITE_MIB};

/// The directory, inside the data directory, that holds the current snapshot's
/// file (and, briefly, one being written or received).
pub const SNAPSHOT_DIR: &str = "snapshots";

/// Opens (creating if needed) the database in directory `path` and returns the
/// log store and the state machine store, the latter restored from the stored
/// snapshot if there is one.
///
/// RocksDB locks the directory: a second `open` of the same path fails until
/// both halves of the first are dropped (openraft drops them when the `Raft`
/// shuts down).
pub fn open(path: &Path) -> Result<(LogStore, StateMachineStore), StoreError> {
    open_with(path, StoreOptions::default())
}

/// How [`open_with`] opens a store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// How the log and the vote reach the disk.
    pub durability: Durability,
    /// MiB written into each of RocksDB's first two write-ahead log files when
    /// the store opens, which are then recycled, so that synced appends
    /// overwrite written blocks instead of growing a file (the `wal_prewrite`
    /// module). 0 (the default here; `baton serve` writes 60): neither. At most
    /// [`MAX_WAL_PREWRITE_MIB`]. Ignored when `durability` does not sync.
    pub wal_prewrite_mib: u32,
}

/// How the log and the vote reach the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Every append and vote is one synced write before it is acknowledged.
    #[default]
    Synced,
    /// A negative control for the fault-injection harness, never for real use:
    /// log and vote writes skip RocksDB's WAL, so they are acknowledged while only
    /// in memory and a crash loses them. The safety checkers must catch it.
    UnsafeNoWal,
    /// Testing only (`--unsafe-leader-append-delay-ms`): as [`Durability::Synced`],
    /// but every append openraft's core does not wait for (a leader's own, which
    /// it replicates meanwhile) is held this long before it is written. A test
    /// can then tell that a leader counts itself towards a quorum only once its
    /// own append is on disk.
    DelayedLeaderAppends(std::time::Duration),
}

impl Durability {
    /// Whether writes that must be durable are synced (all but the negative
    /// control).
    pub fn syncs(self) -> bool {
        !matches!(self, Durability::UnsafeNoWal)
    }

    /// How long a leader's own append is held before it is written.
    pub(crate) fn leader_append_hold(self) -> std::time::Duration {
        match self {
            Durability::DelayedLeaderAppends(hold) => hold,
            _ => std::time::Duration::ZERO,
        }
    }
}

/// [`open`] with chosen [`StoreOptions`].
pub fn open_with(
    path: &Path,
    options: StoreOptions,
) -> Result<(LogStore, StateMachineStore), StoreError> {
    let StoreOptions {
        durability,
        wal_prewrite_mib,
    } = options;
    let prewrite = if durability.syncs() {
        wal_prewrite_mib
    } else {
        0
    };
    let db = db::open_db(path, prewrite)?;
    // One set per node, shared by both halves (`StateMachineStore::metrics`).
    let metrics = std::sync::Arc::new(StoreMetrics::default());
    let state_machine = StateMachineStore::open(
        db.clone(),
        path.join(SNAPSHOT_DIR),
        durability,
        metrics.clone(),
    )?;
    Ok((LogStore::new(db, durability, metrics)?, state_machine))
}
