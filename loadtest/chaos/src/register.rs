//! The fenced register: a tiny resource guarded by fencing tokens. Workers write to
//! it while they believe they hold a lock or lead an election; it accepts a write
//! only with a token at least as high as the highest it has accepted for that key.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// One accepted write, as the register keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedWrite {
    /// Acceptance sequence number (per register, across keys).
    pub seq: u64,
    /// Token the writer presented (or believed it had, when it skipped fencing).
    pub token: u64,
    /// Who wrote.
    pub process: u32,
}

/// The register's answer to a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteResult {
    /// Accepted, with its sequence number.
    Accepted(u64),
    /// Rejected: the token is below the highest accepted one.
    Stale {
        /// The highest token accepted so far for the key.
        highest: u64,
    },
}

/// Shared, in-process; cheap to clone.
#[derive(Clone, Default)]
pub struct FencedRegister {
    inner: Arc<Mutex<State>>,
    /// Negative control: accept every write without looking at the token.
    unchecked: bool,
}

#[derive(Default)]
struct State {
    next_seq: u64,
    highest: BTreeMap<String, u64>,
    log: BTreeMap<String, Vec<AcceptedWrite>>,
}

impl FencedRegister {
    /// A register that checks tokens.
    pub fn new() -> Self {
        Self::default()
    }

    /// A register that does not check tokens (negative control).
    pub fn unchecked() -> Self {
        Self {
            unchecked: true,
            ..Self::default()
        }
    }

    /// Writes `token`'s value to `key`.
    pub fn write(&self, key: &str, token: u64, process: u32) -> WriteResult {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let highest = s.highest.get(key).copied().unwrap_or(0);
        if token < highest && !self.unchecked {
            return WriteResult::Stale { highest };
        }
        s.next_seq += 1;
        let seq = s.next_seq;
        s.highest.insert(key.to_owned(), highest.max(token));
        s.log
            .entry(key.to_owned())
            .or_default()
            .push(AcceptedWrite {
                seq,
                token,
                process,
            });
        WriteResult::Accepted(seq)
    }

    /// Every accepted write per key, in acceptance order (the register's final state).
    pub fn snapshot(&self) -> BTreeMap<String, Vec<AcceptedWrite>> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .log
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_a_smaller_token_and_accepts_equal_or_larger() {
        let r = FencedRegister::new();
        assert_eq!(r.write("k", 5, 1), WriteResult::Accepted(1));
        assert_eq!(r.write("k", 5, 1), WriteResult::Accepted(2));
        assert_eq!(r.write("k", 3, 2), WriteResult::Stale { highest: 5 });
        assert_eq!(r.write("other", 3, 2), WriteResult::Accepted(3));
        assert_eq!(r.write("k", 9, 2), WriteResult::Accepted(4));
        assert_eq!(r.snapshot()["k"].len(), 3);
    }

    #[test]
    fn the_unchecked_control_accepts_stale_tokens() {
        let r = FencedRegister::unchecked();
        assert_eq!(r.write("k", 5, 1), WriteResult::Accepted(1));
        assert_eq!(r.write("k", 3, 2), WriteResult::Accepted(2));
    }
}
