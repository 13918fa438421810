//! Lock, lease and lock-delay rules, including the nasty cases.

use baton_core::{
    Batch, Command, CoreError, EndReason, EventKind, IdempotencyKey, LeaseCreated, LeaseRef,
    Limits, Outcome, Quota, Reply, Request, StateMachine, WaiterId,
};

use crate::support::{grants, lease, Driver};

#[test]
fn a_free_lock_is_granted_with_the_revision_as_token() {
    let mut d = Driver::default();
    let l = d.create_lease(1);
    let before = d.sm.revision();
    let grant = d.grant("db", l);
    assert_eq!(grant.token, before + 1);
    assert_eq!(d.sm.revision(), grant.token);
    assert_eq!(grant.holder, "holder-1");
    assert_eq!(grant.ttl_ms, 10_000);
    let view = d.sm.lock("db");
    assert!(view.held);
    assert_eq!(view.token, Some(grant.token));
}

#[test]
fn a_held_lock_refuses_a_try_and_names_its_holder() {
    let mut d = Driver::default();
    let (a, b) = (d.create_lease(1), d.create_lease(2));
    let grant = d.grant("db", a);
    let before = d.sm.clone();
    assert_eq!(
        d.acquire("db", b),
        Err(CoreError::LockHeld {
            holder: Some("holder-1".into()),
            token: Some(grant.token)
        })
    );
    assert_eq!(d.sm, before, "a refused try changes nothing");
}

#[test]
fn re_acquire_by_the_same_lease_returns_the_same_token() {
    let mut d = Driver::default();
    let a = d.create_lease(1);
    let first = d.grant("db", a);
    let revision = d.sm.revision();
    let again = d.grant("db", a);
    assert_eq!(first, again);
    assert_eq!(d.sm.revision(), revision, "a retry is not a new grant");
}

#[test]
fn waiters_are_granted_in_arrival_order_one_at_a_time() {
    let mut d = Driver::default();
    let holder = d.create_lease(1);
    let leases: Vec<_> = (2..=4).map(|n| d.create_lease(n)).collect();
    let mut token = d.grant("q", holder).token;
    let waiters: Vec<_> = leases.iter().map(|l| d.wait("q", *l)).collect();
    let mut current = holder;
    for (l, w) in leases.iter().zip(&waiters) {
        let out = d.release("q", current, token);
        let granted = grants(&out);
        assert_eq!(granted.len(), 1, "exactly one waiter is woken: {granted:?}");
        let (name, got_lease, new_token, waiter) = granted[0].clone();
        assert_eq!((name.as_str(), got_lease, waiter), ("q", *l, Some(*w)));
        assert!(new_token > token);
        current = *l;
        token = new_token;
    }
    d.release("q", current, token).result.unwrap();
    assert!(!d.sm.lock("q").held);
    assert!(
        d.sm.locks("", None, 10).is_empty(),
        "free locks are not stored"
    );
}

#[test]
fn a_stale_token_release_is_refused_and_changes_nothing() {
    let mut d = Driver::default();
    let (a, b) = (d.create_lease(1), d.create_lease(2));
    let old = d.grant("db", a);
    d.release("db", a, old.token).result.unwrap();
    let new = d.grant("db", b);
    let before = d.sm.clone();
    let cases = [
        (
            a,
            old.token,
            Err(CoreError::LockLost {
                current_token: Some(new.token),
            }),
        ),
        (
            b,
            old.token,
            Err(CoreError::LockLost {
                current_token: Some(new.token),
            }),
        ),
        (
            a,
            new.token,
            Err(CoreError::LockLost {
                current_token: Some(new.token),
            }),
        ),
        (lease(99), new.token, Err(CoreError::LeaseNotFound)),
    ];
    for (l, token, expected) in cases {
        assert_eq!(d.release("db", l, token).result, expected);
        assert_eq!(
            d.sm.check_lock_holder("db", l, token).err(),
            expected.clone().err()
        );
        assert_eq!(
            d.sm, before,
            "refused release with ({l:?}, {token}) changed state"
        );
    }
    assert_eq!(d.sm.check_lock_holder("db", b, new.token), Ok(10_000));
}

