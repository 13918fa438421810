//! Requests waiting for a queued lock or candidacy: the apply path wakes them.

use std::collections::HashMap;
use std::sync::Mutex;

use baton_core::{EndReason, Event, EventKind, Grant, WaiterId};
use tokio::sync::oneshot;

/// How a queued request's wait ended.
#[derive(Clone, Debug, PartialEq)]
pub enum WaitEnd {
    /// The lock was granted.
    Granted(Grant),
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

    /// Wakes the requests whose waits these events end.
    pub fn on_events(&self, events: &[Event]) {
        let mut waiting = None;
        for event in events {
            let (waiter, end) = match &event.kind {
                EventKind::LockAcquired {
                    grant,
                    waiter: Some(waiter),
                } => (*waiter, WaitEnd::Granted(grant.clone())),
                EventKind::Elected {
                    grant,
                    value,
                    waiter: Some(waiter),
                } => (*waiter, WaitEnd::Elected(grant.clone(), value.clone())),
                EventKind::LockWaitEnded { waiter, reason, .. }
                | EventKind::CampaignEnded { waiter, reason, .. } => {
                    (*waiter, WaitEnd::Ended(*reason))
                }
                _ => continue,
            };
            let map = waiting.get_or_insert_with(|| self.lock());
            if let Some(tx) = map.remove(&waiter) {
                // The request may have gone away meanwhile; nothing to do then.
                let _ = tx.send(end);
            }
        }
    }
}
