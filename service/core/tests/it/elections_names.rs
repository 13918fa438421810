//! Election, name registry, idempotency and snapshot rules.

use baton_core::{
    Command, CoreError, EndReason, EventKind, LeaseId, LeaseRef, NameRegistered, Proclaimed, Reply,
    StateMachine, WaiterId, IDEMPOTENCY_RETENTION_MS, LEASE_TTL_BOUNDS_S, SNAPSHOT_FORMAT,
};

use crate::legacy_script;
use crate::support::{lease, Driver};

fn campaign(d: &mut Driver, name: &str, l: LeaseId, candidate: &str, wait: bool) -> Reply {
    let waiter = wait.then(|| d.new_waiter());
    d.apply(Command::Campaign {
        name: name.into(),
        lease: LeaseRef::Existing(l),
        candidate: candidate.into(),
        value: format!("\"{candidate}:8080\""),
        waiter,
    })
    .result
    .unwrap()
}

fn register(d: &mut Driver, name: &str, l: LeaseId, value: &str) -> Result<Reply, CoreError> {
    d.apply(Command::Register {
        name: name.into(),
        lease: LeaseRef::Existing(l),
        holder: None,
        value: value.into(),
    })
    .result
}

#[test]
fn an_election_leader_resigns_with_two_candidates_queued() {
    let mut d = Driver::default();
    let (a, b, c) = (d.create_lease(1), d.create_lease(2), d.create_lease(3));
    let Reply::Elected { grant, value } = campaign(&mut d, "leader", a, "a", true) else {
        panic!()
    };
    assert_eq!(value, "\"a:8080\"");
    let Reply::CampaignQueued {
        waiter: wb, leader, ..
    } = campaign(&mut d, "leader", b, "b", true)
    else {
        panic!()
    };
    assert_eq!(leader.as_deref(), Some("a"));
    let Reply::CampaignQueued { waiter: wc, .. } = campaign(&mut d, "leader", c, "c", true) else {
        panic!()
    };
    assert_eq!(d.sm.election("leader").unwrap().candidates, 2);

    let out = d.apply(Command::Resign {
        name: "leader".into(),
        lease_id: a,
        token: grant.token,
    });
    assert_eq!(out.result, Ok(Reply::Resigned));
    let elected: Vec<_> = out
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Elected { grant, waiter, .. } => {
                Some((grant.holder.clone(), *waiter, grant.token, e.revision))
            }
            _ => None,
        })
        .collect();
    assert_eq!(elected.len(), 1);
    assert_eq!((elected[0].0.as_str(), elected[0].1), ("b", Some(wb)));
    assert_eq!(
        elected[0].2, elected[0].3,
        "the leader's token is its election revision"
    );
    let view = d.sm.election("leader").unwrap();
    let leader = view.leader.unwrap();
    assert_eq!(
        (leader.candidate.as_str(), leader.value.as_str()),
        ("b", "\"b:8080\"")
    );
    assert_eq!(view.candidates, 1);

    // The old leader's token no longer works.
    assert_eq!(
        d.apply(Command::Proclaim {
            name: "leader".into(),
            lease_id: a,
            token: grant.token,
            value: "1".into()
        })
        .result,
        Err(CoreError::NotLeader)
    );
    // The new leader proclaims; the token stays, the revision moves.
    let out = d.apply(Command::Proclaim {
        name: "leader".into(),
        lease_id: b,
        token: leader.token,
        value: "\"b:9090\"".into(),
    });
    assert!(
        matches!(out.result, Ok(Reply::Proclaimed(Proclaimed { token, .. })) if token == leader.token)
    );
    let after = d.sm.election("leader").unwrap().leader.unwrap();
    assert_eq!(
        (after.token, after.value.as_str()),
        (leader.token, "\"b:9090\"")
    );
    assert!(after.since_revision > leader.since_revision);

    // b's lease expires: c is elected.
    let out = d.apply(Command::ExpireLease { lease_id: b });
    assert!(out.events.iter().any(|e| matches!(
        &e.kind,
        EventKind::LeaderEnded {
            reason: EndReason::Expired,
            ..
        }
    )));
    assert!(out
        .events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::Elected { waiter: Some(w), .. } if *w == wc)));
    assert_eq!(
        d.sm.election("leader").unwrap().leader.unwrap().candidate,
        "c"
    );
}

