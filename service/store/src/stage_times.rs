//! When this node appended (and synced) and applied each recent log entry, for
//! the trace spans of the proposal that wrote it.
//!
//! openraft appends and applies in its own tasks, which know nothing of the
//! request that caused an entry; the proposer learns the entry's index only when
//! its outcome comes back. So the store notes the times here, by index, and the
//! proposer turns them into `log.append`, `commit` and `apply` spans afterwards
//! (`baton_raft`'s `trace_context`). Nothing is noted unless trace spans are on
//! ([`recording`]): with tracing off this costs one cached callsite check per
//! entry.

use std::sync::Mutex;
use std::time::SystemTime;

/// How many recent entries are remembered: far more than can be in flight.
const SLOTS: usize = 256;

/// What this node saw of one log entry. Each field is `None` until it happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageTimes {
    /// The append (one synced RocksDB write batch) started.
    pub append_started: Option<SystemTime>,
    /// The append's synced write returned: the entry is durable here.
    pub synced: Option<SystemTime>,
    /// Entries in the append this entry was part of.
    pub append_entries: usize,
    /// Applying the entry to the state machine started.
    pub apply_started: Option<SystemTime>,
    /// The entry was applied.
    pub applied: Option<SystemTime>,
}

static RING: Mutex<Vec<(u64, StageTimes)>> = Mutex::new(Vec::new());

/// Whether trace spans are on (an OpenTelemetry layer takes target
/// `baton_trace`); the store notes times only then.
pub fn recording() -> bool {
    tracing::enabled!(target: "baton_trace", tracing::Level::INFO)
}

fn update(index: u64, f: impl FnOnce(&mut StageTimes)) {
    let Ok(mut ring) = RING.lock() else {
        return;
    };
    if ring.is_empty() {
        ring.resize(SLOTS, (u64::MAX, StageTimes::default()));
    }
    let slot = &mut ring[(index % SLOTS as u64) as usize];
    if slot.0 != index {
        *slot = (index, StageTimes::default());
    }
    f(&mut slot.1);
}

/// Notes an append of the entries `first..=last`, started at `started` and
/// synced now.
pub(crate) fn appended(first: u64, last: u64, started: SystemTime) {
    let synced = SystemTime::now();
    let entries = usize::try_from(last.saturating_sub(first) + 1).unwrap_or(usize::MAX);
    for index in first..=last {
        update(index, |times| {
            times.append_started = Some(started);
            times.synced = Some(synced);
            times.append_entries = entries;
        });
    }
}

/// Notes that entry `index` was applied, having started at `started`.
pub(crate) fn applied(index: u64, started: SystemTime) {
    let applied = SystemTime::now();
    update(index, |times| {
        times.apply_started = Some(started);
        times.applied = Some(applied);
    });
}

/// What this node noted about entry `index`, if it is still remembered.
pub fn stage_times(index: u64) -> Option<StageTimes> {
    let ring = RING.lock().ok()?;
    ring.get((index % SLOTS as u64) as usize)
        .filter(|(at, _)| *at == index)
        .map(|(_, times)| *times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_remembered_until_its_slot_is_reused() {
        let started = SystemTime::now();
        appended(1_000_001, 1_000_002, started);
        applied(1_000_002, started);
        let times = stage_times(1_000_002).expect("remembered");
        assert_eq!(times.append_started, Some(started));
        assert_eq!(times.append_entries, 2);
        assert!(times.synced.is_some() && times.applied.is_some());
        assert_eq!(stage_times(1_000_001).map(|t| t.applied), Some(None));
        // The same slot, a later entry: the old one is forgotten.
        appended(1_000_002 + SLOTS as u64, 1_000_002 + SLOTS as u64, started);
        assert_eq!(stage_times(1_000_002), None);
    }
}