#[test]
fn validate_reports_whether_a_token_is_current() {
    let mut d = Driver::default();
    let (a, b) = (d.create_lease(1), d.create_lease(2));
    assert_eq!(d.sm.validate("db", 1), (false, None));
    let old = d.grant("db", a);
    assert_eq!(d.sm.validate("db", old.token), (true, Some(old.token)));
    d.release("db", a, old.token).result.unwrap();
    let new = d.grant("db", b);
    assert_eq!(d.sm.validate("db", old.token), (false, Some(new.token)));
}

#[test]
fn a_waiter_whose_lease_expired_while_queued_is_skipped() {
    let mut d = Driver::default();
    let (a, b, c) = (d.create_lease(1), d.create_lease(2), d.create_lease(3));
    let grant = d.grant("db", a);
    let wb = d.wait("db", b);
    let wc = d.wait("db", c);
    let out = d.apply(Command::ExpireLease { lease_id: b });
    assert!(out.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::LockWaitEnded { waiter, reason: EndReason::Expired, .. } if *waiter == wb
    )));
    assert_eq!(d.sm.lock("db").waiters, 1);
    let out = d.release("db", a, grant.token);
    let granted = grants(&out);
    assert_eq!(granted.len(), 1);
    assert_eq!((granted[0].1, granted[0].3), (c, Some(wc)));
}

#[test]
fn expiring_a_lease_with_five_locks_and_three_waits_releases_everything_at_once() {
    let mut d = Driver::default();
    let (big, other, next) = (d.create_lease(1), d.create_lease(2), d.create_lease(3));
    let held: Vec<String> = (0..5).map(|i| format!("held-{i}")).collect();
    for name in &held {
        d.grant(name, big);
    }
    // Someone waits behind two of them.
    let w0 = d.wait("held-0", next);
    let w3 = d.wait("held-3", other);
    // The big lease waits on three locks held by others.
    for i in 0..3 {
        d.grant(&format!("other-{i}"), other);
        d.wait(&format!("other-{i}"), big);
    }
    assert_eq!(d.sm.lease(big).unwrap().waiting, 3);
    let before = d.sm.revision();
    let out = d.apply(Command::ExpireLease { lease_id: big });
    let Ok(Reply::LeaseClosed(released)) = &out.result else {
        panic!("{out:?}")
    };
    assert_eq!(released.locks, held);
    assert!(d.sm.lease(big).is_none());
    for i in 0..3 {
        assert_eq!(d.sm.lock(&format!("other-{i}")).waiters, 0);
    }
    let granted = grants(&out);
    assert_eq!(
        granted.len(),
        2,
        "the two waiting locks were handed on: {granted:?}"
    );
    assert!(granted.contains(&("held-0".into(), next, granted[0].2, Some(w0))));
    assert!(granted
        .iter()
        .any(|g| g.0 == "held-3" && g.1 == other && g.3 == Some(w3)));
    for name in &held[1..3] {
        assert!(!d.sm.lock(name).held);
    }
    // One event per change, revisions contiguous and above everything before.
    let revisions: Vec<u64> = out.events.iter().map(|e| e.revision).collect();
    let expected: Vec<u64> = (before + 1..=out.revision).collect();
    assert_eq!(revisions, expected);
}

#[test]
fn lock_delay_holds_the_lock_after_an_expiry_but_not_after_a_release() {
    let mut d = Driver::default();
    let (a, b, c) = (d.create_lease(1), d.create_lease(2), d.create_lease(3));
    let acquire_with_delay = |d: &mut Driver, l, waiter: Option<WaiterId>| {
        d.apply(Command::Acquire {
            name: "db".into(),
            lease: LeaseRef::Existing(l),
            holder: None,
            waiter,
            lock_delay_ms: 5_000,
        })
        .result
    };
    // Released: no delay.
    let Ok(Reply::LockGranted(g)) = acquire_with_delay(&mut d, a, None) else {
        panic!()
    };
    d.release("db", a, g.token).result.unwrap();
    assert!(matches!(d.acquire("db", b), Ok(Reply::LockGranted(_))));
    // Expired: delayed for 5 s of leader-stamped time.
    d.apply(Command::RevokeLease { lease_id: b })
        .result
        .unwrap();
    let Ok(Reply::LockGranted(_)) = acquire_with_delay(&mut d, a, None) else {
        panic!()
    };
    d.apply(Command::ExpireLease { lease_id: a })
        .result
        .unwrap();
    let until = d.sm.lock("db").delay_until_ms.unwrap();
    assert_eq!(until, d.now_ms + 5_000);
    assert_eq!(d.sm.next_timer_ms(), Some(until));
    assert_eq!(
        d.acquire("db", c),
        Err(CoreError::LockHeld {
            holder: None,
            token: None
        })
    );
    let wc = d.wait("db", c);
    d.now_ms += 4_999;
    let out = d.apply(Command::Tick);
    assert!(grants(&out).is_empty());
    d.now_ms += 1;
    let out = d.apply(Command::Tick);
    assert_eq!(grants(&out).len(), 1);
    assert_eq!(grants(&out)[0].3, Some(wc));
    assert_eq!(d.sm.next_timer_ms(), None);
}

