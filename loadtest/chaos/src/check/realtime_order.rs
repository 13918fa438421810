//! Real-time order: a grant that completed before another began has the smaller token
//! (tokens are cluster-wide revisions, so this holds across keys too).

use super::Verdict;
use crate::history::Op;

/// For each successful grant g2, no grant with a larger token completed before g2
/// was invoked. (Equal tokens are the same grant, returned again; tokens-unique
/// checks that.)
pub fn check_realtime_order(ops: &[Op]) -> Verdict {
    let mut v = Verdict::new("realtime-order");
    // A re-acquire or re-registration by the same lease answers the existing grant's
    // token: only the first answer of each token is a new grant.
    let mut first: std::collections::BTreeMap<u64, &Op> = std::collections::BTreeMap::new();
    for o in ops.iter().filter(|o| o.f.is_grant() && o.is_ok()) {
        if let Some(t) = o.token {
            let e = first.entry(t).or_insert(o);
            if o.invoke_ns < e.invoke_ns {
                *e = o;
            }
        }
    }
    let mut grants: Vec<(&Op, u64)> = first.into_iter().map(|(t, o)| (o, t)).collect();
    // Sweep over grants in invoke order while adding completions in completion order.
    let mut by_completion = grants.clone();
    by_completion.sort_by_key(|(o, _)| o.complete_ns);
    grants.sort_by_key(|(o, _)| o.invoke_ns);
    let mut best: Option<(&Op, u64)> = None;
    let mut next = 0;
    for (g2, t2) in grants {
        while next < by_completion.len() && by_completion[next].0.complete_ns < g2.invoke_ns {
            let cand = by_completion[next];
            if best.is_none_or(|(_, t)| cand.1 > t) {
                best = Some(cand);
            }
            next += 1;
        }
        v.checked += 1;
        if let Some((g1, t1)) = best {
            if t1 > t2 {
                v.violation(format!(
                    "grant with token {t2} began after a grant with token {t1} had completed:\n    {}\n    {}",
                    g1.describe(),
                    g2.describe()
                ));
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
    fn concurrent_grants_may_come_in_any_order() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 10, Outcome::Ok, "x", Some(7)),
            op(2, 2, OpKind::Acquire, "b", 5, 12, Outcome::Ok, "y", Some(6)),
            op(
                3,
                3,
                OpKind::Acquire,
                "c",
                20,
                25,
                Outcome::Ok,
                "z",
                Some(8),
            ),
        ];
        assert!(!check_realtime_order(&h).failed());
    }

    #[test]
    fn a_re_registration_answering_the_old_token_is_not_a_new_grant() {
        let h = vec![
            op(
                1,
                1,
                OpKind::Register,
                "n",
                0,
                10,
                Outcome::Ok,
                "x",
                Some(5),
            ),
            op(
                2,
                2,
                OpKind::Acquire,
                "a",
                20,
                25,
                Outcome::Ok,
                "y",
                Some(8),
            ),
            op(
                3,
                1,
                OpKind::Register,
                "n",
                30,
                35,
                Outcome::Ok,
                "x",
                Some(5),
            ),
        ];
        let v = check_realtime_order(&h);
        assert!(!v.failed(), "{v:?}");
    }

    #[test]
    fn fails_when_a_later_grant_gets_a_smaller_token() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 10, Outcome::Ok, "x", Some(7)),
            op(
                2,
                2,
                OpKind::Register,
                "n",
                11,
                12,
                Outcome::Ok,
                "y",
                Some(6),
            ),
        ];
        let v = check_realtime_order(&h);
        assert!(v.failed(), "{v:?}");
    }
}
