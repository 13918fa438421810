//! Proposal batching: many client requests, one log entry, one fsync.
//!
//! Requests queue in a channel. A single task takes whatever has gathered (up to
//! `max_batch`), stamps the batch with the leader's wall-clock time and limits,
//! and hands it to openraft without waiting for the commit. At most
//! `max_in_flight` entries are outstanding (1 by default: openraft 0.9 writes one
//! entry at a time, so a second would only wait behind the first); while they are
//! being synced and applied, new requests gather into the next batch. Under load a
//! batch grows to the number of requests that arrived during one fsync; when idle,
//! a request is proposed at once.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use baton_core::{Batch, Limits, Outcome, Request};
use baton_store::TypeConfig;
use openraft::error::ClientWriteError;
use openraft::Raft;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::error::RaftLayerError;

type Reply = oneshot::Sender<Result<Outcome, RaftLayerError>>;

struct Pending {
    request: Request,
    reply: Reply,
}

/// Submits requests to the Raft log in batches.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::UnboundedSender<Pending>,
}

/// Current wall-clock time in milliseconds since the Unix epoch.
pub fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Proposer {
    /// Starts the batching task.
    pub fn start(
        raft: Raft<TypeConfig>,
        limits: Limits,
        max_batch: usize,
        max_in_flight: usize,
    ) -> Proposer {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(
            raft,
            rx,
            limits,
            max_batch.max(1),
            Arc::new(Semaphore::new(max_in_flight.max(1))),
        ));
        Proposer { tx }
    }

    /// Proposes one request and waits until it is committed and applied.
    pub async fn propose(&self, request: Request) -> Result<Outcome, RaftLayerError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Pending { request, reply })
            .map_err(|_| RaftLayerError::unavailable("the node is shutting down"))?;
        rx.await
            .map_err(|_| RaftLayerError::unavailable("the proposal was dropped"))?
    }
}

async fn run(
    raft: Raft<TypeConfig>,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    limits: Limits,
    max_batch: usize,
    in_flight: Arc<Semaphore>,
) {
    loop {
        // Wait for a free slot first: requests that arrive meanwhile join the batch.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = rx.recv().await else {
            return;
        };
        let mut pending = vec![first];
        while pending.len() < max_batch {
            match rx.try_recv() {
                Ok(next) => pending.push(next),
                Err(_) => break,
            }
        }
        let (requests, replies): (Vec<Request>, Vec<Reply>) =
            pending.into_iter().map(|p| (p.request, p.reply)).unzip();
        let batch = Batch {
            now_ms: wall_clock_ms(),
            limits,
            requests,
        };
        match raft.client_write_ff(batch).await {
            Ok(response) => {
                tokio::spawn(async move {
                    let result = match response.await {
                        Ok(Ok(written)) => Ok(written.data),
                        Ok(Err(error)) => Err(client_write_error(error)),
                        Err(_) => Err(RaftLayerError::unavailable("raft stopped")),
                    };
                    drop(permit);
                    deliver(replies, result);
                });
            }
            Err(fatal) => {
                drop(permit);
                deliver(replies, Err(RaftLayerError::unavailable(fatal)));
            }
        }
    }
}

fn deliver(replies: Vec<Reply>, result: Result<Vec<Outcome>, RaftLayerError>) {
    match result {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok(outcome));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}

fn client_write_error(error: ClientWriteError<u64, baton_store::BatonNode>) -> RaftLayerError {
    match error {
        ClientWriteError::ForwardToLeader(forward) => RaftLayerError::NotLeader {
            leader_id: forward.leader_id,
            leader_api: forward.leader_node.map(|node| node.api_addr),
        },
        ClientWriteError::ChangeMembershipError(error) => RaftLayerError::unavailable(error),
    }
}