#[test]
fn a_cancelled_wait_leaves_the_queue_and_the_next_waiter_is_served() {
    let mut d = Driver::default();
    let (a, b, c) = (d.create_lease(1), d.create_lease(2), d.create_lease(3));
    let g = d.grant("db", a);
    let wb = d.wait("db", b);
    let wc = d.wait("db", c);
    let out = d.apply(Command::CancelWait {
        name: "db".into(),
        waiter: wb,
    });
    assert_eq!(out.result, Ok(Reply::WaitCancelled));
    assert_eq!(
        d.apply(Command::CancelWait {
            name: "db".into(),
            waiter: wb
        })
        .result,
        Err(CoreError::WaiterNotFound)
    );
    let out = d.release("db", a, g.token);
    assert_eq!(grants(&out)[0].3, Some(wc));
    assert!(d.sm.lease(b).unwrap().locks.is_empty());
    assert_eq!(d.sm.lease(b).unwrap().waiting, 0);
}

#[test]
fn a_lease_queued_twice_keeps_one_place() {
    let mut d = Driver::default();
    let (a, b) = (d.create_lease(1), d.create_lease(2));
    d.grant("db", a);
    let first = d.wait("db", b);
    let second = d.wait("db", b);
    assert_eq!(first, second);
    assert_eq!(d.sm.lock("db").waiters, 1);
}

#[test]
fn acquire_without_a_lease_creates_one_that_goes_with_the_lock() {
    let mut d = Driver::default();
    let out = d.apply(Command::Acquire {
        name: "job".into(),
        lease: LeaseRef::New {
            lease_id: lease(7),
            ttl_ms: 2_000,
        },
        holder: Some("cron".into()),
        waiter: None,
        lock_delay_ms: 0,
    });
    let Ok(Reply::LockGranted(g)) = out.result else {
        panic!("{out:?}")
    };
    assert_eq!(
        (g.lease_id, g.ttl_ms, g.holder.as_str()),
        (lease(7), 2_000, "cron")
    );
    assert!(d.sm.lease(lease(7)).unwrap().ephemeral);
    let out = d.release("job", lease(7), g.token);
    assert!(out
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::LeaseEnded { .. })));
    assert!(
        d.sm.lease(lease(7)).is_none(),
        "the lock's own lease went with it"
    );
    // A refused acquire does not leave a lease behind.
    let other = d.create_lease(1);
    d.grant("job", other);
    let before = d.sm.clone();
    let out = d.apply(Command::Acquire {
        name: "job".into(),
        lease: LeaseRef::New {
            lease_id: lease(8),
            ttl_ms: 2_000,
        },
        holder: None,
        waiter: None,
        lock_delay_ms: 0,
    });
    assert!(matches!(out.result, Err(CoreError::LockHeld { .. })));
    assert_eq!(d.sm, before);
}

