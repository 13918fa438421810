//! How fast the state machine applies commands, and how big its snapshots are.
//!
//! Run: `cargo bench -p baton-core --bench apply -- --warm-up-time 1 --measurement-time 3`
//!
//! - `uncontended`: acquire + release cycles on N free locks, each lock on its own
//!   existing lease (commands per second: one acquire or one release is one element);
//! - `uncontended_new_lease`: the same with the lease created by the acquire and
//!   revoked by the release (what `POST :acquire` without a `lease_id` does);
//! - `batch64`: 32 acquires then their 32 releases in one `apply_batch`;
//! - `expire_lease_1000_locks`: one `ExpireLease` of a lease holding 1,000 locks, a
//!   tenth of them with a waiter behind that gets the lock;
//! - `expiry_storm_entry`: one log entry of 1,024 `ExpireLeaseOfTerm`, each lease
//!   holding 10 locks, in a state of 100,000 such leases (one entry of the
//!   expiry storm of `baton-loadtest storm`);
//! - `snapshot_100k_locks`: encode and decode a state of 100,000 held locks.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;

use baton_core::{
    ApplyContext, Batch, Command, LeaseId, LeaseRef, Limits, Reply, Request, StateMachine, WaiterId,
};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};

const NOW_MS: u64 = 1_700_000_000_000;

fn ctx() -> ApplyContext {
    ApplyContext {
        now_ms: NOW_MS,
        limits: Limits::default(),
        term: 1,
    }
}

fn lock_name(i: usize) -> String {
    format!("tenant-{}/job-{:06}", i % 100, i)
}

fn lease(i: usize) -> LeaseId {
    LeaseId(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834 ^ (i as u128) << 1)
}

/// A machine with `n` leases (holder `pod-abc-<i>`) and nothing held.
fn with_leases(n: usize) -> StateMachine {
    let mut sm = StateMachine::new();
    let ctx = ctx();
    for i in 0..n {
        let out = sm.apply(
            &ctx,
            &Request::plain(Command::CreateLease {
                lease_id: lease(i),
                ttl_ms: 15_000,
                holder: format!("pod-abc-{i}"),
            }),
        );
        assert!(out.result.is_ok());
    }
    sm
}

fn acquire(i: usize) -> Request {
    Request::plain(Command::Acquire {
        name: lock_name(i),
        lease: LeaseRef::Existing(lease(i)),
        holder: None,
        waiter: None,
        lock_delay_ms: 0,
    })
}

fn release(i: usize) -> Request {
    Request::plain(Command::Release {
        name: lock_name(i),
        lease_id: lease(i),
        token: 0,
    })
}

fn set_token(request: &mut Request, new: u64) {
    if let Command::Release { token, .. } = &mut request.command {
        *token = new;
    }
}

