//! Baton's fault-injection harness: starts a cluster of real `baton` processes,
//! drives client workers through it while a seeded nemesis kills, pauses,
//! partitions and skews nodes, records a Jepsen-style history, and checks it.

pub mod check;
pub mod client;
pub mod cluster;
pub mod history;
pub mod idle_server;
pub mod nemesis;
pub mod ports;
pub mod proxy;
pub mod recorder;
pub mod register;
pub mod run;
pub mod worker;
