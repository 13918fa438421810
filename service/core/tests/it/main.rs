//! baton-core's integration tests, one binary: table tests of every rule and
//! property tests against a reference model. (`tests/memory.rs` is a binary of
//! its own: it runs on the main thread, without the test harness.)
#![allow(clippy::unwrap_used)]

mod elections_names;
mod legacy_script;
mod locks;
mod modes;
mod properties;
mod support;