fn token(reply: &Result<Reply, baton_core::CoreError>) -> u64 {
    match reply {
        Ok(Reply::LockGranted(grant)) => grant.token,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn uncontended(c: &mut Criterion) {
    let mut group = c.benchmark_group("uncontended");
    for n in [1_000usize, 100_000] {
        let mut sm = with_leases(n);
        let acquires: Vec<Request> = (0..n).map(acquire).collect();
        let mut releases: Vec<Request> = (0..n).map(release).collect();
        let ctx = ctx();
        group.throughput(Throughput::Elements(2 * n as u64));
        group.bench_function(BenchmarkId::new("acquire_release", n), |b| {
            b.iter(|| {
                for (acquire, release) in acquires.iter().zip(releases.iter_mut()) {
                    let granted = sm.apply(&ctx, acquire);
                    set_token(release, token(&granted.result));
                    black_box(granted);
                    let released = sm.apply(&ctx, release);
                    debug_assert!(released.result.is_ok());
                    black_box(released);
                }
            });
        });
    }
    group.finish();
}

fn uncontended_new_lease(c: &mut Criterion) {
    let mut group = c.benchmark_group("uncontended_new_lease");
    let n = 1_000usize;
    let mut sm = StateMachine::new();
    let acquires: Vec<Request> = (0..n)
        .map(|i| {
            Request::plain(Command::Acquire {
                name: lock_name(i),
                lease: LeaseRef::New {
                    lease_id: lease(i),
                    ttl_ms: 15_000,
                },
                holder: Some(format!("pod-abc-{i}")),
                waiter: None,
                lock_delay_ms: 0,
            })
        })
        .collect();
    let mut releases: Vec<Request> = (0..n).map(release).collect();
    let ctx = ctx();
    group.throughput(Throughput::Elements(2 * n as u64));
    group.bench_function(BenchmarkId::new("acquire_release", n), |b| {
        b.iter(|| {
            for (acquire, release) in acquires.iter().zip(releases.iter_mut()) {
                let granted = sm.apply(&ctx, acquire);
                set_token(release, token(&granted.result));
                black_box(granted);
                let released = sm.apply(&ctx, release);
                debug_assert!(released.result.is_ok());
                black_box(released);
            }
        });
    });
    group.finish();
}

fn batch64(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch64");
    let n = 32usize;
    let mut sm = with_leases(n);
    let mut batch = Batch {
        now_ms: NOW_MS,
        limits: Limits::default(),
        requests: (0..n).map(acquire).chain((0..n).map(release)).collect(),
    };
    group.throughput(Throughput::Elements(2 * n as u64));
    group.bench_function("acquire32_release32", |b| {
        b.iter(|| {
            // Each acquire is one grant, one revision: the tokens are known ahead.
            let base = sm.revision();
            for (i, release) in batch.requests[n..].iter_mut().enumerate() {
                set_token(release, base + 1 + i as u64);
            }
            let outcomes = sm.apply_batch(&batch, 1);
            debug_assert!(outcomes.iter().all(|o| o.result.is_ok()));
            black_box(outcomes)
        });
    });
    group.finish();
}

fn expire_big_lease(c: &mut Criterion) {
    let mut group = c.benchmark_group("expire_lease_1000_locks");
    let locks = 1_000usize;
    let ctx = ctx();
    // Lease 0 holds every lock; leases 1..=100 each wait on one of them.
    let mut prepared = with_leases(101);
    for i in 0..locks {
        let out = prepared.apply(&ctx, &acquire_with(i, 0, None));
        assert!(out.result.is_ok());
    }
    for w in 1..=100usize {
        let out = prepared.apply(&ctx, &acquire_with(w * 10 - 1, w, Some(WaiterId(w as u64))));
        assert!(matches!(out.result, Ok(Reply::LockQueued { .. })));
    }
    let expire = Request::plain(Command::ExpireLease { lease_id: lease(0) });
    group.throughput(Throughput::Elements(locks as u64));
    group.bench_function("expire", |b| {
        b.iter_batched(
            || prepared.clone(),
            |mut sm| {
                let out = sm.apply(&ctx, &expire);
                debug_assert_eq!(out.events.len(), 1 + 1_000 + 100);
                // Dropping the machine is not what is measured.
                (sm, out)
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

fn expiry_storm_entry(c: &mut Criterion) {
    let mut group = c.benchmark_group("expiry_storm_entry");
    group.sample_size(20);
    let (leases, locks_per_lease, per_entry) = (100_000usize, 10usize, 1_024usize);
    let ctx = ctx();
    let mut prepared = with_leases(leases);
    for l in 0..leases {
        for k in 0..locks_per_lease {
            let out = prepared.apply(&ctx, &acquire_with(l * locks_per_lease + k, l, None));
            assert!(out.result.is_ok());
        }
    }
    let batch = Batch {
        now_ms: NOW_MS,
        limits: Limits::default(),
        requests: (0..per_entry)
            .map(|l| {
                Request::plain(Command::ExpireLeaseOfTerm {
                    lease_id: lease(l * 97 % leases),
                    term: 1,
                })
            })
            .collect(),
    };
    group.throughput(Throughput::Elements(per_entry as u64));
    // Right after a copy of the state was taken (a snapshot build, a scrape's
    // view): every node the entry touches is copied first.
    group.bench_function("after_a_copy", |b| {
        b.iter_batched(
            || prepared.clone(),
            |mut sm| {
                let outcomes = sm.apply_batch(&batch, 1);
                debug_assert!(outcomes.iter().all(|o| o.result.is_ok()));
                (sm, outcomes)
            },
            BatchSize::LargeInput,
        );
    });
    // The state owned alone, as while nothing else holds a copy: each iteration
    // expires the batch's leases, then (not timed) takes them out again.
    let mut alone = prepared;
    let recreate: Vec<Request> =
        (0..per_entry)
            .flat_map(|l| {
                let lease_index = l * 97 % leases;
                std::iter::once(Request::plain(Command::CreateLease {
                    lease_id: lease(lease_index),
                    ttl_ms: 15_000,
                    holder: format!("pod-abc-{lease_index}"),
                }))
                .chain((0..locks_per_lease).map(move |k| {
                    acquire_with(lease_index * locks_per_lease + k, lease_index, None)
                }))
            })
            .collect();
    // The benchmark times its own iterations (not the state machine's clock).
    #[allow(clippy::disallowed_methods, clippy::disallowed_types)]
    group.bench_function("owned_alone", |b| {
        b.iter_custom(|iters| {
            let mut spent = std::time::Duration::ZERO;
            for _ in 0..iters {
                let started = std::time::Instant::now();
                let outcomes = alone.apply_batch(&batch, 1);
                spent += started.elapsed();
                debug_assert!(outcomes.iter().all(|o| o.result.is_ok()));
                drop(outcomes);
                for request in &recreate {
                    let out = alone.apply(&ctx, request);
                    debug_assert!(out.result.is_ok());
                }
            }
            spent
        });
    });
    group.finish();
}

fn acquire_with(lock: usize, lease_index: usize, waiter: Option<WaiterId>) -> Request {
    Request::plain(Command::Acquire {
        name: lock_name(lock),
        lease: LeaseRef::Existing(lease(lease_index)),
        holder: None,
        waiter,
        lock_delay_ms: 0,
    })
}

fn snapshot(c: &mut Criterion) {
    let mut group = c.benchmark_group("snapshot_100k_locks");
    group.sample_size(10);
    let n = 100_000usize;
    let ctx = ctx();
    let mut sm = with_leases(n);
    for i in 0..n {
        let out = sm.apply(&ctx, &acquire(i));
        assert!(out.result.is_ok());
    }
    let bytes = sm.to_snapshot();
    println!(
        "snapshot of {n} held locks (each on its own lease): {} bytes, {} bytes per lock",
        bytes.len(),
        bytes.len() / n
    );
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function("encode", |b| b.iter(|| black_box(sm.to_snapshot())));
    group.bench_function("decode", |b| {
        b.iter_batched(
            || (),
            |()| StateMachine::from_snapshot(black_box(&bytes)).unwrap(),
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

criterion_group!(
    benches,
    uncontended,
    uncontended_new_lease,
    batch64,
    expire_big_lease,
    expiry_storm_entry,
    snapshot
);
criterion_main!(benches);
