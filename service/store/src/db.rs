//! The RocksDB database: its column families, its keys, and how it is opened.

use std::path::Path;
use std::sync::Arc;

use rocksdb::{ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Options, WriteOptions, DB};

use crate::error::StoreError;
use crate::wal_prewrite;

/// Log entries, keyed by big-endian index.
pub(crate) const CF_LOG: &str = "log";
/// Small values beside the log: vote, committed and last purged log id.
pub(crate) const CF_META: &str = "meta";
/// The current snapshot's record (meta and file name; the bytes are in a file).
pub(crate) const CF_SNAPSHOT: &str = "snapshot";

/// Key of the vote in [`CF_META`].
pub(crate) const KEY_VOTE: &[u8] = b"vote";
/// Key of the last committed log id in [`CF_META`].
pub(crate) const KEY_COMMITTED: &[u8] = b"committed";
/// Key of the last purged log id in [`CF_META`].
pub(crate) const KEY_LAST_PURGED: &[u8] = b"last_purged";
/// Key of the current snapshot's record in [`CF_SNAPSHOT`].
pub(crate) const KEY_SNAPSHOT_FILE: &[u8] = b"current-file";
/// Key under which older builds stored the whole current snapshot in
/// [`CF_SNAPSHOT`]; moved into a file when found.
pub(crate) const KEY_SNAPSHOT_INLINE: &[u8] = b"current";

/// Opens (creating if needed) the database with all column families; with
/// `wal_prewrite_mib` above 0, write-ahead log files are recycled and the first
/// one is prewritten ([`wal_prewrite`]).
pub(crate) fn open_db(path: &Path, wal_prewrite_mib: u32) -> Result<Arc<DB>, StoreError> {
    if wal_prewrite_mib > wal_prewrite::MAX_WAL_PREWRITE_MIB {
        return Err(StoreError::WalPrewriteTooLarge(wal_prewrite_mib));
    }
    std::fs::create_dir_all(path).map_err(|source| StoreError::CreateDir {
        path: path.to_path_buf(),
        source,
    })?;

    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // The workspace builds RocksDB without compression libraries; say so
    // instead of relying on RocksDB's fallback when snappy is absent.
    opts.set_compression_type(DBCompressionType::None);
    if wal_prewrite_mib > 0 {
        wal_prewrite::recycling_options(&mut opts);
    }

    let cfs = [CF_LOG, CF_META, CF_SNAPSHOT].map(|name| {
        let mut cf_opts = Options::default();
        cf_opts.set_compression_type(DBCompressionType::None);
        if name == CF_META {
            cf_opts.set_write_buffer_size(wal_prewrite::META_WRITE_BUFFER_BYTES);
        }
        ColumnFamilyDescriptor::new(name, cf_opts)
    });
    let db = DB::open_cf_descriptors(&opts, path, cfs)?;
    if wal_prewrite_mib > 0 {
        wal_prewrite::prewrite(&db, path, wal_prewrite_mib)?;
    }
    Ok(Arc::new(db))
}

/// Looks up a column family that [`open_db`] created.
pub(crate) fn cf<'a>(db: &'a DB, name: &'static str) -> Result<&'a ColumnFamily, StoreError> {
    db.cf_handle(name)
        .ok_or(StoreError::MissingColumnFamily(name))
}

/// Write options for writes that must be on disk before the call returns.
pub(crate) fn synced() -> WriteOptions {
    let mut opts = WriteOptions::default();
    opts.set_sync(true);
    opts
}

/// Write options under `durability`: synced (`sync`) or not; under the
/// `--unsafe-no-fsync` negative control every write skips the WAL, so it lives
/// only in the memtable and a `kill -9` loses it (all of them alike, so the
/// database a restart finds is old but self-consistent).
pub(crate) fn write_options(durability: crate::Durability, sync: bool) -> WriteOptions {
    match durability {
        crate::Durability::Synced | crate::Durability::DelayedLeaderAppends(_) if sync => synced(),
        crate::Durability::Synced | crate::Durability::DelayedLeaderAppends(_) => {
            WriteOptions::default()
        }
        crate::Durability::UnsafeNoWal => {
            let mut opts = WriteOptions::default();
            opts.disable_wal(true);
            opts
        }
    }
}
