//! Proposing a request that may queue, and waiting for its grant without polling.

use std::sync::Arc;
use std::time::Duration;

use baton_core::{Command, IdempotencyKey, Outcome, Reply, Request, WaiterId};
use tokio::sync::oneshot;

use crate::error::RaftLayerError;
use crate::metrics::WaitOutcome;
use crate::node::Node;
use crate::waiters::WaitEnd;

/// What a queued request is waiting for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// A lock's queue (for a multi-acquire, any one of its locks: cancelling
    /// it there takes it out of every line).
    Lock(String),
    /// An election's candidate queue.
    Election(String),
    /// A semaphore's queue.
    Semaphore(String),
}

/// How a possibly-waiting request ended.
#[derive(Debug)]
pub enum Waited {
    /// The command answered without queueing (granted at once, or refused).
    Immediate(Outcome),
    /// It queued, and its wait ended: granted, elected, or its lease went.
    Ended(WaitEnd),
    /// It queued and the wait timed out; it has left the queue.
    TimedOut,
    /// It queued and the caller's `abandoned` future fired (its client went away):
    /// it leaves the queue through the log in the background.
    Abandoned,
}

/// Cleans up after a request that stops waiting for any reason other than a
/// normal end: its place in the queue is dropped, and a grant that raced with
/// the abandonment is handed back.
struct AbandonGuard {
    node: Arc<Node>,
    kind: QueueKind,
    waiter: WaiterId,
    rx: Option<oneshot::Receiver<WaitEnd>>,
    armed: bool,
}

impl AbandonGuard {
    fn disarm(&mut self) {
        self.armed = false;
        self.node.waiters().forget(self.waiter);
    }
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let node = self.node.clone();
        let kind = self.kind.clone();
        let waiter = self.waiter;
        let rx = self.rx.take();
        // Drop cannot await: the clean-up runs as its own task.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let granted = cancel(&node, &kind, waiter, rx).await;
                node.waiters().forget(waiter);
                match granted {
                    Ok(Some(end)) => hand_back(&node, &kind, end).await,
                    Ok(None) => {}
                    Err(error) => tracing::warn!(
                        %error,
                        "could not confirm the cancel of an abandoned wait; its lease will end it"
                    ),
                }
            });
        }
    }
}

/// Principal of the idempotency keys the node itself attaches to its own
/// clean-up commands (never a client's: client principals come from auth).
const INTERNAL_PRINCIPAL: &str = "baton:internal";

/// How long a cancel keeps trying (across leader changes) before giving up.
const CANCEL_PERSISTENCE: Duration = Duration::from_secs(15);