#[test]
fn bad_commands_are_refused_with_typed_errors_and_change_nothing() {
    let mut d = Driver {
        limits: Limits {
            max_waiters_per_lock: 1,
            max_holdings_per_lease: 2,
            ..Limits::default()
        },
        ..Driver::default()
    };
    let (a, b, c) = (d.create_lease(1), d.create_lease(2), d.create_lease(3));
    d.grant("full", a);
    d.wait("full", b);
    d.grant("x", c);
    d.grant("y", c);
    let acquire =
        |name: &str, lease: LeaseRef, holder: Option<String>, delay: u64| Command::Acquire {
            name: name.into(),
            lease,
            holder,
            waiter: Some(WaiterId(999)),
            lock_delay_ms: delay,
        };
    type Expected = fn(&CoreError) -> bool;
    let cases: Vec<(Command, Expected)> = vec![
        (acquire("", LeaseRef::Existing(a), None, 0), |e| {
            matches!(e, CoreError::InvalidName { .. })
        }),
        (acquire("a//b", LeaseRef::Existing(a), None, 0), |e| {
            matches!(e, CoreError::InvalidName { .. })
        }),
        (acquire("ok", LeaseRef::Existing(lease(42)), None, 0), |e| {
            *e == CoreError::LeaseNotFound
        }),
        (
            acquire(
                "ok",
                LeaseRef::New {
                    lease_id: lease(43),
                    ttl_ms: 10,
                },
                None,
                0,
            ),
            |e| matches!(e, CoreError::InvalidTtl { .. }),
        ),
        (
            acquire(
                "ok",
                LeaseRef::New {
                    lease_id: lease(44),
                    ttl_ms: 99_999_999,
                },
                None,
                0,
            ),
            |e| matches!(e, CoreError::InvalidTtl { .. }),
        ),
        (
            acquire(
                "ok",
                LeaseRef::New {
                    lease_id: a,
                    ttl_ms: 5_000,
                },
                None,
                0,
            ),
            |e| *e == CoreError::LeaseExists,
        ),
        (
            acquire("ok", LeaseRef::Existing(a), Some("h".repeat(257)), 0),
            |e| matches!(e, CoreError::HolderTooLong { .. }),
        ),
        (acquire("ok", LeaseRef::Existing(a), None, 3_600_000), |e| {
            matches!(e, CoreError::InvalidLockDelay { .. })
        }),
        (acquire("full", LeaseRef::Existing(c), None, 0), |e| {
            matches!(e, CoreError::QuotaExceeded { .. })
        }),
        (acquire("z", LeaseRef::Existing(c), None, 0), |e| {
            matches!(e, CoreError::QuotaExceeded { .. })
        }),
        (
            Command::CreateLease {
                lease_id: lease(50),
                ttl_ms: 0,
                holder: String::new(),
            },
            |e| matches!(e, CoreError::InvalidTtl { .. }),
        ),
        (
            Command::CreateLease {
                lease_id: a,
                ttl_ms: 5_000,
                holder: String::new(),
            },
            |e| *e == CoreError::LeaseExists,
        ),
        (
            Command::RevokeLease {
                lease_id: lease(51),
            },
            |e| *e == CoreError::LeaseNotFound,
        ),
        (
            Command::ExpireLease {
                lease_id: lease(51),
            },
            |e| *e == CoreError::LeaseNotFound,
        ),
        (
            Command::CancelWait {
                name: "full".into(),
                waiter: WaiterId(12345),
            },
            |e| *e == CoreError::WaiterNotFound,
        ),
    ];
    for (command, expected) in cases {
        let before = d.sm.clone();
        let out = d.apply(command.clone());
        match &out.result {
            Err(error) => assert!(expected(error), "{command:?} gave {error:?}"),
            Ok(reply) => panic!("{command:?} was accepted: {reply:?}"),
        }
        assert!(out.events.is_empty());
        assert_eq!(d.sm, before, "{command:?} changed state");
    }
}

#[test]
fn tokens_strictly_increase_within_and_across_batches() {
    let mut sm = StateMachine::new();
    let mut requests = Vec::new();
    for n in 0..50u128 {
        requests.push(Request::plain(Command::CreateLease {
            lease_id: lease(n),
            ttl_ms: 5_000,
            holder: String::new(),
        }));
        requests.push(Request::plain(Command::Acquire {
            name: format!("lock-{}", n % 7),
            lease: LeaseRef::Existing(lease(n)),
            holder: None,
            waiter: Some(WaiterId(n as u64)),
            lock_delay_ms: 0,
        }));
    }
    let mut last = 0;
    let mut tokens = Vec::new();
    for round in 0..3u64 {
        let batch = Batch {
            now_ms: round,
            limits: Limits::default(),
            requests: requests.clone(),
        };
        for outcome in sm.apply_batch(&batch, 1) {
            for event in outcome.events {
                assert!(event.revision > last);
                last = event.revision;
                if let EventKind::LockAcquired { grant, .. } = event.kind {
                    assert_eq!(grant.token, event.revision);
                    tokens.push(grant.token);
                }
            }
        }
        // Expire everything so the next round grants again.
        let expire: Vec<_> = (0..50u128)
            .map(|n| Request::plain(Command::ExpireLease { lease_id: lease(n) }))
            .collect();
        let out = sm.apply_batch(
            &Batch {
                now_ms: round,
                limits: Limits::default(),
                requests: expire,
            },
            1,
        );
        for outcome in out {
            for event in outcome.events {
                assert!(event.revision > last);
                last = event.revision;
                if let EventKind::LockAcquired { grant, .. } = event.kind {
                    tokens.push(grant.token);
                }
            }
        }
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]));
    assert!(tokens.len() >= 3 * 50, "{}", tokens.len());
}

