//! Safety checkers over a history. Each returns a [`Verdict`] with explanations.

mod exclusive;
mod final_state;
mod lease_expiry;
mod linearizable;
mod lock_model;
mod realtime_order;
mod register;
mod session;
mod stale_ops;
mod tokens_unique;
mod verdict;

use std::collections::BTreeMap;

pub use exclusive::{check_exclusive, check_semaphore_limit};
pub use final_state::check_final_state;
pub use lease_expiry::check_lease_expiry;
pub use linearizable::{check_linearizable, LinearizableConfig};
pub use lock_model::{LockModel, ModelState};
pub use realtime_order::check_realtime_order;
pub use register::check_register;
pub use stale_ops::check_stale_ops;
pub use tokens_unique::check_tokens_unique;
pub use verdict::{Status, Verdict};

use crate::history::Op;
use crate::register::AcceptedWrite;

/// The process id of the harness's own final reads.
pub const FINAL_PROCESS: u32 = 0;

/// Everything the checkers look at.
#[derive(Debug, Clone, Default)]
pub struct CheckInput {
    /// Paired operations, sorted by invoke time.
    pub ops: Vec<Op>,
    /// The fenced register's final contents.
    pub register: BTreeMap<String, Vec<AcceptedWrite>>,
}

/// Runs every checker.
pub fn run_all(input: &CheckInput, lin: &LinearizableConfig) -> Vec<Verdict> {
    vec![
        check_tokens_unique(&input.ops),
        check_realtime_order(&input.ops),
        check_stale_ops(&input.ops),
        check_register(&input.ops, &input.register),
        check_final_state(&input.ops),
        check_lease_expiry(&input.ops),
        check_exclusive(&input.ops),
        check_semaphore_limit(&input.ops),
        check_linearizable(&input.ops, lin),
    ]
}

/// Keys that may have several holders at once (issue 17): locks taken in a mode
/// (shared-lock keys) and semaphores. The checkers that model a key as having one
/// holder (no-stale-success, linearizable, final-state) skip them; mutual-exclusion
/// judges their modes and semaphore-limit their permits.
pub(crate) fn multi_holder_keys(ops: &[Op]) -> std::collections::BTreeSet<&str> {
    ops.iter()
        .filter(|o| o.mode.is_some() || o.f.is_semaphore())
        .map(|o| o.key.as_str())
        .collect()
}

/// Ops grouped by key, each group in invoke order.
pub(crate) fn by_key(ops: &[Op]) -> BTreeMap<&str, Vec<&Op>> {
    let mut m: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        m.entry(op.key.as_str()).or_default().push(op);
    }
    m
}

#[cfg(test)]
pub(crate) mod testing {
    //! Builders for synthetic histories.
    use crate::history::{Op, OpKind, Outcome};

    /// An op with the given fields; times in milliseconds for readability.
    #[allow(clippy::too_many_arguments)]
    pub fn op(
        id: u64,
        process: u32,
        f: OpKind,
        key: &str,
        invoke_ms: u64,
        complete_ms: u64,
        outcome: Outcome,
        holder: &str,
        token: Option<u64>,
    ) -> Op {
        Op {
            id,
            process,
            f,
            key: key.into(),
            invoke_ns: invoke_ms * 1_000_000,
            complete_ns: complete_ms * 1_000_000,
            outcome,
            lease: Some(format!("lease-{holder}")),
            token,
            holder: Some(holder.into()),
            ttl_ms: Some(1000),
            error: None,
            held: None,
            seq: None,
            node: None,
            mode: None,
            permits: None,
            limit: None,
        }
    }

    /// A failed op with an error code.
    #[allow(clippy::too_many_arguments)]
    pub fn fail(
        id: u64,
        process: u32,
        f: OpKind,
        key: &str,
        invoke_ms: u64,
        complete_ms: u64,
        holder: &str,
        token: Option<u64>,
        code: &str,
    ) -> Op {
        let mut o = op(
            id,
            process,
            f,
            key,
            invoke_ms,
            complete_ms,
            Outcome::Fail,
            holder,
            token,
        );
        o.error = Some(code.into());
        o
    }

    /// A read answering `held` with `holder`/`token`.
    pub fn read(
        id: u64,
        process: u32,
        key: &str,
        invoke_ms: u64,
        complete_ms: u64,
        holder: Option<&str>,
        token: Option<u64>,
    ) -> Op {
        let mut o = op(
            id,
            process,
            OpKind::Read,
            key,
            invoke_ms,
            complete_ms,
            Outcome::Ok,
            "",
            token,
        );
        o.lease = None;
        o.held = Some(holder.is_some());
        o.holder = holder.map(str::to_owned);
        o
    }
}
