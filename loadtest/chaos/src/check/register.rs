//! The fenced register never accepted a stale token and lost no accepted write.

use std::collections::{BTreeMap, BTreeSet};

use super::{by_key, Verdict};
use crate::history::{Op, OpKind};
use crate::register::AcceptedWrite;

/// In the register's acceptance order, tokens never go down; and every write the
/// history shows as accepted is in the register's final contents with its token.
pub fn check_register(ops: &[Op], register: &BTreeMap<String, Vec<AcceptedWrite>>) -> Verdict {
    let mut v = Verdict::new("fenced-register");
    let empty = Vec::new();
    for (key, kops) in by_key(ops) {
        let acked: Vec<&Op> = kops
            .iter()
            .copied()
            .filter(|o| o.f == OpKind::Write && o.is_ok())
            .collect();
        let log = register.get(key).unwrap_or(&empty);
        // Stale acceptance, in the order the register accepted writes.
        let mut highest: Option<&AcceptedWrite> = None;
        for w in log {
            v.checked += 1;
            if let Some(h) = highest {
                if w.token < h.token {
                    let writer = acked.iter().find(|o| o.seq == Some(w.seq));
                    v.violation(format!(
                        "register {key} accepted token {} (seq {}, p{}) after token {} (seq {}, p{}){}",
                        w.token,
                        w.seq,
                        w.process,
                        h.token,
                        h.seq,
                        h.process,
                        writer.map(|o| format!(":\n    {}", o.describe())).unwrap_or_default()
                    ));
                }
            }
            if highest.is_none_or(|h| w.token > h.token) {
                highest = Some(w);
            }
        }
        // Lost writes: acknowledged in the history, missing from the final contents.
        let kept: BTreeSet<(u64, u64)> = log.iter().map(|w| (w.seq, w.token)).collect();
        for o in &acked {
            let (Some(seq), Some(token)) = (o.seq, o.token) else {
                v.violation(format!(
                    "accepted write without seq/token: {}",
                    o.describe()
                ));
                continue;
            };
            if !kept.contains(&(seq, token)) {
                v.violation(format!(
                    "accepted write lost from register {key}: {}",
                    o.describe()
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
    use crate::history::Outcome;

    fn write(id: u64, p: u32, token: u64, seq: u64) -> (Op, AcceptedWrite) {
        let mut o = op(
            id,
            p,
            OpKind::Write,
            "a",
            id,
            id,
            Outcome::Ok,
            "x",
            Some(token),
        );
        o.seq = Some(seq);
        (
            o,
            AcceptedWrite {
                seq,
                token,
                process: p,
            },
        )
    }

    #[test]
    fn monotone_tokens_pass() {
        let (o1, w1) = write(1, 1, 3, 1);
        let (o2, w2) = write(2, 2, 5, 2);
        let reg = BTreeMap::from([("a".to_owned(), vec![w1, w2])]);
        assert!(!check_register(&[o1, o2], &reg).failed());
    }

    #[test]
    fn fails_on_a_stale_acceptance() {
        let (o1, w1) = write(1, 1, 5, 1);
        let (o2, w2) = write(2, 2, 3, 2);
        let reg = BTreeMap::from([("a".to_owned(), vec![w1, w2])]);
        let v = check_register(&[o1, o2], &reg);
        assert!(v.failed(), "{v:?}");
    }

    #[test]
    fn fails_on_a_lost_write() {
        let (o1, w1) = write(1, 1, 3, 1);
        let (o2, _w2) = write(2, 2, 5, 2);
        let reg = BTreeMap::from([("a".to_owned(), vec![w1])]);
        let v = check_register(&[o1, o2], &reg);
        assert!(v.failed(), "{v:?}");
    }
}
