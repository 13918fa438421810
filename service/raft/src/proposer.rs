//! Proposal batching: many client requests, one log entry, one fsync.
//!
//! Requests queue in a channel. A single task takes whatever has gathered (up to
//! `max_batch`), stamps the batch with the leader's wall-clock time and limits,
//! and hands it to openraft without waiting for the commit. A bounded number of
//! entries is outstanding ([`InFlight`]); while they are being synced, replicated
//! and applied, new requests gather into the next batch. Under load a batch grows
//! to the number of requests that arrived during one fsync; when idle, a request
//! is proposed at once. Background requests (the lease clock's slices of
//! expiries) go at most one to an entry, so that a storm of them is spread over
//! many entries and never makes the clients' requests wait for all of it.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton_core::{Batch, Limits, Outcome, Request};
use baton_store::TypeConfig;
use openraft::error::ClientWriteError;
use openraft::Raft;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::error::RaftLayerError;
use crate::metrics::ProposerMetrics;

type Reply = oneshot::Sender<Result<Outcome, RaftLayerError>>;

/// A queued request's fate, decided once by whoever gets there first: the
/// batching task takes it into an entry, or its caller gives up on it. A request
/// its caller gave up on is never proposed, so "not proposed" answers are true.
const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const ABANDONED: u8 = 2;

struct Pending {
    request: Request,
    reply: Reply,
    claim: Arc<AtomicU8>,
    lane: Lane,
    /// The requester's trace context, when its trace is sampled.
    trace: Option<opentelemetry::Context>,
}

impl Pending {
    /// Takes the request into an entry, unless its caller gave up on it.
    fn take(&self) -> bool {
        self.claim
            .compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Gives the request up when its caller stops waiting (timeout, or the caller's
/// future dropped because the client went away), unless it was already taken.
struct Abandon(Arc<AtomicU8>);

impl Abandon {
    /// True when the request is given up (it will never be proposed).
    fn give_up(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        self.give_up();
    }
}

/// Who a proposal is for, which decides how many of its kind an entry takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// A client's request: an entry takes every one waiting (up to `max_batch`).
    Client,
    /// The node's own bulk work (the lease clock's expiries): at most one per
    /// entry, so that applying it delays each entry's clients by one bounded
    /// slice. Further ones wait, in order, for the next entries.
    Background,
}

/// How many log entries the proposer keeps outstanding (proposed, not yet applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InFlight {
    /// One while this node is the only voter, two when followers must acknowledge.
    ///
    /// openraft 0.9 writes one entry at a time and awaits its flush, so on a lone
    /// voter a second entry would only wait behind the first (a request then
    /// waits about 2.5 fsync periods instead of 1.5). With followers, the leader
    /// can write the next entry while the previous one travels and is synced by
    /// the followers. Re-read for every entry, so a node that gains or loses
    /// voters adapts.
    Auto,
    /// Always this many (at least one).
    Fixed(usize),
}

impl InFlight {
    /// Entries allowed in flight when the membership has `voters` voters.
    pub fn limit(self, voters: usize) -> usize {
        match self {
            InFlight::Auto if voters <= 1 => 1,
            InFlight::Auto => 2,
            InFlight::Fixed(n) => n.max(1),
        }
    }

    /// The most entries ever in flight: the size of the proposer's semaphore.
    fn capacity(self) -> usize {
        match self {
            InFlight::Auto => 2,
            InFlight::Fixed(n) => n.max(1),
        }
    }
}

/// A batch's outcomes, once its entry is applied.
type PendingOutcomes = Pin<Box<dyn Future<Output = Result<Vec<Outcome>, RaftLayerError>> + Send>>;

/// Where the proposer sends its entries: openraft, or a stand-in in tests.
trait LogSink: Send + Sync + 'static {
    /// Hands `batch` to the log without waiting for its commit; the returned
    /// future resolves once it is applied.
    fn submit(
        &self,
        batch: Batch,
    ) -> impl Future<Output = Result<PendingOutcomes, RaftLayerError>> + Send;