/// Regression (found by `tests/it/properties.rs`): a refused acquire of a lock whose
/// lock delay had passed handed that lock to its first waiter, changing state while
/// answering `Err`, and only for that lock. Now every apply first settles every
/// lock whose delay has passed; the refused command itself changes nothing.
#[test]
fn a_refused_acquire_changes_only_what_time_changes() {
    let mut d = Driver::default();
    let (a, b, c) = (d.create_lease(1), d.create_lease(2), d.create_lease(3));
    for name in ["x", "y"] {
        let out = d.apply(Command::Acquire {
            name: name.into(),
            lease: LeaseRef::Existing(a),
            holder: None,
            waiter: None,
            lock_delay_ms: 5_000,
        });
        assert!(matches!(out.result, Ok(Reply::LockGranted(_))), "{out:?}");
    }
    let wb = d.wait("x", b);
    let wc = d.wait("y", c);
    d.apply(Command::ExpireLease { lease_id: a })
        .result
        .unwrap();
    d.now_ms += 5_000;
    let before = d.sm.clone();
    // c tries x without waiting: refused, x goes to b (who was first in line).
    let out = d.acquire("x", c);
    assert_eq!(
        out,
        Err(CoreError::LockHeld {
            holder: Some("holder-2".into()),
            token: Some(d.sm.lock("x").token.unwrap()),
        })
    );
    // Exactly what a Tick at the same moment does: both delayed locks handed on.
    let mut ticked = Driver {
        sm: before,
        now_ms: d.now_ms,
        ..Driver::default()
    };
    let tick = ticked.apply(Command::Tick);
    assert_eq!(d.sm, ticked.sm);
    let expected: Vec<_> = grants(&tick).iter().map(|g| (g.0.clone(), g.3)).collect();
    assert_eq!(
        expected,
        [("x".to_owned(), Some(wb)), ("y".to_owned(), Some(wc))]
    );
    assert_eq!(d.sm.lock("y").token, Some(grants(&tick)[1].2));
    assert_eq!(d.sm.next_timer_ms(), None);
}

#[test]
fn a_lock_whose_delay_passed_is_handed_on_by_the_next_command_of_any_kind() {
    let mut d = Driver::default();
    let (a, b) = (d.create_lease(1), d.create_lease(2));
    d.apply(Command::Acquire {
        name: "db".into(),
        lease: LeaseRef::Existing(a),
        holder: None,
        waiter: None,
        lock_delay_ms: 1_000,
    })
    .result
    .unwrap();
    let wb = d.wait("db", b);
    d.apply(Command::ExpireLease { lease_id: a })
        .result
        .unwrap();
    d.now_ms += 999;
    assert!(grants(&d.apply(Command::Tick)).is_empty());
    d.now_ms += 1;
    // An unrelated command that is refused still carries the time-driven grant.
    let out = d.apply(Command::RevokeLease {
        lease_id: lease(42),
    });
    assert_eq!(out.result, Err(CoreError::LeaseNotFound));
    assert_eq!(grants(&out), [("db".into(), b, out.revision, Some(wb))]);
}

// Leases and principals (auth on): a lease belongs to the principal that created
// it, and nobody else can act through it or replay its idempotent answers.

fn as_principal(principal: &str, command: Command) -> Command {
    command.by(Some(principal))
}