/// Takes `waiter` out of its queue through the log, retrying until the cancel is
/// known to have been applied: a waiter left queued would later be granted a
/// lock or an election nobody waits for. Returns how the wait ended if it was no
/// longer queued (a grant that raced with the cancel), or `Err` when the cancel
/// could not be confirmed (no quorum for a long time).
async fn cancel(
    node: &Node,
    kind: &QueueKind,
    waiter: WaiterId,
    mut rx: Option<oneshot::Receiver<WaitEnd>>,
) -> Result<Option<WaitEnd>, RaftLayerError> {
    let command = match kind {
        QueueKind::Lock(name) => Command::CancelWait {
            name: name.clone(),
            waiter,
        },
        QueueKind::Election(name) => Command::CancelCampaign {
            name: name.clone(),
            waiter,
        },
        QueueKind::Semaphore(name) => Command::CancelPermitWait {
            name: name.clone(),
            waiter,
        },
    };
    // Keyed, so a retry after a lost answer is applied once.
    let request = Request {
        idempotency: Some(IdempotencyKey {
            principal: INTERNAL_PRINCIPAL.to_owned(),
            key: format!("cancel-{}", waiter.0),
            fingerprint: waiter.0,
        }),
        command,
    };
    let deadline = tokio::time::Instant::now() + CANCEL_PERSISTENCE;
    let outcome = loop {
        match node.propose(request.clone()).await {
            Ok(outcome) => break outcome,
            Err(error) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(%error, "cancel not confirmed yet; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => return Err(error),
        }
    };
    if matches!(outcome.result, Ok(Reply::WaitCancelled)) {
        return Ok(None);
    }
    // Not queued any more: its grant or end was applied before the cancel. The
    // outcome came from the leader; this replica delivers the end once it has
    // applied that far.
    node.wait_for_revision(outcome.revision, CANCEL_PERSISTENCE)
        .await?;
    Ok(rx.as_mut().and_then(|rx| rx.try_recv().ok()))
}

/// Gives back a grant nobody will use.
async fn hand_back(node: &Node, kind: &QueueKind, end: WaitEnd) {
    let commands = match (kind, end) {
        (QueueKind::Lock(_), WaitEnd::Granted(held)) => held
            .into_iter()
            .map(|held| Command::Release {
                name: held.grant.name,
                lease_id: held.grant.lease_id,
                token: held.grant.token,
            })
            .collect(),
        (QueueKind::Election(name), WaitEnd::Elected(grant, _)) => vec![Command::Resign {
            name: name.clone(),
            lease_id: grant.lease_id,
            token: grant.token,
        }],
        (QueueKind::Semaphore(name), WaitEnd::Permits(permits)) => vec![Command::ReleasePermits {
            name: name.clone(),
            lease_id: permits.grant.lease_id,
            token: permits.grant.token,
        }],
        _ => return,
    };
    for command in commands {
        if let Err(error) = node.propose(Request::plain(command)).await {
            tracing::warn!(%error, "could not hand back an abandoned grant; its lease will expire");
        }
    }
}

/// The body of [`Node::propose_and_wait`].
pub(crate) async fn propose_and_wait(
    node: &Arc<Node>,
    request: Request,
    kind: QueueKind,
    waiter: WaiterId,
    wait: Duration,
    abandoned: impl std::future::Future<Output = ()>,
) -> Result<Waited, RaftLayerError> {
    let rx = node.waiters().register(waiter);
    let mut guard = AbandonGuard {
        node: node.clone(),
        kind: kind.clone(),
        waiter,
        rx: Some(rx),
        armed: true,
    };
    let outcome = node.propose(request).await?;
    let queued_as = outcome.result.as_ref().ok().and_then(Reply::queued_waiter);
    match queued_as {
        Some(queued) if queued == waiter => {}
        Some(_) | None => {
            // Answered at once, or this lease already waits under another
            // request's id (that request keeps its place).
            guard.disarm();
            return Ok(Waited::Immediate(outcome));
        }
    }
    let queued_at = std::time::Instant::now();
    node.metrics.wait_started(&kind);
    let waited = wait_in_line(node, &mut guard, &kind, waiter, wait, abandoned).await;
    let outcome = match &waited {
        Ok(Waited::Ended(WaitEnd::Ended(_))) => WaitOutcome::LeaseEnded,
        Ok(Waited::Ended(_)) => WaitOutcome::Granted,
        Ok(Waited::TimedOut) => WaitOutcome::TimedOut,
        Ok(Waited::Abandoned) => WaitOutcome::ClientGone,
        Ok(Waited::Immediate(_)) | Err(_) => WaitOutcome::Failed,
    };
    node.metrics.wait_ended(&kind, queued_at, outcome);
    waited
}

/// The wait of a request that has queued, until its end (see
/// [`propose_and_wait`]).
async fn wait_in_line(
    node: &Arc<Node>,
    guard: &mut AbandonGuard,
    kind: &QueueKind,
    waiter: WaiterId,
    wait: Duration,
    abandoned: impl std::future::Future<Output = ()>,
) -> Result<Waited, RaftLayerError> {
    let trace = crate::trace_context::QueuedWait::start(wait);
    let ended = {
        let Some(rx) = guard.rx.as_mut() else {
            guard.disarm();
            return Ok(Waited::TimedOut);
        };
        tokio::select! {
            ended = tokio::time::timeout(wait, rx) => ended,
            // Returning with the guard armed cancels the wait in the background.
            () = abandoned => {
                trace.end("abandoned");
                return Ok(Waited::Abandoned);
            }
        }
    };
    trace.end(match &ended {
        Ok(Ok(WaitEnd::Ended(_))) => "lease_or_holding_ended",
        Ok(Ok(_)) => "granted",
        Ok(Err(_)) => "interrupted",
        Err(_) => "timed_out",
    });
    match ended {
        Ok(Ok(end)) => {
            guard.disarm();
            Ok(Waited::Ended(end))
        }
        Ok(Err(_)) => {
            guard.disarm();
            Err(RaftLayerError::unavailable("the wait was interrupted"))
        }
        Err(_) => {
            let rx = guard.rx.take();
            let raced = cancel(node, kind, waiter, rx).await;
            guard.disarm();
            match raced {
                Ok(Some(end)) => Ok(Waited::Ended(end)),
                Ok(None) => Ok(Waited::TimedOut),
                // Still queued as far as anyone knows: saying "timed out" would
                // be a lie if the grant comes later.
                Err(error) => Err(RaftLayerError::outcome_unknown(format!(
                    "the wait timed out but leaving the queue was not confirmed ({error})"
                ))),
            }
        }
    }
}
