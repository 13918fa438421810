//! Histories of the bugs the harness found, cut from real runs (JSON lines as
//! written to `history.jsonl`), kept so that the checkers keep catching them.
//! RELIABILITY.md lists each with its seed and command.

use baton_chaos::check::{
    check_exclusive, check_lease_expiry, check_linearizable, LinearizableConfig,
};
use baton_chaos::history::{pair, Event, Op};

fn ops(jsonl: &str) -> Vec<Op> {
    let events: Vec<Event> = jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("history line"))
        .collect();
    pair(&events, u64::MAX)
}

/// Bug 1 (seed 2, `--faults kill,pause,partition`, 3 nodes): node 1, cut off from
/// the others by an isolate-leader partition, answered a keepalive for a lease the
/// new leader had created half a second earlier with a definite 404
/// `lease_not_found` instead of 503: it looked the lease up in its stale replica
/// before confirming its leadership.
const STALE_KEEPALIVE_404: &str = r#"
{"op":192,"process":5,"type":"invoke","f":"campaign","key":"chaos-election-0","time_ns":8559050014,"holder":"p5-s11","ttl_ms":1500,"node":2}
{"op":192,"process":5,"type":"ok","f":"campaign","key":"chaos-election-0","time_ns":8579184703,"lease":"fsxuh34hddhhai4dbq5mkijod4","token":94}
{"op":200,"process":5,"type":"invoke","f":"keepalive","key":"chaos-election-0","time_ns":9019996261,"lease":"fsxuh34hddhhai4dbq5mkijod4","holder":"p5-s11","ttl_ms":1500,"node":1}
{"op":200,"process":5,"type":"fail","f":"keepalive","key":"chaos-election-0","time_ns":9020326132,"error":"lease_not_found"}
"#;

#[test]
fn a_partitioned_node_denying_a_live_lease_is_caught() {
    let v = check_lease_expiry(&ops(STALE_KEEPALIVE_404));
    assert!(v.failed(), "{v:?}");
    assert_eq!(v.violations, 1);
}

/// Bug 2 (seed 6, `--faults pause`, 3 nodes): the leader was SIGSTOPped while a
/// renew forwarded to it waited; on SIGCONT it acknowledged the renew (200 at
/// 15.887 s) and yet expired the lease right after, granting the lock to another
/// client at 16.035 s, within 1.5 s TTL of the renew's sending (14.784 s): an
/// acknowledged keepalive raced with an expiry the resumed leader had already
/// decided.
const RENEW_ACKED_THEN_EXPIRED: &str = r#"
{"op":274,"process":1,"type":"invoke","f":"acquire","key":"chaos-lock-1","time_ns":13907032748,"holder":"p1-s10","ttl_ms":1500,"node":2}
{"op":274,"process":1,"type":"ok","f":"acquire","key":"chaos-lock-1","time_ns":13910575561,"lease":"e7iim263yh43nqbctqgdzycrcu","token":220}
{"op":307,"process":1,"type":"invoke","f":"renew","key":"chaos-lock-1","time_ns":14783508152,"lease":"e7iim263yh43nqbctqgdzycrcu","token":220,"holder":"p1-s10","ttl_ms":1500,"node":3}
{"op":307,"process":1,"type":"ok","f":"renew","key":"chaos-lock-1","time_ns":15886792568}
{"op":320,"process":2,"type":"invoke","f":"acquire","key":"chaos-lock-1","time_ns":16033102686,"holder":"p2-s16","ttl_ms":1500,"node":2}
{"op":320,"process":2,"type":"ok","f":"acquire","key":"chaos-lock-1","time_ns":16035361578,"lease":"skkneur37eaz7qofj646cmwupe","token":238}
"#;

#[test]
fn a_renew_acknowledged_then_expired_early_is_caught() {
    let h = ops(RENEW_ACKED_THEN_EXPIRED);
    let v = check_exclusive(&h);
    assert!(v.failed(), "{v:?}");
    let lin = check_linearizable(&h, &LinearizableConfig::default());
    assert!(lin.failed(), "{lin:?}");
}

/// The same bug seen by the linearizability checker only (seed 6): p8's renew
/// (12.398..13.528 s) and p3's grant with a larger token (12.028..13.532 s)
/// both succeed; no order of the two is valid with a 1.5 s TTL.
const RENEW_AND_GRANT_BOTH_OK: &str = r#"
{"op":255,"process":8,"type":"invoke","f":"acquire","key":"chaos-lock-1","time_ns":11630074988,"holder":"p8-s7","ttl_ms":1500,"node":3}
{"op":255,"process":8,"type":"ok","f":"acquire","key":"chaos-lock-1","time_ns":11887847787,"lease":"zjqh5umtqsl2p36jrpihu2oxcu","token":198}
{"op":259,"process":3,"type":"invoke","f":"acquire","key":"chaos-lock-1","time_ns":12027680724,"holder":"p3-s10","ttl_ms":1500,"node":3}
{"op":260,"process":4,"type":"invoke","f":"read","key":"chaos-lock-1","time_ns":12073847648,"node":2}
{"op":260,"process":4,"type":"ok","f":"read","key":"chaos-lock-1","time_ns":12075158760,"token":198,"holder":"p8-s7","held":true}
{"op":267,"process":8,"type":"invoke","f":"renew","key":"chaos-lock-1","time_ns":12398214165,"lease":"zjqh5umtqsl2p36jrpihu2oxcu","token":198,"holder":"p8-s7","ttl_ms":1500,"node":3}
{"op":267,"process":8,"type":"ok","f":"renew","key":"chaos-lock-1","time_ns":13527934649}
{"op":259,"process":3,"type":"ok","f":"acquire","key":"chaos-lock-1","time_ns":13532485542,"lease":"y4kgwceptl2i5upsr7k5zybrte","token":208}
"#;

