//! Tokens unique: no two different grants (key, lease) ever got the same token.

use std::collections::BTreeMap;

use super::Verdict;
use crate::history::Op;

/// Every successful grant's token belongs to exactly one (key, lease) grant; the same
/// lease re-acquiring or re-registering gets its own token back, which is allowed.
pub fn check_tokens_unique(ops: &[Op]) -> Verdict {
    let mut v = Verdict::new("tokens-unique");
    let mut owner: BTreeMap<u64, &Op> = BTreeMap::new();
    for op in ops.iter().filter(|o| o.f.is_grant() && o.is_ok()) {
        let Some(token) = op.token else { continue };
        v.checked += 1;
        match owner.get(&token) {
            None => {
                owner.insert(token, op);
            }
            Some(first) if first.key == op.key && first.lease == op.lease => {}
            Some(first) => v.violation(format!(
                "token {token} granted twice:\n    {}\n    {}",
                first.describe(),
                op.describe()
            )),
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
    fn passes_distinct_tokens_and_idempotent_reacquire() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(2, 1, OpKind::Acquire, "a", 6, 9, Outcome::Ok, "x", Some(3)),
            op(3, 2, OpKind::Register, "n", 0, 5, Outcome::Ok, "y", Some(4)),
        ];
        assert!(!check_tokens_unique(&h).failed());
    }

    #[test]
    fn fails_when_two_leases_get_one_token() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 5, Outcome::Ok, "x", Some(3)),
            op(
                2,
                2,
                OpKind::Campaign,
                "e",
                10,
                15,
                Outcome::Ok,
                "y",
                Some(3),
            ),
        ];
        let v = check_tokens_unique(&h);
        assert!(v.failed(), "{v:?}");
        assert_eq!(v.violations, 1);
    }
}
