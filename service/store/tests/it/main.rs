//! baton-store's integration tests, one binary (each test binary links RocksDB):
//! openraft's storage suite and recovery after a restart.
#![allow(clippy::unwrap_used)]

mod common;
mod deferred_restore;
mod log_tail;
mod recovery;
mod snapshot_order;
mod storage_suite;
