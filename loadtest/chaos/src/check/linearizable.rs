//! Linearizability of each key's history against the sequential lock model
//! ([`LockModel`]), by the Wing-Gong-Lowe search with Lowe's memoization of
//! (linearized set, state), as in Porcupine. An unknown outcome may take effect at
//! any point after its invoke until `unknown_horizon_ms` after the client gave up,
//! or never. (Without a horizon every unknown op stays concurrent with the rest of
//! the history and the search of a long history explodes.)

use std::collections::HashSet;

use super::lock_model::{LockModel, ModelOp, ModelState};
use super::{by_key, multi_holder_keys, Verdict};
use crate::history::{Op, Outcome};

/// Search limits.
#[derive(Debug, Clone, Copy)]
pub struct LinearizableConfig {
    /// Give up on a key after this many search steps (inconclusive, not a violation).
    pub max_steps: u64,
    /// Largest number of ops per key searched (longer histories are inconclusive).
    pub max_ops: usize,
    /// How long after the client gave up an unknown outcome may still take effect.
    pub unknown_horizon_ms: u64,
}

impl Default for LinearizableConfig {
    fn default() -> Self {
        Self {
            max_steps: 2_000_000,
            max_ops: 20_000,
            unknown_horizon_ms: 10_000,
        }
    }
}

/// The result of one key's search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Search {
    /// A linearization exists.
    Linearizable,
    /// None exists; the longest prefix reached ends before this op (index into the
    /// key's ops).
    NotLinearizable {
        /// How many ops the deepest partial linearization contained.
        deepest: usize,
        /// The op the search could never get past.
        stuck_at: usize,
    },
    /// The budget ran out.
    Unknown,
}

/// See the module documentation.
pub fn check_linearizable(ops: &[Op], config: &LinearizableConfig) -> Verdict {
    let mut v = Verdict::new("linearizable");
    // The model is a lock with one holder: shared locks and semaphores are judged
    // by mutual-exclusion and semaphore-limit instead.
    let multi = multi_holder_keys(ops);
    for (key, kops) in by_key(ops) {
        if multi.contains(key) {
            continue;
        }
        let mut model = LockModel::default();
        let prepared: Vec<(&Op, ModelOp)> = kops
            .iter()
            .filter_map(|o| model.prepare(o).map(|m| (*o, m)))
            .collect();
        if prepared.is_empty() {
            continue;
        }
        v.checked += 1;
        if prepared.len() > config.max_ops {
            v.inconclusive(format!(
                "{key}: {} ops, above the limit {}",
                prepared.len(),
                config.max_ops
            ));
            continue;
        }
        let mops: Vec<ModelOp> = prepared.iter().map(|(_, m)| m.clone()).collect();
        let times: Vec<(u64, u64)> = prepared
            .iter()
            .map(|(o, _)| {
                let ret = if o.outcome == Outcome::Unknown {
                    o.complete_ns
                        .saturating_add(config.unknown_horizon_ms * 1_000_000)
                } else {
                    o.complete_ns
                };
                (o.invoke_ns, ret)
            })
            .collect();
        match search(&model, &mops, &times, config.max_steps) {
            Search::Linearizable => {}
            Search::Unknown => v.inconclusive(format!(
                "{key}: search budget of {} steps exhausted ({} ops)",
                config.max_steps,
                prepared.len()
            )),
            Search::NotLinearizable { deepest, stuck_at } => {
                let op = prepared[stuck_at].0;
                let around: Vec<String> = prepared
                    .iter()
                    .filter(|(o, _)| {
                        o.complete_ns.saturating_add(2_000_000_000) >= op.invoke_ns
                            && o.invoke_ns <= op.complete_ns.saturating_add(200_000_000)
                    })
                    .take(12)
                    .map(|(o, _)| format!("    {}", o.describe()))
                    .collect();
                let ttl_ns = op.ttl_ms.unwrap_or(0) * 1_000_000;
                v.violation_in(format!(
                    "{key}: not linearizable ({} ops; at most {deepest} linearized); no valid order gets past\n    {}\n  ops around it:\n{}",
                    prepared.len(),
                    op.describe(),
                    around.join("\n")
                ), op.invoke_ns.saturating_sub(2 * ttl_ns + 2_000_000_000), op.complete_ns);
            }
        }
    }
    v
}

#[derive(Clone, Copy)]
struct Node {
    prev: usize,
    next: usize,
    /// Op index.
    op: usize,
    is_call: bool,
    /// For a call: its return node.
    partner: usize,
}

struct Frame {
    call: usize,
    before: ModelState,
    alts: Vec<ModelState>,
    next_alt: usize,
}