#[test]
fn a_lease_serves_only_the_principal_that_created_it() {
    let mut d = Driver::default();
    let alice = lease(1);
    let created = d.apply(as_principal(
        "alice",
        Command::CreateLease {
            lease_id: alice,
            ttl_ms: 10_000,
            holder: "alice-worker".into(),
        },
    ));
    assert!(created.result.is_ok(), "{created:?}");
    let acquire = |principal: &str| {
        as_principal(
            principal,
            Command::Acquire {
                name: "db".into(),
                lease: LeaseRef::Existing(alice),
                holder: None,
                waiter: None,
                lock_delay_ms: 0,
            },
        )
    };
    let before = d.sm.revision();
    let stolen = d.apply(acquire("mallory"));
    assert_eq!(stolen.result, Err(CoreError::LeaseNotOwned));
    assert_eq!(d.sm.revision(), before, "a refused command changes nothing");
    assert_eq!(d.sm.lock("db").holder, None);
    let granted = d.apply(acquire("alice"));
    let Ok(Reply::LockGranted(grant)) = granted.result else {
        panic!("the owner is granted: {granted:?}");
    };
    for command in [
        Command::Release {
            name: "db".into(),
            lease_id: alice,
            token: grant.token,
        },
        Command::RevokeLease { lease_id: alice },
    ] {
        let out = d.apply(as_principal("mallory", command));
        assert_eq!(out.result, Err(CoreError::LeaseNotOwned));
    }
    assert_eq!(d.sm.lock("db").token, Some(grant.token), "still held");
    assert_eq!(
        d.sm.check_lease_owner(alice, Some("mallory")),
        Err(CoreError::LeaseNotOwned)
    );
    assert_eq!(d.sm.check_lease_owner(alice, Some("alice")), Ok(()));

    // Revoked by its owner, the lease's ownership goes with it.
    let revoked = d.apply(as_principal(
        "alice",
        Command::RevokeLease { lease_id: alice },
    ));
    assert!(revoked.result.is_ok(), "{revoked:?}");
    assert_eq!(d.sm.check_lease_owner(alice, Some("mallory")), Ok(()));
    let restored = StateMachine::from_snapshot(&d.sm.to_snapshot()).unwrap();
    assert_eq!(restored, d.sm, "no owner left behind for the revoked lease");
}

#[test]
fn an_ephemeral_lease_belongs_to_its_creator_and_survives_a_snapshot() {
    let mut d = Driver::default();
    let id = lease(7);
    let out = d.apply(as_principal(
        "alice",
        Command::Register {
            name: "svc/a".into(),
            lease: LeaseRef::New {
                lease_id: id,
                ttl_ms: 10_000,
            },
            holder: Some("a".into()),
            value: "1".into(),
        },
    ));
    assert!(out.result.is_ok(), "{out:?}");
    let restored = StateMachine::from_snapshot(&d.sm.to_snapshot()).unwrap();
    assert_eq!(
        restored.check_lease_owner(id, Some("bob")),
        Err(CoreError::LeaseNotOwned)
    );
    let theft = d.apply(as_principal(
        "bob",
        Command::Unregister {
            name: "svc/a".into(),
            lease_id: id,
        },
    ));
    assert_eq!(theft.result, Err(CoreError::LeaseNotOwned));
    assert!(d.sm.name("svc/a").is_some());
}

#[test]
fn an_idempotent_answer_is_never_replayed_to_another_principal() {
    let mut d = Driver::default();
    let keyed = |principal: &str, lease_id: u128| Request {
        idempotency: Some(baton_core::IdempotencyKey {
            principal: principal.into(),
            key: "same-key".into(),
            fingerprint: 42,
        }),
        command: as_principal(
            principal,
            Command::CreateLease {
                lease_id: lease(lease_id),
                ttl_ms: 10_000,
                holder: "h".into(),
            },
        ),
    };
    let first = d.apply_request(keyed("alice", 1));
    let replay = d.apply_request(keyed("alice", 2));
    assert!(replay.replayed);
    assert_eq!(replay.result, first.result);
    let other = d.apply_request(keyed("bob", 3));
    assert!(!other.replayed, "bob gets his own answer");
    let Ok(Reply::LeaseCreated(LeaseCreated { lease_id, .. })) = other.result else {
        panic!("{other:?}");
    };
    assert_eq!(lease_id, lease(3));
}

// Admission quotas (issue 16): caps stamped into `Command::Within`.

fn tight() -> Quota {
    Quota {
        max_leases: 5,
        max_leases_per_principal: 2,
        max_holdings_per_principal: 3,
        max_waiters_per_principal: 1,
        max_idempotency_keys_per_principal: 2,
    }
}

fn by(principal: Option<&str>, command: Command) -> Command {
    command.within(principal, tight())
}

fn new_lease(n: u128) -> Command {
    Command::CreateLease {
        lease_id: lease(n),
        ttl_ms: 10_000,
        holder: format!("holder-{n}"),
    }
}

fn acquire_on(name: &str, n: u128, waiter: Option<WaiterId>) -> Command {
    Command::Acquire {
        name: name.to_owned(),
        lease: LeaseRef::Existing(lease(n)),
        holder: None,
        waiter,
        lock_delay_ms: 0,
    }
}

