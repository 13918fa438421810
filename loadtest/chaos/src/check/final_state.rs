//! Every acknowledged grant, release and registration is reflected in the final
//! state read through the API at the end (or explained by a later expiry).

use std::collections::BTreeMap;

use super::session::sessions;
use super::{multi_holder_keys, Verdict, FINAL_PROCESS};
use crate::history::{Op, OpKind};

/// For each key's final read F (by the harness, after the nemesis healed everything):
/// - a session whose release was acknowledged is not shown as the holder;
/// - a session still protected at F's completion (a refresh R with
///   `R.invoke + ttl > F.complete`, nothing given up) is shown, with its token;
/// - whoever F shows as holder did ask for a grant on that key.
pub fn check_final_state(ops: &[Op]) -> Verdict {
    let mut v = Verdict::new("final-state");
    let finals: BTreeMap<&str, &Op> = ops
        .iter()
        .filter(|o| o.process == FINAL_PROCESS && o.f == OpKind::Read && o.is_ok())
        .map(|o| (o.key.as_str(), o))
        .collect();
    if finals.is_empty() {
        v.inconclusive("no final reads in the history".into());
        return v;
    }
    let sessions = sessions(ops);
    // A read shows one holder: shared locks and semaphores are not judged here.
    let multi = multi_holder_keys(ops);
    for ((key, holder), s) in &sessions {
        if multi.contains(key) {
            continue;
        }
        let Some(f) = finals.get(key) else { continue };
        let Some(token) = s.token() else { continue };
        v.checked += 1;
        let shown = f.held == Some(true) && f.holder.as_deref() == Some(*holder);
        if s.released_ok() {
            if shown && f.token == Some(token) {
                v.violation(format!(
                    "acknowledged release not reflected: {key} still held by {holder} (token {token}) in {}",
                    f.describe()
                ));
            }
            continue;
        }
        if s.gave_up_at().is_some() {
            continue;
        }
        if let Some(until) = s.protected_until() {
            if f.complete_ns < until && !(shown && f.token == Some(token)) {
                v.violation_in(format!(
                    "acknowledged grant lost: {key} token {token} of {holder} was kept alive until {:.3}s but the final read says {}",
                    until as f64 / 1e9,
                    f.describe()
                ), s.protected().iter().map(|(_, _, r)| r.invoke_ns).max().unwrap_or(0), f.complete_ns);
            }
        }
    }
    for (key, f) in &finals {
        if f.held != Some(true) {
            continue;
        }
        let Some(h) = f.holder.as_deref() else {
            continue;
        };
        if !sessions.contains_key(&(*key, h)) {
            v.violation(format!(
                "final holder of {key} never asked for it: {}",
                f.describe()
            ));
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
    fn protected_holding_shown_and_expired_holding_explained() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(
                2,
                1,
                OpKind::Renew,
                "a",
                500,
                510,
                Outcome::Ok,
                "x",
                Some(3),
            ),
            op(3, 2, OpKind::Acquire, "b", 0, 5, Outcome::Ok, "y", Some(4)),
            read(4, FINAL_PROCESS, "a", 900, 910, Some("x"), Some(3)),
            // b's lease was last refreshed at 0 (TTL 1000): free at 1200 is explained.
            read(5, FINAL_PROCESS, "b", 1200, 1210, None, None),
        ];
        let v = check_final_state(&h);
        assert!(!v.failed(), "{v:?}");
        assert_eq!(v.checked, 2);
    }

    #[test]
    fn fails_on_a_lost_grant() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(
                2,
                1,
                OpKind::Renew,
                "a",
                500,
                510,
                Outcome::Ok,
                "x",
                Some(3),
            ),
            read(4, FINAL_PROCESS, "a", 900, 910, None, None),
        ];
        assert!(check_final_state(&h).failed());
    }

    #[test]
    fn fails_on_a_lost_release() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(
                2,
                1,
                OpKind::Release,
                "a",
                10,
                20,
                Outcome::Ok,
                "x",
                Some(3),
            ),
            read(4, FINAL_PROCESS, "a", 30, 40, Some("x"), Some(3)),
        ];
        assert!(check_final_state(&h).failed());
    }

    #[test]
    fn fails_on_a_holder_from_nowhere() {
        let h = vec![read(4, FINAL_PROCESS, "a", 30, 40, Some("ghost"), Some(3))];
        assert!(check_final_state(&h).failed());
    }
}
