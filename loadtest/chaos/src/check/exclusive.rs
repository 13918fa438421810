//! Mutual exclusion on the server: a lock, an election or a name is never granted
//! to a second lease while the first one's holding was guaranteed (kept alive on
//! time and not given up). For names this is "never owned by two leases at once".
//!
//! Issue 17: with shared locks this becomes "compatible holders only": readers
//! (`mode: shared`) may overlap each other, a writer (exclusive) overlaps nobody.
//! Semaphores are judged by [`check_semaphore_limit`]: never more than `limit`
//! permits out, with the same guaranteed windows.

use std::collections::BTreeMap;

use super::session::{sessions, Session};
use super::Verdict;
use crate::history::Op;

/// Sessions with at least one grant, per key (semaphore keys apart when
/// `semaphores`, lock/election/name keys otherwise).
fn granted_sessions(ops: &[Op], semaphores: bool) -> BTreeMap<&str, Vec<(&str, Session<'_>)>> {
    let mut per_key: BTreeMap<&str, Vec<(&str, Session<'_>)>> = BTreeMap::new();
    for ((key, holder), s) in sessions(ops) {
        let Some(first) = s.grants.first() else {
            continue;
        };
        if first.f.is_semaphore() == semaphores {
            per_key.entry(key).or_default().push((holder, s));
        }
    }
    per_key
}

/// Whether a session holds exclusively (its first grant asked for no `shared`).
fn exclusive(s: &Session<'_>) -> bool {
    s.grants.first().is_none_or(|g| g.is_exclusive())
}

/// A grant to B whose whole interval lies inside a protected window of another
/// session A on the same key is a violation unless both are shared (readers): at
/// B's linearization point A still held the key.
pub fn check_exclusive(ops: &[Op]) -> Verdict {
    let mut v = Verdict::new("mutual-exclusion");
    for (key, ss) in &granted_sessions(ops, false) {
        let windows: Vec<(&str, bool, Vec<_>)> = ss
            .iter()
            .map(|(h, s)| (*h, exclusive(s), s.protected()))
            .collect();
        for (hb, sb) in ss {
            let b_exclusive = exclusive(sb);
            for g in &sb.grants {
                v.checked += 1;
                for (ha, a_exclusive, wa) in &windows {
                    if ha == hb || !(b_exclusive || *a_exclusive) {
                        continue;
                    }
                    if let Some((_, until, r)) = wa
                        .iter()
                        .find(|(from, until, _)| *from < g.invoke_ns && g.complete_ns < *until)
                    {
                        v.violation_in(format!(
                            "{key} granted to {hb} ({}) while {ha} held it ({}, kept alive until {:.3}s):\n    {}\n    {}",
                            mode_word(b_exclusive),
                            mode_word(*a_exclusive),
                            *until as f64 / 1e9,
                            r.describe(),
                            g.describe()
                        ), r.invoke_ns, g.complete_ns);
                    }
                }
            }
        }
    }
    v
}

fn mode_word(exclusive: bool) -> &'static str {
    if exclusive {
        "exclusive"
    } else {
        "shared"
    }
}

/// At most `limit` permits out per semaphore: a grant of p permits to B whose
/// whole interval lies inside protected windows of other sessions holding q1, q2,
/// ... permits (each still guaranteed at B's linearization point, whatever it
/// was) is a violation when p + q1 + q2 + ... exceeds the limit. Unknown or
/// pending releases end a window at their invoke, as for mutual exclusion, so
/// only holdings the server had to keep are counted.
pub fn check_semaphore_limit(ops: &[Op]) -> Verdict {
    let mut v = Verdict::new("semaphore-limit");
    for (key, ss) in &granted_sessions(ops, true) {
        let windows: Vec<(&str, u64, Vec<_>)> = ss
            .iter()
            .map(|(h, s)| (*h, permits(s), s.protected()))
            .collect();
        for (hb, sb) in ss {
            let Some(limit) = sb.grants.first().and_then(|g| g.limit) else {
                continue;
            };
            let mine = permits(sb);
            for g in &sb.grants {
                v.checked += 1;
                let mut out = mine;
                let mut from = g.invoke_ns;
                let mut who = Vec::new();
                for (ha, qa, wa) in &windows {
                    if ha == hb {
                        continue;
                    }
                    if let Some((_, until, r)) = wa
                        .iter()
                        .find(|(from, until, _)| *from < g.invoke_ns && g.complete_ns < *until)
                    {
                        out += qa;
                        from = from.min(r.invoke_ns);
                        who.push(format!(
                            "{ha} ({qa}, kept alive until {:.3}s): {}",
                            *until as f64 / 1e9,
                            r.describe()
                        ));
                    }
                }
                if out > limit {
                    v.violation_in(
                        format!(
                            "{key}: {out} permits out of {limit} once {hb} got {mine}:\n    {}\n    held by {}",
                            g.describe(),
                            who.join("\n    held by ")
                        ),
                        from,
                        g.complete_ns,
                    );
                }
            }
        }
    }
    v
}

