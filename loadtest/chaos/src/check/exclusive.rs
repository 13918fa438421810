//! Mutual exclusion on the server: a lock, an election or a name is never granted
//! to a second lease while the first one's holding was guaranteed (kept alive on
//! time and not given up). For names this is "never owned by two leases at once".

use std::collections::BTreeMap;

use super::session::{sessions, Session};
use super::Verdict;

/// A grant to B whose whole interval lies inside a protected window of another
/// session A on the same key is a violation: at B's linearization point A still
/// held the key.
pub fn check_exclusive(ops: &[crate::history::Op]) -> Verdict {
    let mut v = Verdict::new("mutual-exclusion");
    let mut per_key: BTreeMap<&str, Vec<(&str, Session<'_>)>> = BTreeMap::new();
    for ((key, holder), s) in sessions(ops) {
        if !s.grants.is_empty() {
            per_key.entry(key).or_default().push((holder, s));
        }
    }
    for (key, ss) in &per_key {
        let windows: Vec<(&str, Vec<_>)> = ss.iter().map(|(h, s)| (*h, s.protected())).collect();
        for (hb, sb) in ss {
            for g in &sb.grants {
                v.checked += 1;
                for (ha, wa) in &windows {
                    if ha == hb {
                        continue;
                    }
                    if let Some((_, until, r)) = wa
                        .iter()
                        .find(|(from, until, _)| *from < g.invoke_ns && g.complete_ns < *until)
                    {
                        v.violation_in(format!(
                            "{key} granted to {hb} while {ha} held it (kept alive until {:.3}s):\n    {}\n    {}",
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
}