    /// Voters in the current membership.
    fn voters(&self) -> usize;
}

impl LogSink for Raft<TypeConfig> {
    async fn submit(&self, batch: Batch) -> Result<PendingOutcomes, RaftLayerError> {
        let response = self
            .client_write_ff(batch)
            .await
            .map_err(RaftLayerError::unavailable)?;
        Ok(Box::pin(async move {
            match response.await {
                Ok(Ok(written)) => {
                    crate::trace_context::entry_stages(written.log_id.index);
                    Ok(written.data)
                }
                Ok(Err(error)) => Err(client_write_error(error)),
                Err(_) => Err(RaftLayerError::unavailable("raft stopped")),
            }
        }))
    }

    fn voters(&self) -> usize {
        self.server_metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .count()
    }
}

/// Submits requests to the Raft log in batches.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Pending>,
    metrics: Arc<ProposerMetrics>,
}

/// Current wall-clock time in milliseconds since the Unix epoch.
pub fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Proposer {
    /// Starts the batching task.
    ///
    /// An entry whose outcome has not come back within `answer_timeout` gives up
    /// its place in flight, and its requests hear "outcome unknown". openraft 0.9
    /// never answers some entries (an uncommitted entry of a deposed leader that
    /// later catches up by snapshot), and a place held forever would stop every
    /// later write on this node.
    ///
    /// At most `max_queued` requests wait for a place in an entry; beyond that a
    /// request is refused at once with [`RaftLayerError::Overloaded`].
    pub fn start(
        raft: Raft<TypeConfig>,
        limits: Limits,
        max_batch: usize,
        in_flight: InFlight,
        answer_timeout: Duration,
        max_queued: usize,
    ) -> Proposer {
        Self::start_with(
            raft,
            limits,
            max_batch,
            in_flight,
            answer_timeout,
            max_queued,
        )
    }

    fn start_with(
        sink: impl LogSink,
        limits: Limits,
        max_batch: usize,
        in_flight: InFlight,
        answer_timeout: Duration,
        max_queued: usize,
    ) -> Proposer {
        let (tx, rx) = mpsc::channel(max_queued.max(1));
        let metrics = Arc::new(ProposerMetrics::default());
        tokio::spawn(run(
            sink,
            rx,
            Batching {
                limits,
                max_batch: max_batch.max(1),
                in_flight,
                answer_timeout,
                metrics: metrics.clone(),
            },
        ));
        Proposer { tx, metrics }
    }

    /// Requests waiting for a place in an entry: those in the queue and the
    /// background requests held back for a later entry.
    pub fn queued(&self) -> usize {
        let in_queue = self.tx.max_capacity() - self.tx.capacity();
        in_queue + self.metrics.held_back.load(Ordering::Relaxed)
    }

    /// Proposals and batch sizes.
    pub(crate) fn metrics(&self) -> &ProposerMetrics {
        &self.metrics
    }

    /// Proposes one request and waits up to `deadline` until it is committed and
    /// applied. A full queue refuses it at once ([`RaftLayerError::Overloaded`]);
    /// a request still queued at the deadline is withdrawn and answered as not
    /// applied; one already proposed answers "outcome unknown".
    pub async fn propose(
        &self,
        request: Request,
        deadline: Duration,
    ) -> Result<Outcome, RaftLayerError> {
        self.propose_in(Lane::Client, request, deadline).await
    }

    /// [`Proposer::propose`] in `lane`.
    pub async fn propose_in(
        &self,
        lane: Lane,
        request: Request,
        deadline: Duration,
    ) -> Result<Outcome, RaftLayerError> {
        let (reply, rx) = oneshot::channel();
        let claim = Arc::new(AtomicU8::new(QUEUED));
        let pending = Pending {
            request,
            reply,
            claim: claim.clone(),
            lane,
            trace: crate::trace_context::sampled_context(),
        };
        self.tx.try_send(pending).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => RaftLayerError::Overloaded {
                queued: self.tx.max_capacity(),
            },
            mpsc::error::TrySendError::Closed(_) => {
                RaftLayerError::unavailable("the node is shutting down")
            }
        })?;
        let abandon = Abandon(claim);
        match tokio::time::timeout(deadline, rx).await {
            Ok(answer) => {
                answer.map_err(|_| RaftLayerError::unavailable("the proposal was dropped"))?
            }
            Err(_) if abandon.give_up() => Err(RaftLayerError::unavailable(format!(
                "not proposed within {deadline:?} (the node is overloaded or has no quorum); \
                 nothing was applied"
            ))),
            Err(_) => Err(RaftLayerError::outcome_unknown(format!(
                "not committed within {deadline:?} (no quorum?)"
            ))),
        }
    }
}

