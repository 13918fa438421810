//! The sequential model of one lock (also of one election or one name): who holds
//! it, with which token, until when its lease is guaranteed, and the largest token
//! granted on it so far. Lease expiry is a spontaneous step the model may take
//! whenever the holder's lease is no longer guaranteed.

use std::collections::BTreeMap;

use crate::history::{Op, OpKind, Outcome};

/// The holder in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Holding {
    /// Interned holder identity.
    pub who: u32,
    /// Token, when known (an unknown-outcome grant's token is learned from a read).
    pub token: Option<u64>,
    /// The lease may not expire before this time (ns).
    pub protected_until: u64,
}

/// State of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ModelState {
    /// The current holder.
    pub holder: Option<Holding>,
    /// The largest token granted so far on this key.
    pub max_token: u64,
}

/// How the model sees one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Grant,
    Check { refresh: bool },
    Keepalive,
    GiveUp,
    Read,
}

/// One operation prepared for the model.
#[derive(Debug, Clone)]
pub struct ModelOp {
    role: Role,
    outcome: Outcome,
    who: Option<u32>,
    token: Option<u64>,
    held: Option<bool>,
    /// A failure code that says "someone else holds it" / "you do not hold it".
    conflict: bool,
    /// The failure says the caller's lease is gone (so it holds nothing).
    lease_gone: bool,
    invoke_ns: u64,
    complete_ns: u64,
    ttl_ns: u64,
}

/// Interns holders and turns history ops into model ops.
#[derive(Debug, Default)]
pub struct LockModel {
    holders: BTreeMap<String, u32>,
}

/// Codes that are definite statements about the current holder.
const CONFLICT: &[&str] = &[
    "lock_held",
    "not_elected",
    "name_taken",
    "lock_lost",
    "not_leader",
    "not_owner",
    "lease_not_found",
];

impl ModelOp {
    /// Whether the outcome is unknown (it may never have taken effect).
    pub fn is_unknown(&self) -> bool {
        self.outcome == Outcome::Unknown
    }
}

impl LockModel {
    /// Prepares an op; `None` for ops the model ignores (register writes, and
    /// unknown outcomes of ops whose effect is dominated by doing nothing).
    pub fn prepare(&mut self, op: &Op) -> Option<ModelOp> {
        let role = match op.f {
            OpKind::Acquire | OpKind::Campaign | OpKind::Register => Role::Grant,
            OpKind::Renew => Role::Check { refresh: true },
            OpKind::Proclaim => Role::Check { refresh: false },
            OpKind::Keepalive => Role::Keepalive,
            OpKind::Release | OpKind::Resign | OpKind::Unregister => Role::GiveUp,
            OpKind::Read => Role::Read,
            OpKind::Write
            | OpKind::AcquirePermits
            | OpKind::RenewPermits
            | OpKind::ReleasePermits => return None,
        };
        if op.outcome == Outcome::Unknown && !matches!(role, Role::Grant | Role::GiveUp) {
            return None;
        }
        let conflict = op.error.as_deref().is_some_and(|c| CONFLICT.contains(&c));
        if op.outcome == Outcome::Fail && !conflict {
            // A definite failure that says nothing about the holder (bad input, connect).
            return None;
        }
        let next = u32::try_from(self.holders.len()).unwrap_or(u32::MAX);
        let who = op
            .holder
            .as_ref()
            .map(|h| *self.holders.entry(h.clone()).or_insert(next));
        Some(ModelOp {
            role,
            outcome: op.outcome,
            who,
            token: op.token,
            held: op.held,
            conflict,
            lease_gone: op.error.as_deref() == Some("lease_not_found"),
            invoke_ns: op.invoke_ns,
            complete_ns: if op.outcome == Outcome::Unknown {
                u64::MAX
            } else {
                op.complete_ns
            },
            ttl_ns: op.ttl_ms.unwrap_or(0) * 1_000_000,
        })
    }

