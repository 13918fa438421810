//! Memory per held lock: 100,000 held locks, each on its own lease.
//!
//! The workspace forbids `unsafe` code, so a counting `#[global_allocator]` cannot be
//! written here; this measures what the process really pays instead: resident
//! memory (`VmRSS` in `/proc/self/status`) before and after building the state, on
//! the main thread (`harness = false`), so the allocator's main arena serves every
//! allocation. Allocator headers and fragmentation are included, as they are in
//! production. Linux only; elsewhere it prints why and passes.
#![allow(clippy::unwrap_used)]

use baton_core::{ApplyContext, Command, LeaseId, LeaseRef, Limits, Request, StateMachine};

const LOCKS: usize = 100_000;
/// Generous: catches a regression, not noise. The measured figure is printed.
const MAX_BYTES_PER_LOCK: u64 = 1_024;

/// Resident plus swapped-out memory of this process, in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = |field: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(field))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some((kib("VmRSS:")? + kib("VmSwap:").unwrap_or(0)) * 1024)
}

fn build(sm: &mut StateMachine) {
    let ctx = ApplyContext {
        now_ms: 1_700_000_000_000,
        limits: Limits::default(),
        term: 1,
    };
    for i in 0..LOCKS {
        let lease_id = LeaseId(0x5eed_0000_0000_0000_0000_0000_0000_0000 | i as u128);
        let created = sm.apply(
            &ctx,
            &Request::plain(Command::CreateLease {
                lease_id,
                ttl_ms: 15_000,
                holder: format!("pod-{:03x}-{:03}", i % 4096, i % 1000),
            }),
        );
        assert!(created.result.is_ok(), "{created:?}");
        let acquired = sm.apply(
            &ctx,
            &Request::plain(Command::Acquire {
                name: format!("tenant-{}/job-{:06}", i % 100, i),
                lease: LeaseRef::Existing(lease_id),
                holder: None,
                waiter: None,
                lock_delay_ms: 0,
            }),
        );
        assert!(acquired.result.is_ok(), "{acquired:?}");
    }
}

fn main() {
    // Like libtest: `cargo test -p baton-core NAME` runs this only if NAME matches.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    if !filters.is_empty() && !filters.iter().any(|f| "memory_per_held_lock".contains(f)) {
        return;
    }
    let Some(before) = resident_bytes() else {
        println!("memory: /proc/self/status is not readable here; not measured");
        return;
    };
    let mut sm = StateMachine::new();
    build(&mut sm);
    let after = resident_bytes().unwrap();
    assert_eq!(sm.lease_count(), LOCKS);
    assert_eq!(sm.locks("", None, LOCKS + 1).len(), LOCKS);
    let per_lock = after.saturating_sub(before) / LOCKS as u64;
    let snapshot = sm.to_snapshot().len();
    println!(
        "memory: {LOCKS} held locks, each on its own lease: {} bytes resident, \
         {per_lock} bytes per held lock with its lease (snapshot: {} bytes per lock)",
        after.saturating_sub(before),
        snapshot / LOCKS,
    );
    assert!(
        per_lock < MAX_BYTES_PER_LOCK,
        "{per_lock} bytes per held lock (limit {MAX_BYTES_PER_LOCK})"
    );
    // The state's own payload (names, holders, ids, tokens) is about 100 bytes a
    // lock; much less means the measurement, not the state, went wrong.
    assert!(
        per_lock > 100,
        "implausible measurement: {per_lock} bytes per lock"
    );
    println!("memory: ok");
}