/// The batching task's settings.
struct Batching {
    limits: Limits,
    max_batch: usize,
    in_flight: InFlight,
    answer_timeout: Duration,
    metrics: Arc<ProposerMetrics>,
}

async fn run(sink: impl LogSink, mut rx: mpsc::Receiver<Pending>, settings: Batching) {
    let capacity = settings.in_flight.capacity();
    let slots = Arc::new(Semaphore::new(capacity));
    // Background requests that found their entry already carrying one, oldest
    // first: each later entry starts with one of them.
    let mut held_back: VecDeque<Pending> = VecDeque::new();
    loop {
        // Take a place in flight first: requests that arrive meanwhile join the
        // batch. An entry takes `capacity / limit` permits, so `limit` fit.
        let limit = settings.in_flight.limit(sink.voters()).clamp(1, capacity);
        let permits = u32::try_from(capacity / limit).unwrap_or(u32::MAX);
        let Ok(permit) = slots.clone().acquire_many_owned(permits).await else {
            return;
        };
        let first = loop {
            let next = match held_back.pop_front() {
                Some(next) => next,
                None => match rx.recv().await {
                    Some(next) => next,
                    None => return,
                },
            };
            if next.take() {
                break next;
            }
        };
        let mut has_background = first.lane == Lane::Background;
        let mut pending = vec![first];
        while pending.len() < settings.max_batch {
            match rx.try_recv() {
                // Holding back is bounded: past `max_batch` waiting, they join.
                Ok(next)
                    if next.lane == Lane::Background
                        && has_background
                        && held_back.len() < settings.max_batch =>
                {
                    held_back.push_back(next);
                }
                Ok(next) if next.take() => {
                    has_background |= next.lane == Lane::Background;
                    pending.push(next);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        settings
            .metrics
            .held_back
            .store(held_back.len(), Ordering::Relaxed);
        settings.metrics.proposed(pending.len());
        let traces: Vec<_> = pending.iter_mut().filter_map(|p| p.trace.take()).collect();
        let in_flight = (capacity - slots.available_permits()) / permits.max(1) as usize;
        let span = crate::trace_context::proposal_span(&traces, pending.len(), in_flight);
        let (requests, replies): (Vec<Request>, Vec<Reply>) =
            pending.into_iter().map(|p| (p.request, p.reply)).unzip();
        let batch = Batch {
            now_ms: wall_clock_ms(),
            limits: settings.limits,
            requests,
        };
        match crate::trace_context::in_span(span.clone(), sink.submit(batch)).await {
            Ok(applied) => {
                let answer_timeout = settings.answer_timeout;
                let task = async move {
                    let result = tokio::time::timeout(answer_timeout, applied)
                        .await
                        .unwrap_or_else(|_| {
                            Err(RaftLayerError::outcome_unknown(format!(
                                "no outcome from the log within {answer_timeout:?}"
                            )))
                        });
                    drop(permit);
                    deliver(replies, result);
                };
                tokio::spawn(crate::trace_context::in_span(span, task));
            }
            Err(error) => {
                drop(permit);
                deliver(replies, Err(error));
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use baton_core::{Command, Reply as CoreReply};

    use super::*;

    /// A log that answers an entry when the test says so, or never.
    struct ScriptedLog {
        voters: usize,
        submitted: AtomicUsize,
        /// Announces every submission (the count so far).
        announce: tokio::sync::watch::Sender<usize>,
        /// Requests per submitted entry, in order.
        sizes: Mutex<Vec<usize>>,
        /// Per submitted entry, in order: the sender that answers it.
        answers: Mutex<Vec<oneshot::Sender<()>>>,
    }

    impl ScriptedLog {
        fn new(voters: usize) -> Arc<Self> {
            Arc::new(ScriptedLog {
                voters,
                submitted: AtomicUsize::new(0),
                announce: tokio::sync::watch::Sender::new(0),
                sizes: Mutex::new(Vec::new()),
                answers: Mutex::new(Vec::new()),
            })
        }

        fn answer(&self, entry: usize) {
            let sender = std::mem::replace(
                &mut self.answers.lock().expect("lock")[entry],
                oneshot::channel().0,
            );
            let _ = sender.send(());
        }
    }

    impl LogSink for Arc<ScriptedLog> {
        async fn submit(&self, batch: Batch) -> Result<PendingOutcomes, RaftLayerError> {
            let (tx, rx) = oneshot::channel();
            self.answers.lock().expect("lock").push(tx);
            let count = batch.requests.len();
            self.sizes.lock().expect("lock").push(count);
            let submitted = self.submitted.fetch_add(1, Ordering::SeqCst) + 1;
            self.announce.send_replace(submitted);
            Ok(Box::pin(async move {
                rx.await
                    .map_err(|_| RaftLayerError::unavailable("never answered"))?;
                Ok((0..count)
                    .map(|_| Outcome {
                        revision: 1,
                        result: Ok(CoreReply::Ticked),
                        replayed: false,
                        events: Vec::new(),
                    })
                    .collect())
            }))
        }

        fn voters(&self) -> usize {
            self.voters
        }
    }

    /// A proposer on `log` with the default (automatic) number in flight.
    fn start(log: &Arc<ScriptedLog>, answer_timeout: Duration) -> Proposer {
        start_queued(log, answer_timeout, 64)
    }

    /// The same with room for `max_queued` waiting requests.
    fn start_queued(
        log: &Arc<ScriptedLog>,
        answer_timeout: Duration,
        max_queued: usize,
    ) -> Proposer {
        Proposer::start_with(
            log.clone(),
            Limits::default(),
            16,
            InFlight::Auto,
            answer_timeout,
            max_queued,
        )
    }

    fn tick() -> Request {
        Request::plain(Command::Tick)
    }

    /// Proposes one request in the background.
    fn propose_in_background(
        proposer: &Proposer,
    ) -> tokio::task::JoinHandle<Result<Outcome, RaftLayerError>> {
        let proposer = proposer.clone();
        tokio::spawn(async move { proposer.propose(tick(), Duration::from_secs(60)).await })
    }

    /// Proposes one request per `(lane, deadline)`, each in its own task, and
    /// returns once each has reached the queue, in this order.
    async fn queue_in_order(
        proposer: &Proposer,
        proposals: impl IntoIterator<Item = (Lane, Duration)>,
    ) -> Vec<tokio::task::JoinHandle<Result<Outcome, RaftLayerError>>> {
        let mut queued = Vec::new();
        for (lane, deadline) in proposals {
            let proposer = proposer.clone();
            queued.push(tokio::spawn(async move {
                proposer.propose_in(lane, tick(), deadline).await
            }));
            until_idle().await;
        }
        queued
    }

    /// Waits (bounded) until `log` has seen `count` entries.
    async fn until_submitted(log: &ScriptedLog, count: usize) {
        let mut submitted = log.announce.subscribe();
        let reached = submitted.wait_for(|n| *n >= count);
        if tokio::time::timeout(Duration::from_secs(5), reached)
            .await
            .is_err()
        {
            panic!(
                "only {} of {count} entries were submitted",
                log.submitted.load(Ordering::SeqCst)
            );
        }
    }

    /// Returns once every other task of the test's runtime is blocked: with the
    /// clock paused, time only moves (and this sleep only ends) when the runtime
    /// has nothing else to run. No real time passes, and 1 ms of paused time is
    /// shorter than every timeout in these tests.
    async fn until_idle() {
        // Not a wait on time: the paused clock makes this "until nothing runs".
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    #[test]
    fn auto_keeps_one_entry_alone_and_two_with_followers() {
        assert_eq!(InFlight::Auto.limit(1), 1);
        assert_eq!(InFlight::Auto.limit(3), 2);
        assert_eq!(InFlight::Fixed(4).limit(1), 4);
        assert_eq!(InFlight::Fixed(0).limit(3), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_voter_waits_for_the_entry_in_flight_before_the_next() {
        let log = ScriptedLog::new(1);
        let proposer = start(&log, Duration::from_secs(60));
        let first = propose_in_background(&proposer);
        until_submitted(&log, 1).await;
        let second = propose_in_background(&proposer);
        // The second request has reached the proposer's queue, and the proposer
        // has done everything it can without an answer to entry 0.
        until_idle().await;
        assert_eq!(proposer.tx.capacity(), 63, "the second request is queued");
        assert_eq!(log.submitted.load(Ordering::SeqCst), 1, "one in flight");
        log.answer(0);
        assert!(first.await.expect("task").is_ok());
        until_submitted(&log, 2).await;
        log.answer(1);
        assert!(second.await.expect("task").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn with_followers_two_entries_are_in_flight() {
        let log = ScriptedLog::new(3);
        let proposer = start(&log, Duration::from_secs(60));
        let first = propose_in_background(&proposer);
        until_submitted(&log, 1).await;
        let second = propose_in_background(&proposer);
        until_submitted(&log, 2).await;
        log.answer(1);
        log.answer(0);
        assert!(first.await.expect("task").is_ok());
        assert!(second.await.expect("task").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_never_answered_gives_up_its_place_after_the_timeout() {
        let log = ScriptedLog::new(1);
        let proposer = start(&log, Duration::from_millis(200));
        let lost = propose_in_background(&proposer);
        until_submitted(&log, 1).await;
        // Entry 0 is never answered. Before the fix its place was held forever
        // and this second proposal was never submitted.
        let next = propose_in_background(&proposer);
        until_idle().await;
        assert_eq!(
            log.submitted.load(Ordering::SeqCst),
            1,
            "entry 0 holds the place until its answer times out"
        );
        tokio::time::advance(Duration::from_millis(200)).await;
        until_submitted(&log, 2).await;
        log.answer(1);
        assert!(next.await.expect("task").is_ok());
        let unknown = lost.await.expect("task");
        assert!(
            matches!(unknown, Err(RaftLayerError::Unavailable { ref reason, .. }) if reason.contains("may or may not")),
            "{unknown:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_refuses_at_once_and_the_queued_requests_still_go_through() {
        let log = ScriptedLog::new(1);
        let proposer = start_queued(&log, Duration::from_secs(60), 2);
        let first = propose_in_background(&proposer);
        until_submitted(&log, 1).await;
        // Entry 0 holds the only place in flight: the next two wait in the queue,
        // and a third finds it full.
        let queued = [
            propose_in_background(&proposer),
            propose_in_background(&proposer),
        ];
        until_idle().await;
        assert_eq!(proposer.tx.capacity(), 0, "both are queued");
        let refused = proposer.propose(tick(), Duration::from_secs(60)).await;
        assert!(
            matches!(refused, Err(RaftLayerError::Overloaded { queued: 2 })),
            "{refused:?}"
        );
        log.answer(0);
        assert!(first.await.expect("task").is_ok());
        until_submitted(&log, 2).await;
        log.answer(1);
        for waiting in queued {
            assert!(waiting.await.expect("task").is_ok());
        }
        let sizes = log.sizes.lock().expect("lock").clone();
        assert_eq!(sizes, [1, 2], "the refused request was never proposed");
    }

    /// Issue 19: an expiry storm's slices go one to an entry, each beside every
    /// client request waiting, instead of all of them in one long entry.
    #[tokio::test(start_paused = true)]
    async fn an_entry_takes_every_client_request_and_at_most_one_background_one() {
        let log = ScriptedLog::new(1);
        let proposer = start(&log, Duration::from_secs(60));
        let first = propose_in_background(&proposer);
        until_submitted(&log, 1).await;
        let queued = queue_in_order(
            &proposer,
            [
                Lane::Background,
                Lane::Client,
                Lane::Background,
                Lane::Client,
                Lane::Background,
            ]
            .map(|lane| (lane, Duration::from_secs(60))),
        )
        .await;
        assert_eq!(proposer.queued(), 5, "all five wait behind entry 0");
        // Held back, a background request has left the queue but still waits:
        // the queue depth (what an operator reads in a storm) counts it.
        for (entry, still_waiting) in [2, 1, 0].into_iter().enumerate() {
            log.answer(entry);
            until_submitted(&log, entry + 2).await;
            assert_eq!(
                proposer.queued(),
                still_waiting,
                "after entry {}",
                entry + 1
            );
        }
        log.answer(3);
        assert!(first.await.expect("task").is_ok());
        for waiting in queued {
            assert!(waiting.await.expect("task").is_ok());
        }
        let sizes = log.sizes.lock().expect("lock").clone();
        assert_eq!(
            sizes,
            [1, 3, 1, 1],
            "entry 0: the first (client) request; entry 1: the first background \
             request and both clients; then one held-back background request per entry"
        );
    }

    /// A background request held back for a later entry can still be given up
    /// by its caller, and is then never proposed.
    #[tokio::test(start_paused = true)]
    async fn a_held_back_request_withdrawn_at_its_deadline_is_never_proposed() {
        let log = ScriptedLog::new(1);
        let proposer = start(&log, Duration::from_secs(60));
        let first = propose_in_background(&proposer);
        until_submitted(&log, 1).await;
        let mut queued = queue_in_order(
            &proposer,
            [Duration::from_secs(60), Duration::from_millis(50)]
                .map(|deadline| (Lane::Background, deadline)),
        )
        .await;
        log.answer(0);
        until_submitted(&log, 2).await;
        // Entry 1 carries the first background request; the second is held back
        // until its deadline passes.
        tokio::time::advance(Duration::from_millis(50)).await;
        let withdrawn = queued.pop().expect("two").await.expect("task");
        assert!(
            matches!(withdrawn, Err(RaftLayerError::Unavailable { ref reason, .. }) if reason.contains("nothing was applied")),
            "{withdrawn:?}"
        );
        log.answer(1);
        assert!(first.await.expect("task").is_ok());
        assert!(queued.pop().expect("one").await.expect("task").is_ok());
        until_idle().await;
        let sizes = log.sizes.lock().expect("lock").clone();
        assert_eq!(sizes, [1, 1], "the withdrawn request was never proposed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_withdrawn_at_its_deadline_is_never_proposed() {
        let log = ScriptedLog::new(1);
        let proposer = start(&log, Duration::from_secs(60));
        let first = propose_in_background(&proposer);
        until_submitted(&log, 1).await;
        // Queued behind entry 0, which is not answered before this deadline.
        let withdrawn = proposer.propose(tick(), Duration::from_millis(50)).await;
        assert!(
            matches!(withdrawn, Err(RaftLayerError::Unavailable { ref reason, .. }) if reason.contains("nothing was applied")),
            "{withdrawn:?}"
        );
        log.answer(0);
        assert!(first.await.expect("task").is_ok());
        let next = propose_in_background(&proposer);
        until_submitted(&log, 2).await;
        log.answer(1);
        assert!(next.await.expect("task").is_ok());
        let sizes = log.sizes.lock().expect("lock").clone();
        assert_eq!(sizes, [1, 1], "entry 1 carries only the later request");
    }
}
