//! Callbacks used by Storage API

use std::io;

use tokio::sync::mpsc;
use tokio::sync::oneshot;

use crate::async_runtime::AsyncOneshotSendExt;
use crate::core::notify::Notify;
use crate::raft_state::io_state::log_io_id::LogIOId;
use crate::type_config::alias::OneshotSenderOf;
use crate::LogId;
use crate::RaftTypeConfig;
use crate::StorageIOError;
use crate::Vote;

/// A oneshot callback for completion of log io operation.
pub struct LogFlushed<C>
where C: RaftTypeConfig
{
    log_io_id: LogIOId<C::NodeId>,
    /// Taken when the report is made; what is left on drop is reported as a
    /// failure (see `Drop`).
    report: Option<FlushReport<C>>,
    awaited: bool,
}

/// Baton patch: where a [`LogFlushed`] report goes.
enum FlushReport<C>
where C: RaftTypeConfig
{
    /// To whoever awaits the oneshot (upstream's only way).
    Oneshot(OneshotSenderOf<C, Result<LogIOId<C::NodeId>, io::Error>>),
    /// Straight to the Raft core as [`Notify::LocalLogFlushed`]: a leader's own
    /// append, which the core does not wait for (`RaftCore::submit_leader_append`).
    Core {
        tx_notify: mpsc::UnboundedSender<Notify<C>>,
        vote: Vote<C::NodeId>,
        last_log_id: LogId<C::NodeId>,
    },
}

impl<C> LogFlushed<C>
where C: RaftTypeConfig
{
    pub(crate) fn new(
        log_io_id: LogIOId<C::NodeId>,
        tx: OneshotSenderOf<C, Result<LogIOId<C::NodeId>, io::Error>>,
    ) -> Self {
        Self {
            log_io_id,
            report: Some(FlushReport::Oneshot(tx)),
            awaited: false,
        }
    }

    /// Baton patch: a report of the leader's own append, posted to the core as
    /// [`Notify::LocalLogFlushed`] when the storage calls
    /// [`Self::log_io_completed`] (no task waits for it).
    pub(crate) fn to_core(
        vote: Vote<C::NodeId>,
        last_log_id: LogId<C::NodeId>,
        tx_notify: mpsc::UnboundedSender<Notify<C>>,
    ) -> Self {
        Self {
            log_io_id: LogIOId::new(vote.clone(), Some(last_log_id.clone())),
            report: Some(FlushReport::Core {
                tx_notify,
                vote,
                last_log_id,
            }),
            awaited: false,
        }
    }

    /// Baton patch: marks a flush the Raft core waits for before it does
    /// anything else (see [`Self::awaited`]).
    pub(crate) fn awaited_by_core(mut self) -> Self {
        self.awaited = true;
        self
    }

    /// Baton patch: whether the Raft core waits for this flush before it runs
    /// its next command (a follower's append, a single node's). A storage may
    /// then write on the calling task, saving the hand-over to a writer and
    /// back; an append it is not waited for (a leader's, which replicates
    /// meanwhile) must not block the caller for its sync.
    pub fn awaited(&self) -> bool {
        self.awaited
    }

    /// Report log io completion event.
    ///
    /// It will be called when the log is successfully appended to the storage or an error occurs.
    pub fn log_io_completed(mut self, result: Result<(), io::Error>) {
        if let Err(e) = &result {
            tracing::error!("LogFlush error: {}, while flushing upto {}", e, self.log_io_id);
        }
        if let Some(report) = self.report.take() {
            report.send(&self.log_io_id, result);
        }
    }
}

/// Baton patch: a report to the core that the storage dropped unmade (its
/// writer thread panicked, say) is a failed flush, as upstream's oneshot makes
/// it: the awaiting side sees the sender dropped. Without this the leader
/// would silently never count itself towards the quorum.
impl<C> Drop for LogFlushed<C>
where C: RaftTypeConfig
{
    fn drop(&mut self) {
        if let Some(report @ FlushReport::Core { .. }) = self.report.take() {
            let dropped = io::Error::other("the log storage dropped the flush report unmade");
            report.send(&self.log_io_id, Err(dropped));
        }
    }
}

impl<C> FlushReport<C>
where C: RaftTypeConfig
{
    /// Makes the report: `result` goes to whoever awaits the oneshot, or to the
    /// core as [`Notify::LocalLogFlushed`].
    fn send(self, log_io_id: &LogIOId<C::NodeId>, result: Result<(), io::Error>) {
        match self {
            FlushReport::Oneshot(tx) => {
                if let Err(e) = tx.send(result.map(|_| log_io_id.clone())) {
                    tracing::error!("failed to send log io completion event: {:?}", e);
                }
            }
            FlushReport::Core {
                tx_notify,
                vote,
                last_log_id,
            } => {
                // The core has stopped when this fails: nothing waits.
                let _ = tx_notify.send(Notify::LocalLogFlushed {
                    vote,
                    last_log_id,
                    result,
                });
            }
        }
    }
}

/// A oneshot callback for completion of applying logs to state machine.
pub struct LogApplied<C>
where C: RaftTypeConfig
{
    last_log_id: LogId<C::NodeId>,
    tx: oneshot::Sender<Result<(LogId<C::NodeId>, Vec<C::R>), StorageIOError<C::NodeId>>>,
}

impl<C> LogApplied<C>
where C: RaftTypeConfig
{
    #[allow(dead_code)]
    pub(crate) fn new(
        last_log_id: LogId<C::NodeId>,
        tx: oneshot::Sender<Result<(LogId<C::NodeId>, Vec<C::R>), StorageIOError<C::NodeId>>>,
    ) -> Self {
        Self { last_log_id, tx }
    }

    /// Report apply io completion event.
    ///
    /// It will be called when the log is successfully applied to the state machine or an error
    /// occurs.
    pub fn completed(self, result: Result<Vec<C::R>, StorageIOError<C::NodeId>>) {
        let res = match result {
            Ok(x) => {
                tracing::debug!("LogApplied upto {}", self.last_log_id);
                let resp = (self.last_log_id.clone(), x);
                self.tx.send(Ok(resp))
            }
            Err(e) => {
                tracing::error!("LogApplied error: {}, while applying upto {}", e, self.last_log_id);
                self.tx.send(Err(e))
            }
        };

        if let Err(_e) = res {
            tracing::error!("failed to send apply complete event, last_log_id: {}", self.last_log_id);
        }
    }
}