/// Permits a semaphore session holds (asked for in its first grant; 1 by default).
fn permits(s: &Session<'_>) -> u64 {
    s.grants.first().and_then(|g| g.permits).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::op;
    use crate::history::{OpKind, Outcome};

    #[test]
    fn a_grant_after_release_or_expiry_is_fine() {
        let h = vec![
            op(1, 1, OpKind::Register, "n", 0, 5, Outcome::Ok, "x", Some(3)),
            op(
                2,
                1,
                OpKind::Unregister,
                "n",
                100,
                110,
                Outcome::Ok,
                "x",
                None,
            ),
            op(
                3,
                2,
                OpKind::Register,
                "n",
                120,
                130,
                Outcome::Ok,
                "y",
                Some(5),
            ),
            // y never refreshed: z may get it after 120 + 1000.
            op(
                4,
                3,
                OpKind::Register,
                "n",
                1200,
                1210,
                Outcome::Ok,
                "z",
                Some(9),
            ),
        ];
        let v = check_exclusive(&h);
        assert!(!v.failed(), "{v:?}");
    }

    #[test]
    fn fails_when_a_name_has_two_owners() {
        let h = vec![
            op(1, 1, OpKind::Register, "n", 0, 5, Outcome::Ok, "x", Some(3)),
            op(
                2,
                1,
                OpKind::Keepalive,
                "n",
                600,
                610,
                Outcome::Ok,
                "x",
                None,
            ),
            op(
                3,
                2,
                OpKind::Register,
                "n",
                1200,
                1210,
                Outcome::Ok,
                "y",
                Some(7),
            ),
        ];
        let v = check_exclusive(&h);
        assert!(v.failed(), "{v:?}");
    }

    fn moded(mut o: crate::history::Op, mode: &str) -> crate::history::Op {
        o.mode = Some(mode.into());
        o
    }

    fn permits_op(mut o: crate::history::Op, permits: u64, limit: u64) -> crate::history::Op {
        o.permits = Some(permits);
        o.limit = Some(limit);
        o
    }

    #[test]
    fn readers_overlap_a_writer_overlaps_nobody() {
        let acquire = |id, p, at, holder: &str, token, mode| {
            moded(
                op(
                    id,
                    p,
                    OpKind::Acquire,
                    "rw",
                    at,
                    at + 5,
                    Outcome::Ok,
                    holder,
                    Some(token),
                ),
                mode,
            )
        };
        // Two readers at once: fine.
        let readers = vec![
            acquire(1, 1, 0, "r1", 3, "shared"),
            acquire(2, 2, 100, "r2", 4, "shared"),
        ];
        let v = check_exclusive(&readers);
        assert!(!v.failed(), "{v:?}");
        assert_eq!(v.checked, 2);
        // A writer granted while a reader's lease is guaranteed: caught.
        let mut h = readers.clone();
        h.push(acquire(3, 3, 200, "w", 5, "exclusive"));
        let v = check_exclusive(&h);
        assert!(v.failed(), "{v:?}");
        assert_eq!(v.violations, 2, "inside both readers' windows: {v:?}");
        // A reader granted while a writer holds: caught.
        let h = vec![
            acquire(1, 1, 0, "w", 3, "exclusive"),
            acquire(2, 2, 100, "r", 4, "shared"),
        ];
        assert!(check_exclusive(&h).failed());
        // The writer released first (acknowledged): fine.
        let h = vec![
            acquire(1, 1, 0, "w", 3, "exclusive"),
            moded(
                op(
                    2,
                    1,
                    OpKind::Release,
                    "rw",
                    50,
                    60,
                    Outcome::Ok,
                    "w",
                    Some(3),
                ),
                "exclusive",
            ),
            acquire(3, 2, 100, "r", 4, "shared"),
        ];
        assert!(!check_exclusive(&h).failed());
        // An unknown release also ends what the writer was guaranteed.
        let h = vec![
            acquire(1, 1, 0, "w", 3, "exclusive"),
            op(
                2,
                1,
                OpKind::Release,
                "rw",
                50,
                60,
                Outcome::Unknown,
                "w",
                Some(3),
            ),
            acquire(3, 2, 100, "r", 4, "shared"),
        ];
        assert!(!check_exclusive(&h).failed());
    }

    #[test]
    fn at_most_limit_permits_out() {
        let grant = |id, p, at, holder: &str, token, permits| {
            permits_op(
                op(
                    id,
                    p,
                    OpKind::AcquirePermits,
                    "s",
                    at,
                    at + 5,
                    Outcome::Ok,
                    holder,
                    Some(token),
                ),
                permits,
                3,
            )
        };
        let ok = vec![grant(1, 1, 0, "a", 3, 1), grant(2, 2, 10, "b", 4, 2)];
        let v = check_semaphore_limit(&ok);
        assert!(!v.failed(), "{v:?}");
        assert_eq!(v.checked, 2);
        // A fourth permit while a (1) and b (2) are guaranteed: caught.
        let mut over = ok.clone();
        over.push(grant(3, 3, 20, "c", 5, 1));
        let v = check_semaphore_limit(&over);
        assert_eq!(v.violations, 1, "{v:?}");
        assert!(v.explanations[0].contains("4 permits out of 3"), "{v:?}");
        // b gave its permits back first: fine.
        let mut released = ok.clone();
        released.push(op(
            3,
            2,
            OpKind::ReleasePermits,
            "s",
            12,
            14,
            Outcome::Ok,
            "b",
            Some(4),
        ));
        released.push(grant(4, 3, 20, "c", 5, 1));
        assert!(!check_semaphore_limit(&released).failed());
        // a's lease ran out (never renewed, TTL 1000 ms) before c was granted.
        let late = vec![grant(1, 1, 0, "a", 3, 2), grant(2, 2, 1100, "c", 5, 2)];
        assert!(!check_semaphore_limit(&late).failed());
        // A renewal extends the guarantee.
        let renewed = vec![
            grant(1, 1, 0, "a", 3, 2),
            op(
                2,
                1,
                OpKind::RenewPermits,
                "s",
                800,
                810,
                Outcome::Ok,
                "a",
                Some(3),
            ),
            grant(3, 2, 1100, "c", 5, 2),
        ];
        assert!(check_semaphore_limit(&renewed).failed());
        // Semaphore keys are not mutual-exclusion's business, and lock keys not this one's.
        assert!(!check_exclusive(&over).failed());
        assert_eq!(check_semaphore_limit(&[]).checked, 0);
    }
}