#[test]
fn a_renew_and_a_newer_grant_both_acknowledged_is_not_linearizable() {
    let lin = check_linearizable(
        &ops(RENEW_AND_GRANT_BOTH_OK),
        &LinearizableConfig::default(),
    );
    assert!(lin.failed(), "{lin:?}");
}

/// Bug 3 (seed 1, the 60 s smoke of `make test-chaos`): an acquire with `wait_ms`
/// answered `409 lock_held` across a leader kill, yet stayed in the replicated
/// queue and was handed the lock (token 163) when the holder released it.
const TIMED_OUT_WAITER_GRANTED: &str = r#"
{"op":233,"process":3,"type":"invoke","f":"acquire","key":"chaos-lock-0","time_ns":8203592888,"holder":"p3-s6","ttl_ms":1500,"node":1}
{"op":233,"process":3,"type":"ok","f":"acquire","key":"chaos-lock-0","time_ns":8440439385,"lease":"bq3olmuerag5kq2oli3uaae2ja","token":152}
{"op":245,"process":5,"type":"invoke","f":"acquire","key":"chaos-lock-0","time_ns":8632354035,"holder":"p5-s12","ttl_ms":1500,"node":2}
{"op":252,"process":3,"type":"invoke","f":"renew","key":"chaos-lock-0","time_ns":8891946883,"lease":"bq3olmuerag5kq2oli3uaae2ja","token":152,"holder":"p3-s6","ttl_ms":1500,"node":3}
{"op":254,"process":4,"type":"invoke","f":"read","key":"chaos-lock-0","time_ns":8966521199,"node":2}
{"op":245,"process":5,"type":"fail","f":"acquire","key":"chaos-lock-0","time_ns":9285589039,"error":"lock_held"}
{"op":252,"process":3,"type":"ok","f":"renew","key":"chaos-lock-0","time_ns":9536201054}
{"op":260,"process":3,"type":"invoke","f":"release","key":"chaos-lock-0","time_ns":9536205020,"lease":"bq3olmuerag5kq2oli3uaae2ja","token":152,"holder":"p3-s6","ttl_ms":1500,"node":3}
{"op":260,"process":3,"type":"ok","f":"release","key":"chaos-lock-0","time_ns":9537811782}
{"op":254,"process":4,"type":"ok","f":"read","key":"chaos-lock-0","time_ns":9539853751,"token":163,"holder":"p5-s12","held":true}
"#;

#[test]
fn a_waiter_answered_lock_held_that_later_holds_the_lock_is_caught() {
    let lin = check_linearizable(
        &ops(TIMED_OUT_WAITER_GRANTED),
        &LinearizableConfig::default(),
    );
    assert!(lin.failed(), "{lin:?}");
}

/// Finding 7, open (seed 1, `make test-chaos`'s smoke, 3 nodes, on a6f833f; it
/// did not come back on a rerun). Node 1 led, was isolated for 4.4 s
/// (22.85-27.28 s) and no other node took over; it became leader again at about
/// 28 s, when "every lease restarts at a full TTL". A keepalive sent at 26.506 s
/// was acknowledged at 27.859 s, and a resign 4 ms later found the lease gone.
/// Suspected: an expiry node 1 proposed while isolated stayed in its log and
/// committed with its new term, after the keepalive had been answered from the
/// restarted lease clock. Not fixed yet; the history is kept so that the checker
/// goes on catching it.
const KEEPALIVE_ACKED_ACROSS_A_RE_ELECTION: &str = r#"
{"op":594,"process":6,"type":"invoke","f":"campaign","key":"chaos-election-1","time_ns":22523506504,"holder":"p6-s22","ttl_ms":1500,"node":3}
{"op":594,"process":6,"type":"ok","f":"campaign","key":"chaos-election-1","time_ns":22525639926,"lease":"2hf52hk7fbohvu3kehy3qypjz4","token":406}
{"op":632,"process":6,"type":"invoke","f":"keepalive","key":"chaos-election-1","time_ns":26506236519,"lease":"2hf52hk7fbohvu3kehy3qypjz4","holder":"p6-s22","ttl_ms":1500,"node":3}
{"op":632,"process":6,"type":"ok","f":"keepalive","key":"chaos-election-1","time_ns":27858664966}
{"op":638,"process":6,"type":"invoke","f":"resign","key":"chaos-election-1","time_ns":27858675926,"lease":"2hf52hk7fbohvu3kehy3qypjz4","token":406,"holder":"p6-s22","ttl_ms":1500,"node":2}
{"op":638,"process":6,"type":"fail","f":"resign","key":"chaos-election-1","time_ns":27862638653,"error":"lease_not_found"}
"#;

#[test]
fn a_keepalive_acknowledged_then_lost_across_a_re_election_is_caught() {
    let v = check_lease_expiry(&ops(KEEPALIVE_ACKED_ACROSS_A_RE_ELECTION));
    assert!(v.failed(), "{v:?}");
    assert_eq!(v.violations, 1);
}