fn quota_limit(outcome: &Outcome) -> Option<u64> {
    match &outcome.result {
        Err(CoreError::QuotaReached { limit, .. }) => Some(*limit),
        _ => None,
    }
}

#[test]
fn a_principal_owns_at_most_its_lease_quota_and_the_cluster_its_total() {
    let mut d = Driver::default();
    for n in 1..=2 {
        let out = d.apply(by(Some("a"), new_lease(n)));
        assert!(out.result.is_ok(), "{out:?}");
    }
    let before = d.sm.to_snapshot();
    let refused = d.apply(by(Some("a"), new_lease(3)));
    assert_eq!(quota_limit(&refused), Some(2), "{refused:?}");
    assert_eq!(d.sm.to_snapshot(), before, "a refusal changes nothing");
    // An acquire that would create its own lease counts too.
    let refused = d.apply(by(
        Some("a"),
        Command::Acquire {
            name: "x".into(),
            lease: LeaseRef::New {
                lease_id: lease(9),
                ttl_ms: 10_000,
            },
            holder: None,
            waiter: None,
            lock_delay_ms: 0,
        },
    ));
    assert_eq!(quota_limit(&refused), Some(2));
    // Another principal has its own count; the cluster-wide cap counts everyone,
    // owned or not.
    assert!(d.apply(by(Some("b"), new_lease(3))).result.is_ok());
    assert!(d.apply(by(None, new_lease(4))).result.is_ok());
    assert!(d.apply(new_lease(5)).result.is_ok(), "unwrapped: no quota");
    let refused = d.apply(by(Some("b"), new_lease(6)));
    assert_eq!(quota_limit(&refused), Some(5), "{refused:?}");
    let refused = d.apply(by(None, new_lease(6)));
    assert_eq!(quota_limit(&refused), Some(5));
    // Ending a lease frees its place.
    assert!(d
        .apply(Command::RevokeLease { lease_id: lease(1) })
        .result
        .is_ok());
    assert_eq!(d.sm.principal_usage("a").leases, 1);
    assert!(d.apply(by(Some("a"), new_lease(6))).result.is_ok());
    assert!(d.sm.usage_is_consistent());
}

#[test]
fn holdings_and_waiters_are_capped_per_principal() {
    let mut d = Driver::default();
    assert!(d.apply(by(Some("a"), new_lease(1))).result.is_ok());
    assert!(d.apply(by(Some("b"), new_lease(2))).result.is_ok());
    let mut first_token = None;
    for name in ["l1", "l2", "l3"] {
        let out = d.apply(by(Some("a"), acquire_on(name, 1, None)));
        match out.result {
            Ok(Reply::LockGranted(grant)) => {
                first_token.get_or_insert(grant.token);
            }
            other => panic!("{other:?}"),
        }
    }
    let refused = d.apply(by(Some("a"), acquire_on("l4", 1, None)));
    assert_eq!(quota_limit(&refused), Some(3), "{refused:?}");
    let usage = d.sm.principal_usage("a");
    assert_eq!((usage.leases, usage.holdings, usage.waiters), (1, 3, 0));

    // b queues once behind a's lock; a second wait is refused.
    let waiter = d.new_waiter();
    let queued = d.apply(by(Some("b"), acquire_on("l1", 2, Some(waiter))));
    assert!(
        matches!(queued.result, Ok(Reply::LockQueued { .. })),
        "{queued:?}"
    );
    let waiter = d.new_waiter();
    let refused = d.apply(by(Some("b"), acquire_on("l2", 2, Some(waiter))));
    assert_eq!(quota_limit(&refused), Some(1), "{refused:?}");
    // When a releases, b's wait becomes a holding: counted as such.
    let released = d.release("l1", lease(1), first_token.unwrap());
    assert!(released.result.is_ok(), "{released:?}");
    let usage = d.sm.principal_usage("b");
    assert_eq!((usage.holdings, usage.waiters), (1, 0));
    assert_eq!(d.sm.principal_usage("a").holdings, 2);
    assert!(d.sm.usage_is_consistent());
    // A restored snapshot has the same counts.
    let restored = StateMachine::from_snapshot(&d.sm.to_snapshot()).unwrap();
    assert_eq!(restored.principal_usage("b"), d.sm.principal_usage("b"));
    assert!(restored == d.sm);
}

