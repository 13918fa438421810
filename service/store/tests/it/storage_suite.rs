//! openraft's own storage test suite against the RocksDB stores.

use baton_store::{LogStore, StateMachineStore, StorageError, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, StorageIOError};
use tempfile::TempDir;

/// Opens a fresh database in a new temporary directory for every test case;
/// the directory lives as long as the returned guard.
struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for RocksBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError> {
        let dir = TempDir::new().map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        let (log, sm) =
            baton_store::open(dir.path()).map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    if let Err(e) = Suite::test_all(RocksBuilder) {
        panic!("openraft storage suite failed: {e}");
    }
}