#[test]
fn a_campaign_without_wait_fails_when_someone_leads() {
    let mut d = Driver::default();
    let (a, b) = (d.create_lease(1), d.create_lease(2));
    let Reply::Elected { grant, .. } = campaign(&mut d, "e", a, "a", false) else {
        panic!()
    };
    let out = d.apply(Command::Campaign {
        name: "e".into(),
        lease: LeaseRef::Existing(b),
        candidate: "b".into(),
        value: "null".into(),
        waiter: None,
    });
    assert_eq!(
        out.result,
        Err(CoreError::NotElected {
            leader: Some("a".into()),
            token: Some(grant.token)
        })
    );
    // The leader campaigning again keeps its term.
    let Reply::Elected { grant: again, .. } = campaign(&mut d, "e", a, "a", false) else {
        panic!()
    };
    assert_eq!(again.token, grant.token);
    // A cancelled candidacy leaves the queue.
    let Reply::CampaignQueued { waiter, .. } = campaign(&mut d, "e", b, "b", true) else {
        panic!()
    };
    assert_eq!(
        d.apply(Command::CancelCampaign {
            name: "e".into(),
            waiter
        })
        .result,
        Ok(Reply::WaitCancelled)
    );
    assert_eq!(d.sm.election("e").unwrap().candidates, 0);
    assert_eq!(
        d.apply(Command::CancelCampaign {
            name: "e".into(),
            waiter
        })
        .result,
        Err(CoreError::WaiterNotFound)
    );
    d.apply(Command::Resign {
        name: "e".into(),
        lease_id: a,
        token: grant.token,
    })
    .result
    .unwrap();
    assert!(d.sm.election("e").is_none());
}

#[test]
fn names_are_registered_once_and_re_registration_keeps_the_token() {
    let mut d = Driver::default();
    let (a, b) = (d.create_lease(1), d.create_lease(2));
    let Ok(Reply::NameRegistered(NameRegistered {
        grant,
        created: true,
        ..
    })) = register(&mut d, "svc/db", a, "1")
    else {
        panic!()
    };
    assert_eq!(
        register(&mut d, "svc/db", b, "2"),
        Err(CoreError::NameTaken {
            holder: "holder-1".into(),
            token: grant.token
        })
    );
    let Ok(Reply::NameRegistered(NameRegistered {
        grant: again,
        created: false,
        value,
    })) = register(&mut d, "svc/db", a, "{\"v\":2}")
    else {
        panic!()
    };
    assert_eq!(again.token, grant.token);
    assert_eq!(value, "{\"v\":2}");
    let view = d.sm.name("svc/db").unwrap();
    assert_eq!(
        (view.token, view.value.as_str()),
        (grant.token, "{\"v\":2}")
    );
    assert!(view.since_revision > view.token);
    assert_eq!(
        d.apply(Command::Unregister {
            name: "svc/db".into(),
            lease_id: b
        })
        .result,
        Err(CoreError::NotOwner)
    );
    assert_eq!(
        d.apply(Command::Unregister {
            name: "nope".into(),
            lease_id: a
        })
        .result,
        Err(CoreError::NotFound)
    );
    assert_eq!(
        d.apply(Command::Unregister {
            name: "svc/db".into(),
            lease_id: a
        })
        .result,
        Ok(Reply::NameUnregistered)
    );
    assert!(d.sm.name("svc/db").is_none());
    assert!(d.sm.lease(a).unwrap().names.is_empty());
}