#[test]
fn idempotency_keys_are_capped_per_principal_and_replays_still_answer() {
    let mut d = Driver::default();
    let keyed = |d: &mut Driver, principal: &str, key: &str, n: u128| {
        d.apply_request(Request {
            idempotency: Some(IdempotencyKey {
                principal: principal.to_owned(),
                key: key.to_owned(),
                fingerprint: n as u64,
            }),
            command: by(Some(principal), new_lease(n)),
        })
    };
    assert!(keyed(&mut d, "a", "k1", 1).result.is_ok());
    assert!(keyed(&mut d, "a", "k2", 2).result.is_ok());
    let refused = keyed(&mut d, "a", "k3", 3);
    assert_eq!(quota_limit(&refused), Some(2), "{refused:?}");
    let replay = keyed(&mut d, "a", "k1", 1);
    assert!(replay.replayed && replay.result.is_ok(), "{replay:?}");
    assert!(
        keyed(&mut d, "b", "k1", 4).result.is_ok(),
        "b has its own count"
    );
    // Keys are forgotten after their retention, and then count no more.
    d.now_ms += baton_core::IDEMPOTENCY_RETENTION_MS + 1;
    assert!(d
        .apply(Command::RevokeLease { lease_id: lease(1) })
        .result
        .is_ok());
    assert!(keyed(&mut d, "a", "k3", 3).result.is_ok());
}

#[test]
fn updating_ones_own_name_is_not_a_new_holding() {
    let mut d = Driver::default();
    assert!(d.apply(by(Some("a"), new_lease(1))).result.is_ok());
    for name in ["n1", "l1", "l2"] {
        let command = if name.starts_with('n') {
            Command::Register {
                name: name.into(),
                lease: LeaseRef::Existing(lease(1)),
                holder: None,
                value: "1".into(),
            }
        } else {
            acquire_on(name, 1, None)
        };
        assert!(d.apply(by(Some("a"), command)).result.is_ok());
    }
    let update = d.apply(by(
        Some("a"),
        Command::Register {
            name: "n1".into(),
            lease: LeaseRef::Existing(lease(1)),
            holder: None,
            value: "2".into(),
        },
    ));
    assert!(update.result.is_ok(), "{update:?}");
}

#[test]
fn a_retry_at_the_cap_gets_its_answer_and_quota_refusals_are_not_remembered() {
    let mut d = Driver::default();
    assert!(d.apply(by(Some("a"), new_lease(1))).result.is_ok());
    let mut tokens = Vec::new();
    for name in ["l1", "l2", "l3"] {
        match d.apply(by(Some("a"), acquire_on(name, 1, None))).result {
            Ok(Reply::LockGranted(grant)) => tokens.push(grant.token),
            other => panic!("{other:?}"),
        }
    }
    // At the holdings cap, acquiring a lock the lease already holds is a retry:
    // it answers the same grant instead of 429.
    match d.apply(by(Some("a"), acquire_on("l1", 1, None))).result {
        Ok(Reply::LockGranted(grant)) => assert_eq!(grant.token, tokens[0]),
        other => panic!("a retry at the cap: {other:?}"),
    }
    // A keyed acquire refused by the cap is not remembered: once a holding is
    // released, the same key is granted.
    let keyed = |d: &mut Driver| {
        d.apply_request(Request {
            idempotency: Some(IdempotencyKey {
                principal: "a".into(),
                key: "k".into(),
                fingerprint: 7,
            }),
            command: by(Some("a"), acquire_on("l4", 1, None)),
        })
    };
    let refused = keyed(&mut d);
    assert_eq!(quota_limit(&refused), Some(3), "{refused:?}");
    assert!(d.release("l2", lease(1), tokens[1]).result.is_ok());
    let granted = keyed(&mut d);
    assert!(
        matches!(granted.result, Ok(Reply::LockGranted(_))) && !granted.replayed,
        "{granted:?}"
    );
}

#[test]
fn with_auth_off_idempotency_keys_are_not_capped() {
    let mut d = Driver::default();
    for n in 1..=5u128 {
        let out = d.apply_request(Request {
            idempotency: Some(IdempotencyKey {
                principal: String::new(),
                key: format!("k{n}"),
                fingerprint: n as u64,
            }),
            command: by(None, new_lease(n)),
        });
        assert!(out.result.is_ok(), "key {n}: {out:?}");
    }
}