/// Wing-Gong-Lowe over one key. `times[i]` is `(invoke, return)`; an unknown
/// outcome's return is its horizon.
pub fn search(model: &LockModel, ops: &[ModelOp], times: &[(u64, u64)], max_steps: u64) -> Search {
    let n = ops.len();
    // Entries sorted by time; at equal times calls first (concurrent, the permissive reading).
    let mut entries: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, (inv, ret)) in times.iter().enumerate() {
        entries.push((*inv, true, i));
        entries.push((*ret, false, i));
    }
    entries.sort_by_key(|(t, is_call, i)| (*t, !*is_call, *i));
    // Linked list with a head sentinel at index 0.
    const NIL: usize = usize::MAX;
    let mut nodes: Vec<Node> = Vec::with_capacity(2 * n + 1);
    nodes.push(Node {
        prev: NIL,
        next: NIL,
        op: NIL,
        is_call: false,
        partner: NIL,
    });
    let mut ret_node = vec![NIL; n];
    for (k, (_, is_call, i)) in entries.iter().enumerate() {
        let idx = k + 1;
        nodes.push(Node {
            prev: idx - 1,
            next: NIL,
            op: *i,
            is_call: *is_call,
            partner: NIL,
        });
        nodes[idx - 1].next = idx;
        if !*is_call {
            ret_node[*i] = idx;
        }
    }
    for idx in 1..nodes.len() {
        if nodes[idx].is_call {
            nodes[idx].partner = ret_node[nodes[idx].op];
        }
    }
    let lift = |nodes: &mut Vec<Node>, call: usize| {
        let (p, nx) = (nodes[call].prev, nodes[call].next);
        nodes[p].next = nx;
        if nx != NIL {
            nodes[nx].prev = p;
        }
        let r = nodes[call].partner;
        let (p, nx) = (nodes[r].prev, nodes[r].next);
        nodes[p].next = nx;
        if nx != NIL {
            nodes[nx].prev = p;
        }
    };
    let unlift = |nodes: &mut Vec<Node>, call: usize| {
        let r = nodes[call].partner;
        let (p, nx) = (nodes[r].prev, nodes[r].next);
        nodes[p].next = r;
        if nx != NIL {
            nodes[nx].prev = r;
        }
        let (p, nx) = (nodes[call].prev, nodes[call].next);
        nodes[p].next = call;
        if nx != NIL {
            nodes[nx].prev = call;
        }
    };

    let words = n.div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut cache: HashSet<(Vec<u64>, ModelState)> = HashSet::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut state = ModelState::default();
    let mut entry = nodes[0].next;
    let mut steps: u64 = 0;
    let mut deepest = 0usize;
    let mut stuck_at = 0usize;

    // Tries alternatives `alts[from..]` for `call`; on success pushes a frame.
    macro_rules! attempt {
        ($call:expr, $before:expr, $alts:expr, $from:expr) => {{
            let op = nodes[$call].op;
            let mut placed = false;
            for (j, alt) in $alts.iter().enumerate().skip($from) {
                linearized[op / 64] |= 1 << (op % 64);
                if cache.insert((linearized.clone(), *alt)) {
                    state = *alt;
                    lift(&mut nodes, $call);
                    stack.push(Frame {
                        call: $call,
                        before: $before,
                        alts: $alts.clone(),
                        next_alt: j + 1,
                    });
                    placed = true;
                    break;
                }
                linearized[op / 64] &= !(1 << (op % 64));
            }
            placed
        }};
    }

    while nodes[0].next != NIL {
        steps += 1;
        if steps > max_steps {
            return Search::Unknown;
        }
        let node = nodes[entry];
        if node.is_call {
            let alts = model.step(&state, &ops[node.op]);
            let before = state;
            if attempt!(entry, before, alts, 0) {
                if stack.len() > deepest {
                    deepest = stack.len();
                }
                entry = nodes[0].next;
            } else {
                entry = node.next;
            }
            continue;
        }
        // A return whose call is not linearized yet.
        if ops[node.op].is_unknown() {
            // An unknown outcome reached its horizon: linearize it as "no effect".
            let call = nodes
                .iter()
                .position(|x| x.is_call && x.op == node.op)
                .unwrap_or(NIL);
            let before = state;
            let alts = vec![state];
            if call != NIL && attempt!(call, before, alts, 0) {
                entry = nodes[0].next;
                continue;
            }
        } else if stack.len() >= deepest {
            stuck_at = node.op;
        }
        // Backtrack: undo the last linearized op and try its next alternative, or
        // move past it.
        let Some(frame) = stack.pop() else {
            return Search::NotLinearizable { deepest, stuck_at };
        };
        let op = nodes[frame.call].op;
        linearized[op / 64] &= !(1 << (op % 64));
        unlift(&mut nodes, frame.call);
        state = frame.before;
        let call = frame.call;
        let alts = frame.alts;
        let before = frame.before;
        if frame.next_alt < alts.len() && attempt!(call, before, alts, frame.next_alt) {
            entry = nodes[0].next;
        } else {
            entry = nodes[call].next;
        }
    }
    Search::Linearizable
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::{fail, op, read};
    use crate::history::OpKind;

    fn run(h: &[Op]) -> Verdict {
        check_linearizable(h, &LinearizableConfig::default())
    }

    #[test]
    fn a_plain_lock_history_is_linearizable() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 10, Outcome::Ok, "x", Some(3)),
            fail(2, 2, OpKind::Acquire, "a", 5, 15, "y", None, "lock_held"),
            op(3, 1, OpKind::Renew, "a", 20, 25, Outcome::Ok, "x", Some(3)),
            op(
                4,
                1,
                OpKind::Release,
                "a",
                30,
                40,
                Outcome::Ok,
                "x",
                Some(3),
            ),
            // Concurrent with the release: may go after it.
            op(
                5,
                2,
                OpKind::Acquire,
                "a",
                35,
                50,
                Outcome::Ok,
                "y",
                Some(8),
            ),
            read(6, 3, "a", 60, 61, Some("y"), Some(8)),
        ];
        let v = run(&h);
        assert!(!v.failed(), "{v:?}");
        assert_eq!(v.status, crate::check::Status::Pass);
    }

    #[test]
    fn expiry_frees_an_unprotected_lock() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 10, Outcome::Ok, "x", Some(3)),
            // TTL 1000 ms from 0: y may get it at 1500 without a release.
            op(
                2,
                2,
                OpKind::Acquire,
                "a",
                1500,
                1510,
                Outcome::Ok,
                "y",
                Some(9),
            ),
            fail(
                3,
                1,
                OpKind::Renew,
                "a",
                1600,
                1610,
                "x",
                Some(3),
                "lease_not_found",
            ),
        ];
        assert!(!run(&h).failed());
    }

    #[test]
    fn an_unknown_acquire_may_or_may_not_have_happened() {
        let took = vec![
            op(
                1,
                1,
                OpKind::Acquire,
                "a",
                0,
                10,
                Outcome::Unknown,
                "x",
                None,
            ),
            fail(2, 2, OpKind::Acquire, "a", 20, 30, "y", None, "lock_held"),
            read(3, 3, "a", 40, 50, Some("x"), Some(4)),
        ];
        assert!(!run(&took).failed());
        let not = vec![
            op(
                1,
                1,
                OpKind::Acquire,
                "a",
                0,
                10,
                Outcome::Unknown,
                "x",
                None,
            ),
            op(
                2,
                2,
                OpKind::Acquire,
                "a",
                20,
                30,
                Outcome::Ok,
                "y",
                Some(5),
            ),
        ];
        assert!(!run(&not).failed());
    }

    #[test]
    fn fails_on_two_holders_at_once() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 10, Outcome::Ok, "x", Some(3)),
            op(
                2,
                2,
                OpKind::Acquire,
                "a",
                20,
                30,
                Outcome::Ok,
                "y",
                Some(5),
            ),
        ];
        let v = run(&h);
        assert!(v.failed(), "{v:?}");
    }

    #[test]
    fn fails_on_a_decreasing_token() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 10, Outcome::Ok, "x", Some(7)),
            op(
                2,
                1,
                OpKind::Release,
                "a",
                20,
                30,
                Outcome::Ok,
                "x",
                Some(7),
            ),
            op(
                3,
                2,
                OpKind::Acquire,
                "a",
                40,
                50,
                Outcome::Ok,
                "y",
                Some(5),
            ),
        ];
        assert!(run(&h).failed());
    }

    #[test]
    fn fails_on_a_read_of_a_released_lock() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 10, Outcome::Ok, "x", Some(7)),
            op(
                2,
                1,
                OpKind::Release,
                "a",
                20,
                30,
                Outcome::Ok,
                "x",
                Some(7),
            ),
            read(3, 3, "a", 40, 50, Some("x"), Some(7)),
        ];
        assert!(run(&h).failed());
    }

    #[test]
    fn fails_when_a_kept_alive_holding_vanishes() {
        let h = vec![
            op(1, 1, OpKind::Acquire, "a", 0, 10, Outcome::Ok, "x", Some(7)),
            op(
                2,
                1,
                OpKind::Renew,
                "a",
                300,
                310,
                Outcome::Ok,
                "x",
                Some(7),
            ),
            read(3, 3, "a", 400, 410, None, None),
        ];
        assert!(run(&h).failed());
    }
}