#[test]
fn names_list_by_prefix_with_paging() {
    let mut d = Driver::default();
    let a = d.create_lease(1);
    for name in ["a/1", "a/2", "a/3", "a/4", "b/1", "a0"] {
        register(&mut d, name, a, "null").unwrap();
    }
    let page1 = d.sm.names("a/", None, 3);
    let names1: Vec<_> = page1.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names1, ["a/1", "a/2", "a/3"]);
    let page2 = d.sm.names("a/", Some("a/3"), 3);
    let names2: Vec<_> = page2.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names2, ["a/4"]);
    assert_eq!(d.sm.names("", None, 100).len(), 6);
    assert_eq!(d.sm.names("c", None, 100).len(), 0);
    // Lease expiry unregisters everything.
    let out = d.apply(Command::ExpireLease { lease_id: a });
    let Ok(Reply::LeaseClosed(released)) = out.result else {
        panic!()
    };
    assert_eq!(released.names, ["a/1", "a/2", "a/3", "a/4", "a0", "b/1"]);
    assert!(d.sm.names("", None, 100).is_empty());
}

#[test]
fn values_over_the_limit_are_refused() {
    let mut d = Driver::default();
    let a = d.create_lease(1);
    let big = format!("\"{}\"", "x".repeat(4096));
    assert!(matches!(
        register(&mut d, "n", a, &big),
        Err(CoreError::ValueTooLarge {
            size: 4098,
            max: 4096
        })
    ));
    let out = d.apply(Command::Campaign {
        name: "e".into(),
        lease: LeaseRef::Existing(a),
        candidate: "a".into(),
        value: big,
        waiter: None,
    });
    assert!(matches!(out.result, Err(CoreError::ValueTooLarge { .. })));
}

#[test]
fn an_idempotent_retry_returns_the_first_answer_without_applying_again() {
    let mut d = Driver::default();
    let create = Command::CreateLease {
        lease_id: lease(1),
        ttl_ms: 5_000,
        holder: "x".into(),
    };
    let first = d.keyed("k1", 42, create.clone());
    let revision = d.sm.revision();
    // The same key, with a command that would otherwise fail (lease exists).
    let retry = d.keyed("k1", 42, create.clone());
    assert!(retry.replayed);
    assert_eq!(retry.result, first.result);
    assert!(retry.events.is_empty());
    assert_eq!(d.sm.revision(), revision);
    // Same key, different request.
    let reused = d.keyed("k1", 43, Command::RevokeLease { lease_id: lease(1) });
    assert_eq!(reused.result, Err(CoreError::IdempotencyKeyReused));
    assert!(d.sm.lease(lease(1)).is_some());
    // After the retention period the key is forgotten.
    d.now_ms += IDEMPOTENCY_RETENTION_MS;
    let later = d.keyed("k1", 42, create);
    assert!(!later.replayed);
    assert_eq!(later.result, Err(CoreError::LeaseExists));
}

#[test]
fn a_keyed_wait_records_its_final_answer() {
    let mut d = Driver::default();
    let (a, b) = (d.create_lease(1), d.create_lease(2));
    let g = d.grant("db", a);
    let acquire = Command::Acquire {
        name: "db".into(),
        lease: LeaseRef::Existing(b),
        holder: None,
        waiter: Some(WaiterId(77)),
        lock_delay_ms: 0,
    };
    let first = d.keyed("wait-1", 1, acquire.clone());
    assert!(matches!(
        first.result,
        Ok(Reply::LockQueued {
            waiter: WaiterId(77),
            ..
        })
    ));
    let still_waiting = d.keyed("wait-1", 1, acquire.clone());
    assert_eq!(still_waiting.result, first.result);
    d.release("db", a, g.token).result.unwrap();
    let granted = d.keyed("wait-1", 1, acquire);
    let Ok(Reply::LockGranted(grant)) = granted.result else {
        panic!("{granted:?}")
    };
    assert_eq!(grant.lease_id, b);
    assert!(granted.replayed);
}

