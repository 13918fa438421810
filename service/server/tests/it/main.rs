//! The `baton` binary's integration tests, one binary (each test binary links
//! RocksDB): real server processes on loopback ports, single nodes and clusters.
#![allow(clippy::unwrap_used)]

mod cluster;
mod harness;
mod modes_cluster;
mod process;
mod traces;
mod watch_process;
