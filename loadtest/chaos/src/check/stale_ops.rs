//! No stale success: once a grant with token t' completed on a key, no operation
//! invoked afterwards may succeed while asserting an older token t < t' on that key
//! (renew, release, proclaim, resign with t; a grant answered with the old t; a
//! read showing t as the current holder).

use super::{by_key, multi_holder_keys, Verdict};
use crate::history::{Op, OpKind};

/// See the module documentation.
pub fn check_stale_ops(ops: &[Op]) -> Verdict {
    let mut v = Verdict::new("no-stale-success");
    // Shared locks and semaphores have several holders: an older holder's renew
    // after a newer grant is normal there.
    let multi = multi_holder_keys(ops);
    for (key, kops) in by_key(ops) {
        if multi.contains(key) {
            continue;
        }
        let mut grants: Vec<(&Op, u64)> = kops
            .iter()
            .filter(|o| o.f.is_grant() && o.is_ok())
            .filter_map(|o| o.token.map(|t| (*o, t)))
            .collect();
        grants.sort_by_key(|(o, _)| o.complete_ns);
        for op in &kops {
            let asserts_token = op.f.is_token_checked()
                || op.f.is_grant()
                || (op.f == OpKind::Read && op.held == Some(true));
            if !op.is_ok() || !asserts_token {
                continue;
            }
            let Some(t) = op.token else { continue };
            v.checked += 1;
            let newer = grants
                .iter()
                .take_while(|(g, _)| g.complete_ns < op.invoke_ns)
                .filter(|(_, tg)| *tg > t)
                .max_by_key(|(_, tg)| *tg);
            if let Some((g, tg)) = newer {
                v.violation(format!(
                    "{:?} succeeded with token {t} after a grant with token {tg} completed:\n    {}\n    {}",
                    op.f,
                    g.describe(),
                    op.describe()
                ));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::{op, read};
    use crate::history::Outcome;

    #[test]
    fn renew_before_the_next_grant_is_fine() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(2, 1, OpKind::Renew, "a", 6, 8, Outcome::Ok, "x", Some(3)),
            op(3, 2, OpKind::Acquire, "a", 7, 20, Outcome::Ok, "y", Some(9)),
            op(
                4,
                1,
                OpKind::Renew,
                "a",
                21,
                22,
                Outcome::Fail,
                "x",
                Some(3),
            ),
            read(5, 3, "a", 23, 24, Some("y"), Some(9)),
        ];
        let v = check_stale_ops(&h);
        assert!(!v.failed(), "{v:?}");
        assert_eq!(v.checked, 4);
    }

    #[test]
    fn fails_on_a_release_with_an_old_token_after_a_newer_grant() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(3, 2, OpKind::Acquire, "a", 7, 20, Outcome::Ok, "y", Some(9)),
            op(
                4,
                1,
                OpKind::Release,
                "a",
                21,
                22,
                Outcome::Ok,
                "x",
                Some(3),
            ),
        ];
        assert!(check_stale_ops(&h).failed());
    }

    #[test]
    fn fails_on_a_stale_read() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(3, 2, OpKind::Acquire, "a", 7, 20, Outcome::Ok, "y", Some(9)),
            read(5, 3, "a", 23, 24, Some("x"), Some(3)),
        ];
        assert!(check_stale_ops(&h).failed());
    }
}
