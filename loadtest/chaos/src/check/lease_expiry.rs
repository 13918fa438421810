//! No lease kept alive on time expired: after a successful refresh R (creation,
//! renew, keepalive), nothing invoked after R completed may find the lease or its
//! holding gone before `R.invoke + ttl`, unless the holder gave it up.

use super::session::sessions;
use super::Verdict;
use crate::history::{Op, Outcome};

/// Error codes that say the lease, or the holding on it, is gone.
const GONE: &[&str] = &[
    "lease_not_found",
    "lock_lost",
    "not_leader",
    "not_owner",
    "permits_lost",
];

/// See the module documentation.
pub fn check_lease_expiry(ops: &[Op]) -> Verdict {
    let mut v = Verdict::new("lease-kept-alive");
    for ((key, holder), s) in sessions(ops) {
        if s.grants.is_empty() {
            continue;
        }
        let windows = s.protected();
        let gave_up = s.gave_up_at().unwrap_or(u64::MAX);
        for x in &s.ops {
            if x.outcome != Outcome::Fail || x.invoke_ns >= gave_up {
                continue;
            }
            let Some(code) = x.error.as_deref() else {
                continue;
            };
            if !GONE.contains(&code) {
                continue;
            }
            v.checked += 1;
            let covering = windows
                .iter()
                .find(|(from, until, _)| *from < x.invoke_ns && x.complete_ns < *until);
            if let Some((_, until, r)) = covering {
                v.violation_in(format!(
                    "{key}: holding of {holder} gone ({code}) before its TTL ran out at {:.3}s:\n    refreshed by {}\n    gone in   {}",
                    *until as f64 / 1e9,
                    r.describe(),
                    x.describe()
                ), r.invoke_ns, x.complete_ns);
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::{fail, op};
    use crate::history::OpKind;

    #[test]
    fn expiry_after_the_ttl_is_fine() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(
                2,
                1,
                OpKind::Renew,
                "a",
                300,
                310,
                Outcome::Ok,
                "x",
                Some(3),
            ),
            fail(
                3,
                1,
                OpKind::Renew,
                "a",
                1400,
                1410,
                "x",
                Some(3),
                "lease_not_found",
            ),
        ];
        let v = check_lease_expiry(&h);
        assert!(!v.failed(), "{v:?}");
        assert_eq!(v.checked, 1);
    }

    #[test]
    fn fails_on_an_early_expiry() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(
                2,
                1,
                OpKind::Keepalive,
                "a",
                300,
                310,
                Outcome::Ok,
                "x",
                None,
            ),
            fail(
                3,
                1,
                OpKind::Renew,
                "a",
                800,
                810,
                "x",
                Some(3),
                "lease_not_found",
            ),
        ];
        assert!(check_lease_expiry(&h).failed());
    }

    #[test]
    fn a_release_explains_the_loss() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(
                2,
                1,
                OpKind::Release,
                "a",
                100,
                110,
                Outcome::Unknown,
                "x",
                Some(3),
            ),
            fail(
                3,
                1,
                OpKind::Renew,
                "a",
                200,
                210,
                "x",
                Some(3),
                "lock_lost",
            ),
        ];
        assert!(!check_lease_expiry(&h).failed());
    }
}