    /// The states the model can be in after `op`, from `s` (empty: `op` cannot
    /// happen here). The holder's lease may first expire if it is no longer guaranteed
    /// at some point before `op` completed. For unknown outcomes only the "took
    /// effect" branches are returned: "no effect" is the caller's business.
    pub fn step(&self, s: &ModelState, op: &ModelOp) -> Vec<ModelState> {
        let mut out = Vec::new();
        apply(s, op, &mut out);
        if let Some(h) = s.holder {
            if op.complete_ns > h.protected_until {
                let expired = ModelState { holder: None, ..*s };
                apply(&expired, op, &mut out);
            }
        }
        out.dedup();
        out
    }
}

/// Whether the holding is `who`'s with a token compatible with `token`; returns the
/// holding with the token filled in.
fn mine(s: &ModelState, who: Option<u32>, token: Option<u64>) -> Option<Holding> {
    let h = s.holder?;
    if Some(h.who) != who {
        return None;
    }
    match (h.token, token) {
        (Some(a), Some(b)) if a != b => None,
        (None, Some(b)) => Some(Holding {
            token: Some(b),
            ..h
        }),
        _ => Some(h),
    }
}

fn apply(s: &ModelState, op: &ModelOp, out: &mut Vec<ModelState>) {
    let refresh_until = op.invoke_ns.saturating_add(op.ttl_ns);
    match (op.role, op.outcome) {
        (Role::Grant, Outcome::Ok) => {
            if let Some(h) = mine(s, op.who, op.token) {
                out.push(ModelState {
                    holder: Some(h),
                    ..*s
                });
            } else if s.holder.is_none() {
                let Some(t) = op.token else { return };
                let Some(who) = op.who else { return };
                if t > s.max_token {
                    out.push(ModelState {
                        holder: Some(Holding {
                            who,
                            token: Some(t),
                            protected_until: refresh_until,
                        }),
                        max_token: t,
                    });
                }
            }
        }
        (Role::Grant, Outcome::Unknown) => {
            if s.holder.is_none() {
                if let Some(who) = op.who {
                    out.push(ModelState {
                        holder: Some(Holding {
                            who,
                            token: None,
                            protected_until: refresh_until,
                        }),
                        ..*s
                    });
                }
            }
        }
        (Role::Grant, Outcome::Fail) if op.lease_gone => {
            if mine(s, op.who, None).is_none() {
                out.push(*s);
            }
        }
        (Role::Grant, Outcome::Fail) => {
            if s.holder.is_some_and(|h| Some(h.who) != op.who) {
                out.push(*s);
            }
        }
        (Role::Check { refresh }, Outcome::Ok) => {
            if let Some(mut h) = mine(s, op.who, op.token) {
                if refresh {
                    h.protected_until = h.protected_until.max(refresh_until);
                }
                out.push(ModelState {
                    holder: Some(h),
                    ..*s
                });
            }
        }
        (Role::Keepalive, Outcome::Ok) => {
            let mut next = *s;
            if let Some(h) = next.holder.as_mut() {
                if Some(h.who) == op.who {
                    h.protected_until = h.protected_until.max(refresh_until);
                }
            }
            out.push(next);
        }
        (Role::GiveUp, Outcome::Ok | Outcome::Unknown) => {
            if mine(s, op.who, op.token).is_some() {
                out.push(ModelState { holder: None, ..*s });
            }
        }
        (Role::Check { .. } | Role::Keepalive | Role::GiveUp, Outcome::Fail) => {
            if mine(s, op.who, op.token).is_none() && op.conflict {
                out.push(*s);
            }
        }
        (Role::Read, Outcome::Ok) => match (op.held, s.holder) {
            (Some(false), None) => out.push(*s),
            (Some(true), Some(_)) => {
                if let Some(h) = mine(s, op.who, op.token) {
                    out.push(ModelState {
                        holder: Some(h),
                        ..*s
                    });
                }
            }
            _ => {}
        },
        // Unknown checks, keepalives and reads were filtered out by `prepare`;
        // failed reads say nothing.
        _ => out.push(*s),
    }
}
