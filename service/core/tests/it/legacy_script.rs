//! A history written only with commands that builds before format 4 knew, so
//! that an older build can apply it too. `tests/it/data/format3*.snapshot` are
//! the snapshots an older build (commit 032aba7) took after applying it; the
//! snapshot tests check that today's build reads that file into exactly the
//! state it reaches by applying the same history itself.
//!
//! Shared verbatim with the generator that wrote the file (see
//! `snapshots::a_format_3_snapshot_reads_into_the_state_it_described`).

use baton_core::{
    ApplyContext, Command, IdempotencyKey, LeaseId, LeaseRef, Limits, Quota, Request, StateMachine,
    WaiterId,
};

/// One applied request and the leader-stamped time it carried.
pub struct Step {
    pub now_ms: u64,
    pub request: Request,
}

fn plain(now_ms: u64, command: Command) -> Step {
    Step {
        now_ms,
        request: Request::plain(command),
    }
}

fn keyed(now_ms: u64, key: &str, command: Command) -> Step {
    Step {
        now_ms,
        request: Request {
            idempotency: Some(IdempotencyKey {
                principal: String::new(),
                key: key.to_owned(),
                fingerprint: 7,
            }),
            command,
        },
    }
}

fn lease(n: u128) -> LeaseId {
    LeaseId(n)
}

fn create(n: u128, holder: &str) -> Command {
    Command::CreateLease {
        lease_id: lease(n),
        ttl_ms: 30_000,
        holder: holder.to_owned(),
    }
}

fn acquire(name: &str, n: u128, waiter: Option<u64>, lock_delay_ms: u64) -> Command {
    Command::Acquire {
        name: name.to_owned(),
        lease: LeaseRef::Existing(lease(n)),
        holder: None,
        waiter: waiter.map(WaiterId),
        lock_delay_ms,
    }
}

/// Leases (one owned by a principal), held locks with queues behind them, a
/// lock in its delay with a waiter, an ephemeral lease, an election with a
/// leader and candidates, registered names, remembered answers (one of a wait
/// that ended), and a cluster id. `bare` leaves out the cluster id and the
/// lease owner, the two fields formats 1 and 2 did not have.
pub fn history(bare: bool) -> Vec<Step> {
    let t = 2_000_000;
    let owner = if bare { None } else { Some("team-a") };
    let mut steps = vec![
        plain(t, create(1, "alpha")),
        plain(t, create(2, "beta")),
        plain(t, create(3, "gamma").within(owner, Quota::UNLIMITED)),
        plain(t, create(4, "delta")),
        plain(t, acquire("db/migrate", 1, None, 0)),
        keyed(t + 1, "wait-1", acquire("db/migrate", 2, Some(11), 0)),
        plain(t + 2, acquire("db/migrate", 3, Some(12), 0)),
        plain(t + 3, acquire("cache", 4, None, 5_000)),
        plain(t + 4, acquire("cache", 1, Some(13), 0)),
        plain(
            t + 5,
            Command::Acquire {
                name: "solo".into(),
                lease: LeaseRef::New {
                    lease_id: lease(9),
                    ttl_ms: 15_000,
                },
                holder: Some("ephemeral".into()),
                waiter: None,
                lock_delay_ms: 0,
            },
        ),
        plain(
            t + 6,
            Command::Campaign {
                name: "leader/api".into(),
                lease: LeaseRef::Existing(lease(2)),
                candidate: "beta".into(),
                value: "{\"addr\":\"10.0.0.2\"}".into(),
                waiter: None,
            },
        ),
        plain(
            t + 7,
            Command::Campaign {
                name: "leader/api".into(),
                lease: LeaseRef::Existing(lease(3)),
                candidate: "gamma".into(),
                value: "\"g\"".into(),
                waiter: Some(WaiterId(21)),
            },
        ),
        plain(
            t + 8,
            Command::Register {
                name: "svc/payments".into(),
                lease: LeaseRef::Existing(lease(1)),
                holder: None,
                value: "[1,2,3]".into(),
            },
        ),
    ];
    // The holder of `cache` expires: its lock delay starts, its waiter stays queued.
    steps.push(plain(
        t + 9,
        Command::ExpireLeaseOfTerm {
            lease_id: lease(4),
            term: 1,
        },
    ));
    // The first holder of `db/migrate` releases: the keyed wait is granted and
    // its remembered answer updated. Its token is revision 5: four leases
    // were created before it (the cluster id is not a revision).
    steps.push(plain(
        t + 10,
        Command::Release {
            name: "db/migrate".into(),
            lease_id: lease(1),
            token: 5,
        },
    ));
    if !bare {
        steps.push(plain(
            t + 11,
            Command::SetClusterId {
                cluster_id: "c0ffee".into(),
            },
        ));
    }
    steps
}

/// Applies the history to a new state machine, as a log of term 1 would.
pub fn replay(bare: bool) -> StateMachine {
    let mut sm = StateMachine::new();
    for step in history(bare) {
        let ctx = ApplyContext {
            now_ms: step.now_ms,
            limits: Limits::default(),
            term: 1,
        };
        let outcome = sm.apply(&ctx, &step.request);
        assert!(
            outcome.result.is_ok(),
            "every step of the history is accepted: {outcome:?}"
        );
    }
    sm
}
