//! Errors of the storage layer itself (opening, encoding, RocksDB).
//!
//! openraft's traits return [`openraft::StorageError`]; the trait
//! implementations convert a [`StoreError`] into one, naming what was being
//! read or written, so that openraft can tell a log failure from a snapshot
//! failure.

use std::path::PathBuf;

/// What went wrong in the RocksDB storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The data directory could not be listed.
    #[error("cannot read directory {path}: {source}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A write-ahead log prewrite larger than one memtable holds was asked for.
    #[error(
        "a write-ahead log prewrite of {0} MiB is more than the {max} MiB allowed",
        max = crate::MAX_WAL_PREWRITE_MIB
    )]
    WalPrewriteTooLarge(u32),
    /// RocksDB reported an error (I/O, corruption, lock held by another process).
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// A column family that `open` creates is missing: the database was opened
    /// by something else or is damaged.
    #[error("column family {0:?} is missing")]
    MissingColumnFamily(&'static str),
    /// `build_snapshot` was called a second time on one builder (openraft
    /// asks each builder once; its copy of the state went to the first build).
    #[error("this snapshot builder was already used")]
    BuilderUsed,
    /// The snapshot thread ended without a result (it panicked).
    #[error("the snapshot thread stopped before it finished")]
    BuilderStopped,
    /// The log's writer thread could not be started.
    #[error("cannot start the log writer thread: {0}")]
    WriterThread(#[source] std::io::Error),
    /// The log's writer thread is gone (the store is shutting down, or it
    /// panicked), so a write was not carried out.
    #[error("the log writer has stopped")]
    WriterStopped,
    /// A value could not be serialized.
    #[error("cannot encode {what}: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// Why.
        #[source]
        source: postcard::Error,
    },
    /// A stored value could not be deserialized.
    #[error("cannot decode {what}: {source}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// Why.
        #[source]
        source: postcard::Error,
    },
    /// A stored value was written by a format this build does not know.
    #[error("{what} has unknown format version {version}")]
    UnknownFormat {
        /// What was being decoded.
        what: &'static str,
        /// The version byte found (0 for an empty value).
        version: u8,
    },
    /// A stored value has bytes after its end.
    #[error("{what} has {extra} trailing bytes")]
    TrailingBytes {
        /// What was being decoded.
        what: &'static str,
        /// How many bytes were left over.
        extra: usize,
    },
    /// A log key is not an 8-byte big-endian index.
    #[error("malformed log key of {0} bytes")]
    MalformedLogKey(usize),
    /// The state machine refused the snapshot bytes.
    #[error("cannot restore the state machine from a snapshot: {0}")]
    Restore(#[source] baton_core::SnapshotError),
    /// A snapshot file could not be written, read, renamed or removed.
    #[error("snapshot file {path}: {source}")]
    SnapshotFile {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// A snapshot's data says it covers a different log id than its meta.
    #[error("snapshot data covers {data} but its meta says {meta}")]
    SnapshotMismatch {
        /// Last log id according to the snapshot meta.
        meta: String,
        /// Last log id according to the snapshot data.
        data: String,
    },
    /// Snapshot bytes are not as long as their envelope says: a transfer cut
    /// short or run on.
    #[error("snapshot data is {actual} bytes but its envelope says {expected}")]
    SnapshotSize {
        /// The length the envelope's fields add up to.
        expected: u64,
        /// The length received.
        actual: u64,
    },
    /// Received snapshot bytes do not have the CRC-32 their id promises:
    /// damaged on the way.
    #[error("snapshot data has CRC-32 {actual:08x} but its id promises {expected:08x}")]
    SnapshotChecksum {
        /// The CRC-32 the snapshot id carries.
        expected: u32,
        /// The CRC-32 of the bytes received.
        actual: u32,
    },
    /// The thread restoring an installed snapshot ended without a result (it
    /// panicked, or the runtime shut down).
    #[error("the restore of the installed snapshot stopped before it finished: {0}")]
    RestoreStopped(#[source] tokio::task::JoinError),
    /// An installed snapshot could not be restored into memory after it was
    /// stored: this store refuses everything from then on (openraft stops).
    #[error("the installed snapshot could not be restored: {0}")]
    NotRestored(#[source] std::sync::Arc<StoreError>),
}