#[test]
fn snapshot_restores_an_identical_state() {
    let mut d = Driver::default();
    let (a, b) = (d.create_lease(1), d.create_lease(2));
    let g = d.grant("db", a);
    d.wait("db", b);
    register(&mut d, "svc", a, "[1,2]").unwrap();
    campaign(&mut d, "e", b, "b", false);
    d.keyed("k", 1, Command::Tick);
    let bytes = d.sm.to_snapshot();
    assert_eq!(bytes[0], SNAPSHOT_FORMAT);
    let restored = StateMachine::from_snapshot(&bytes).unwrap();
    assert_eq!(restored, d.sm);
    // It behaves the same afterwards.
    let mut twin = Driver {
        sm: restored,
        ..Driver::default()
    };
    let out1 = d.release("db", a, g.token);
    let out2 = twin.release("db", a, g.token);
    assert_eq!(out1, out2);
    assert_eq!(twin.sm, d.sm);
}

#[test]
fn leases_are_counted_by_ttl_as_they_come_and_go_and_after_a_restore() {
    let mut d = Driver::default();
    let ttl_counts = |sm: &StateMachine| sm.lease_ttl_counts().counts().to_vec();
    let bucket = |seconds: u64| {
        LEASE_TTL_BOUNDS_S
            .iter()
            .position(|&s| s == seconds)
            .unwrap()
    };
    let bucket_of_10_s = bucket(15);
    let (a, _b) = (d.create_lease(1), d.create_lease(2));
    // An ephemeral lease, made by the acquire itself, counts too.
    let out = d.apply(Command::Acquire {
        name: "db".into(),
        lease: LeaseRef::New {
            lease_id: lease(3),
            ttl_ms: 3_600_000,
        },
        holder: Some("h".into()),
        waiter: None,
        lock_delay_ms: 0,
    });
    assert!(out.result.is_ok(), "{out:?}");
    let mut expected = vec![0; LEASE_TTL_BOUNDS_S.len() + 1];
    expected[bucket_of_10_s] = 2;
    expected[bucket(3600)] = 1;
    assert_eq!(ttl_counts(&d.sm), expected);
    d.apply(Command::RevokeLease { lease_id: a })
        .result
        .unwrap();
    expected[bucket_of_10_s] = 1;
    assert_eq!(ttl_counts(&d.sm), expected);
    let restored = StateMachine::from_snapshot(&d.sm.to_snapshot()).unwrap();
    assert_eq!(ttl_counts(&restored), expected);
    assert!(restored.counts_are_consistent());
}

#[test]
fn the_first_cluster_id_stands_and_survives_snapshots() {
    let mut d = Driver::default();
    let holder = d.create_lease(1);
    d.grant("before-id", holder);
    assert_eq!(d.sm.cluster_id(), None);
    let revision = d.sm.revision();
    let first = d.apply(Command::SetClusterId {
        cluster_id: "first".into(),
    });
    let second = d.apply(Command::SetClusterId {
        cluster_id: "second".into(),
    });
    for outcome in [&first, &second] {
        assert_eq!(
            outcome.result,
            Ok(Reply::ClusterId {
                cluster_id: "first".into()
            })
        );
    }
    assert_eq!(d.sm.revision(), revision, "metadata, not a state change");
    let twin = StateMachine::from_snapshot(&d.sm.to_snapshot()).expect("restores");
    assert_eq!(twin.cluster_id(), Some("first"));
}

/// A snapshot an older build wrote (`data/`, see `legacy_script.rs`),
/// embedded at compile time: a path compiled in through CARGO_MANIFEST_DIR
/// names whichever clone built the binary, and a target directory shared by
/// two clones reuses it.
fn fixture(file: &str) -> Vec<u8> {
    match file {
        "format3.snapshot" => include_bytes!("data/format3.snapshot").to_vec(),
        "format3-bare.snapshot" => include_bytes!("data/format3-bare.snapshot").to_vec(),
        "format4-1ff32c1.snapshot" => include_bytes!("data/format4-1ff32c1.snapshot").to_vec(),
        other => panic!("no fixture {other}"),
    }
}

