//! Requests waiting for a queued lock or candidacy: the apply path wakes them.

use std::collections::HashMap;
use std::sync::Mutex;

use baton_core::{EndReason, Event, EventKind, Grant, HeldLock, PermitGrant, WaiterId};
use tokio::sync::oneshot;

/// How a queued request's wait ended.
#[derive(Clone, Debug, PartialEq)]
pub enum WaitEnd {
    /// The lock was granted: one grant per lock, several for a multi-acquire
    /// (granted together, in one apply).
    Granted(Vec<HeldLock>),
    /// Permits of a semaphore were granted.
    Permits(PermitGrant),
    /// The candidate was elected, with its value.
    Elected(Grant, String),
    /// It left the queue without a grant.
    Ended(EndReason),
}

/// Waiter id -> the HTTP request waiting for it. Registered before the command
/// is proposed, so a grant applied at any time after is never missed.
#[derive(Default)]
pub struct WaiterRegistry {
    waiting: Mutex<HashMap<WaiterId, oneshot::Sender<WaitEnd>>>,
}

impl WaiterRegistry {
    /// Starts listening for `waiter`'s end.
    pub fn register(&self, waiter: WaiterId) -> oneshot::Receiver<WaitEnd> {
        let (tx, rx) = oneshot::channel();
        self.lock().insert(waiter, tx);
        rx
    }

    /// Stops listening (the request finished another way).
    pub fn forget(&self, waiter: WaiterId) {
        self.lock().remove(&waiter);
    }

    /// Number of requests waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no request waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<WaiterId, oneshot::Sender<WaitEnd>>> {
        // A panic while holding this map cannot leave it inconsistent.
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes the requests whose waits these events end. The locks of one
    /// multi-acquire are granted in one apply, so their events arrive together
    /// and wake the request once, with every grant.
    pub fn on_events(&self, events: &[Event]) {
        let mut ends: Vec<(WaiterId, WaitEnd)> = Vec::new();
        for event in events {
            let end = match &event.kind {
                EventKind::LockAcquired {
                    grant,
                    waiter: Some(waiter),
                    mode,
                } => {
                    let held = HeldLock {
                        grant: grant.clone(),
                        mode: *mode,
                    };
                    match ends.iter_mut().find(|(w, _)| w == waiter) {
                        Some((_, WaitEnd::Granted(grants))) => {
                            grants.push(held);
                            continue;
                        }
                        _ => (*waiter, WaitEnd::Granted(vec![held])),
                    }
                }
                EventKind::Elected {
                    grant,
                    value,
                    waiter: Some(waiter),
                } => (*waiter, WaitEnd::Elected(grant.clone(), value.clone())),
                EventKind::SemaphoreAcquired {
                    grant,
                    permits,
                    limit,
                    waiter: Some(waiter),
                } => (
                    *waiter,
                    WaitEnd::Permits(PermitGrant {
                        grant: grant.clone(),
                        permits: *permits,
                        limit: *limit,
                    }),
                ),
                EventKind::LockWaitEnded { waiter, reason, .. }
                | EventKind::CampaignEnded { waiter, reason, .. }
                | EventKind::SemaphoreWaitEnded { waiter, reason, .. } => {
                    if ends.iter().any(|(w, _)| w == waiter) {
                        // A multi-acquire leaves every line at once: one end.
                        continue;
                    }
                    (*waiter, WaitEnd::Ended(*reason))
                }
                _ => continue,
            };
            ends.push(end);
        }
        if ends.is_empty() {
            return;
        }
        let mut waiting = self.lock();
        for (waiter, end) in ends {
            if let Some(tx) = waiting.remove(&waiter) {
                // The request may have gone away meanwhile; nothing to do then.
                let _ = tx.send(end);
            }
        }
    }
}
