//! The applied state, shared between openraft's state-machine task and readers.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use baton_core::{Outcome, StateMachine};
use tokio::sync::watch;

use crate::type_config::{LogId, StoredMembership};

/// Everything applied so far: the state machine and the Raft bookkeeping that
/// must move in step with it.
#[derive(Clone, Debug, Default)]
pub struct AppliedState {
    /// The lock, lease, election and name state.
    pub machine: StateMachine,
    /// The last log entry applied to `machine` (or covered by its snapshot).
    pub last_applied: Option<LogId>,
    /// The last membership configuration applied.
    pub membership: StoredMembership,
}

/// Told about every applied change, so the raft layer can answer waiting
/// requests and feed watch streams.
///
/// Called from openraft's state-machine task (`applied` after the state was
/// updated and the lock released) or the restore that follows a snapshot
/// install; a slow observer delays applying, so hand work off (e.g. to a
/// channel) rather than doing it here.
pub trait ApplyObserver: Send + Sync + 'static {
    /// The outcomes of the normal entry at `log_index`, one per request of its
    /// batch, in request order, and the batch's leader-stamped `now_ms`. Called
    /// for every normal entry, in log order, including entries re-applied from
    /// the log at startup.
    fn applied(&self, log_index: u64, now_ms: u64, outcomes: &[Outcome]);

    /// A snapshot replaced the whole state with `machine`, at revision
    /// `revision`. Outcomes of the entries it covers are never delivered.
    /// Called with the state's write lock held, so that no reader sees the new
    /// state before this ran: do not take the lock again, and be quick
    /// (readers wait).
    fn snapshot_installed(&self, revision: u64, machine: &StateMachine);
}

/// The applied state behind a lock, plus change notification.
///
/// openraft owns the [`crate::StateMachineStore`]; everything else reads the
/// state through an `Arc<SharedState>` taken from it before it was handed over.
pub struct SharedState {
    applied: RwLock<AppliedState>,
    revision: watch::Sender<u64>,
    observer: RwLock<Option<Arc<dyn ApplyObserver>>>,
}

impl fmt::Debug for SharedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedState")
            .field("revision", &*self.revision.borrow())
            .field("applied_index", &self.applied_index())
            .finish_non_exhaustive()
    }
}

impl SharedState {
    pub(crate) fn new(applied: AppliedState) -> Self {
        let (revision, _) = watch::channel(applied.machine.revision());
        SharedState {
            applied: RwLock::new(applied),
            revision,
            observer: RwLock::new(None),
        }
    }

    /// Read access to the applied state.
    ///
    /// Hold the guard briefly: applying waits for it.
    pub fn read(&self) -> RwLockReadGuard<'_, AppliedState> {
        // A panic while applying already stops openraft; readers may still look.
        self.applied.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, AppliedState> {
        self.applied.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state machine revision after the latest apply or snapshot install.
    ///
    /// A subscriber that sees revision `r` can rely on the observer having been
    /// told about every outcome up to `r`.
    pub fn subscribe_applied(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }

    /// The index of the last applied log entry, if any.
    pub fn applied_index(&self) -> Option<u64> {
        self.read().last_applied.as_ref().map(|log_id| log_id.index)
    }

    /// Waits until the applied state covers log index `index`, as a replica
    /// must before it serves a read at that index.
    ///
    /// The applied state decides, not openraft's metrics: openraft counts an
    /// installed snapshot as applied once it is stored, while it is restored
    /// into memory after that (see [`crate::StateMachineStore`]).
    pub async fn applied_at_least(&self, index: u64) {
        // Subscribed before looking, so a change in between is not missed.
        let mut changes = self.revision.subscribe();
        while self.applied_index() < Some(index) {
            if changes.changed().await.is_err() {
                // Unreachable (`self` holds the sender); never claim the index.
                std::future::pending::<()>().await;
            }
        }
    }

    pub(crate) fn publish_revision(&self, revision: u64) {
        self.revision.send_replace(revision);
    }

    pub(crate) fn set_observer(&self, observer: Arc<dyn ApplyObserver>) {
        *self
            .observer
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(observer);
    }

    pub(crate) fn observer(&self) -> Option<Arc<dyn ApplyObserver>> {
        self.observer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