/// The legacy history, then a lock whose name is longer than the 24 bytes a
/// slot name keeps inline, so both ways a name is stored are in the snapshot.
fn format4_history() -> StateMachine {
    let mut sm = legacy_script::replay(false);
    let ctx = baton_core::ApplyContext {
        now_ms: 2_000_000,
        limits: baton_core::Limits::default(),
        term: 1,
    };
    let outcome = sm.apply(
        &ctx,
        &baton_core::Request::plain(Command::Acquire {
            name: "a-lock-name-longer-than/twenty-four-bytes".into(),
            lease: LeaseRef::Existing(lease(2)),
            holder: None,
            waiter: None,
            lock_delay_ms: 0,
        }),
    );
    assert!(outcome.result.is_ok(), "{outcome:?}");
    sm
}

/// `data/format4-1ff32c1.snapshot` is what the last build that kept slot names
/// as `String` (1ff32c1) wrote for `format4_history`: today's build, whose slot
/// names are `CompactString`, reads it into the same state and writes the same
/// state to the same bytes, so nodes of both builds exchange snapshots.
#[test]
fn a_format_4_snapshot_of_the_string_keyed_build_reads_back_and_is_written_alike() {
    let bytes = fixture("format4-1ff32c1.snapshot");
    assert_eq!(bytes[0], 4, "written by a format-4 build");
    let state = format4_history();
    assert_eq!(StateMachine::from_snapshot(&bytes).unwrap(), state);
    assert_eq!(state.to_snapshot(), bytes);
}

#[test]
fn a_format_3_snapshot_reads_into_the_state_it_described() {
    let bytes = fixture("format3.snapshot");
    assert_eq!(bytes[0], 3, "written by a format-3 build");
    let restored = StateMachine::from_snapshot(&bytes).expect("format 3 still reads");
    let replayed = legacy_script::replay(false);
    assert_eq!(restored, replayed);
    assert_eq!(restored.cluster_id(), Some("c0ffee"));
    let queued = restored.lock("db/migrate");
    assert_eq!((queued.holders.len(), queued.waiters), (1, 1));
    assert!(restored.lock("cache").delay_until_ms.is_some());
    // And it goes on exactly like a state that was never stored.
    let mut twin = Driver {
        sm: restored,
        ..Driver::default()
    };
    let mut same = Driver {
        sm: replayed,
        ..Driver::default()
    };
    twin.now_ms = 2_100_000;
    same.now_ms = 2_100_000;
    for d in [&mut twin, &mut same] {
        d.apply(Command::Tick);
        d.apply(Command::ExpireLease {
            lease_id: legacy_lease(2),
        });
    }
    assert_eq!(twin.sm, same.sm);
    assert_eq!(twin.sm.to_snapshot()[0], SNAPSHOT_FORMAT);
}

fn legacy_lease(n: u128) -> baton_core::LeaseId {
    baton_core::LeaseId(n)
}

#[test]
fn formats_1_and_2_read_as_format_3_without_its_trailing_fields() {
    // Format 1 lacked `cluster_id` and `lease_owners`, format 2 `lease_owners`:
    // the bare fixture has neither (`None` and an empty map, a zero byte each).
    let mut format2 = fixture("format3-bare.snapshot");
    assert_eq!(
        format2.pop(),
        Some(0),
        "empty lease_owners is the last byte"
    );
    format2[0] = 2;
    let mut format1 = format2.clone();
    assert_eq!(format1.pop(), Some(0), "cluster_id None comes before it");
    format1[0] = 1;
    let bare = legacy_script::replay(true);
    for bytes in [format1, format2] {
        let restored = StateMachine::from_snapshot(&bytes).expect("still reads");
        assert_eq!(restored, bare);
    }
}

#[test]
fn snapshots_of_unknown_formats_or_garbage_are_refused() {
    assert!(StateMachine::from_snapshot(&[]).is_err());
    assert!(StateMachine::from_snapshot(&[99, 0, 0]).is_err());
    assert!(StateMachine::from_snapshot(&[SNAPSHOT_FORMAT, 0xff, 0xff, 0xff]).is_err());
}
