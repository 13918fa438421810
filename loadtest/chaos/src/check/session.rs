//! A holder session: one lease's holding of one key, from its grant to its end,
//! with the windows in which the server promised to keep it.

use std::collections::BTreeMap;

use crate::history::{Op, OpKind, Outcome};

/// The ops of one (key, holder) session. Workers give every lease session a unique
/// holder string, so reads can name it too.
#[derive(Debug, Default)]
pub struct Session<'a> {
    /// The successful grants (the first, plus idempotent re-grants).
    pub grants: Vec<&'a Op>,
    /// Every op of the session, invoke order.
    pub ops: Vec<&'a Op>,
}

impl<'a> Session<'a> {
    /// The session's token (of its first successful grant).
    pub fn token(&self) -> Option<u64> {
        self.grants.first().and_then(|g| g.token)
    }

    /// Invoke time of the first give-up (release, resign, unregister) that succeeded
    /// or may have: from then on the holding may legitimately be gone.
    pub fn gave_up_at(&self) -> Option<u64> {
        self.ops
            .iter()
            .filter(|o| o.f.gives_up() && o.outcome != Outcome::Fail)
            .map(|o| o.invoke_ns)
            .min()
    }

    /// Whether a give-up is known to have succeeded.
    pub fn released_ok(&self) -> bool {
        self.ops.iter().any(|o| o.f.gives_up() && o.is_ok())
    }

    /// The windows `[from, until]` (ns) in which the server must have kept the lease
    /// (so the holding, unless given up): after each successful TTL refresh R, from
    /// R's completion until R's invoke + TTL (the server counts from receipt, which
    /// is no earlier than the invoke). Clipped at the first give-up.
    pub fn protected(&self) -> Vec<(u64, u64, &'a Op)> {
        let gave_up = self.gave_up_at().unwrap_or(u64::MAX);
        let first_grant = self.grants.first().map(|g| g.id);
        self.ops
            .iter()
            .filter(|o| o.is_ok() && refreshes(o, first_grant))
            .filter_map(|o| {
                let ttl_ns = o.ttl_ms? * 1_000_000;
                let until = (o.invoke_ns + ttl_ns).min(gave_up);
                (until > o.complete_ns).then_some((o.complete_ns, until, *o))
            })
            .collect()
    }

    /// Latest `invoke + ttl` of a successful refresh (the lease may not expire before).
    pub fn protected_until(&self) -> Option<u64> {
        self.protected().iter().map(|(_, u, _)| *u).max()
    }
}

/// Only a lease's creation (the first grant), renew and keepalive restart its TTL
/// by the contract; a re-registration or proclaim is not counted.
fn refreshes(o: &Op, first_grant: Option<u64>) -> bool {
    match o.f {
        OpKind::Renew | OpKind::Keepalive | OpKind::RenewPermits => true,
        OpKind::Acquire | OpKind::Campaign | OpKind::Register | OpKind::AcquirePermits => {
            Some(o.id) == first_grant
        }
        _ => false,
    }
}

/// Sessions by (key, holder), for ops that carry a holder.
pub fn sessions(ops: &[Op]) -> BTreeMap<(&str, &str), Session<'_>> {
    let mut m: BTreeMap<(&str, &str), Session<'_>> = BTreeMap::new();
    for op in ops {
        if op.f == OpKind::Read || op.f == OpKind::Write {
            continue;
        }
        let Some(holder) = op.holder.as_deref() else {
            continue;
        };
        let s = m.entry((op.key.as_str(), holder)).or_default();
        if op.f.is_grant() && op.is_ok() {
            s.grants.push(op);
        }
        s.ops.push(op);
    }
    m
}
