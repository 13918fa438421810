//! [`IdlePoll`]: threads that poll briefly before they sleep (`--idle-poll-us`).
//!
//! A lone client's write crosses two threads that are asleep when it arrives: the
//! runtime worker that runs openraft (woken by the HTTP worker that parsed the
//! request) and the HTTP worker itself (woken by the answer). On a virtual machine
//! each of those wake-ups costs tens of microseconds (BENCHMARKS.md, "One client:
//! where a lock cycle's time goes"). With a budget set, both keep polling for work
//! for up to that long before they sleep, which trades idle CPU for latency. The
//! polling only runs when it can help: only while this node leads and is its
//! cluster's only voter (with followers, their answers arrive on sockets, which
//! only a sleeping runtime worker watches, and a replicated write's round trips
//! dwarf the wake-ups), and only while at most one request is in progress on this
//! node. Under load the runtime worker still parks now and then, waiting for the
//! HTTP workers; spinning there took 7.6 % of the server's CPU samples at 64
//! clients, CPU those workers needed (BENCHMARKS.md, "Idle polling under load").

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

/// How long threads poll before they sleep, and when they may.
#[derive(Debug, Default)]
pub struct IdlePoll {
    /// The longest poll; zero turns polling off.
    budget: Duration,
    /// This node leads and is the only voter.
    lone_voter: AtomicBool,
    /// Requests inside [`IdlePoll::await_briefly`] on this node that may poll.
    requests: AtomicUsize,
}

impl IdlePoll {
    /// Polling for up to `budget` (zero: never).
    pub fn new(budget: Duration) -> Self {
        IdlePoll {
            budget,
            ..IdlePoll::default()
        }
    }

    /// The longest poll.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// Records whether this node leads a cluster in which it is the only voter.
    pub(crate) fn set_lone_voter(&self, lone: bool) {
        self.lone_voter.store(lone, Ordering::Relaxed);
    }

    /// Whether threads may poll before they sleep: a budget is set and this node
    /// leads as its cluster's only voter.
    pub fn may_poll(&self) -> bool {
        !self.budget.is_zero() && self.lone_voter.load(Ordering::Relaxed)
    }

    /// At most one request is in progress on this node (counted while it may poll).
    fn alone(&self) -> bool {
        self.requests.load(Ordering::Relaxed) <= 1
    }

    /// For the runtime's `on_thread_park` hook: while this node may poll and at
    /// most one request is in progress, spins until `has_work` says a task was
    /// scheduled from another thread or the budget is spent; whether it did.
    /// Returning then is enough: the hook runs before the worker counts as parked,
    /// so the push either woke another worker or is found by this one's last look
    /// at the queues as it parks (tokio's `transition_to_parked`).
    pub fn before_park(&self, has_work: impl Fn() -> bool) -> bool {
        if !self.may_poll() || !self.alone() {
            return false;
        }
        spin_until(self.budget, has_work)
    }

    /// Awaits `future`. While this node may poll ([`IdlePoll::may_poll`]), this is
    /// the only request in progress on it and the caller runs on a current-thread
    /// runtime (an HTTP worker), the future is polled again and again, with the
    /// worker's sockets polled in between (`yield_now`), for up to the budget
    /// before the thread may sleep.
    ///
    /// `future` is `Unpin` so that callers pass it pinned where it lives
    /// (`pin!(...)`): an `async fn` keeps a future argument in its own state more
    /// than once (as the argument, as what it awaits, as a pinned local), and a
    /// request's answer future is kilobytes that every request would copy and
    /// carry several times over (BENCHMARKS.md, "Smaller request futures").
    pub async fn await_briefly<F: Future + Unpin>(&self, mut future: F) -> F::Output {
        // Nothing polls on a node with followers: it pays not even the count.
        if !self.may_poll() || !on_current_thread_runtime() {
            return future.await;
        }
        let _request = InProgress::enter(&self.requests);
        let start = Instant::now();
        loop {
            let polled =
                std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut future).poll(cx))).await;
            if let Poll::Ready(output) = polled {
                return output;
            }
            if !self.alone() || start.elapsed() >= self.budget {
                return future.await;
            }
            tokio::task::yield_now().await;
        }
    }
}

/// Spins until `done` or `budget` has passed; whether `done` was seen.
fn spin_until(budget: Duration, done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= budget {
            return false;
        }
        std::hint::spin_loop();
    }
}

fn on_current_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// Counts a request as in progress until dropped (also when its future is).
struct InProgress<'a>(&'a AtomicUsize);

impl<'a> InProgress<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        InProgress(count)
    }
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    #[test]
    fn the_runtime_polls_only_as_a_lone_voter_with_a_budget() {
        let off = IdlePoll::new(Duration::ZERO);
        off.set_lone_voter(true);
        assert!(!off.may_poll());

        let on = IdlePoll::new(Duration::from_secs(5));
        assert!(!on.may_poll(), "not known to lead alone yet");
        on.set_lone_voter(true);
        assert!(on.may_poll());
        on.set_lone_voter(false);
        assert!(!on.may_poll());
        let calls = AtomicU32::new(0);
        assert!(!on.before_park(|| calls.fetch_add(1, Ordering::Relaxed) > 0));
        assert_eq!(calls.load(Ordering::Relaxed), 0, "no poll with followers");
    }

    #[test]
    fn before_park_returns_as_soon_as_work_is_seen() {
        // A budget far beyond any test's run time: the call can only return
        // because the third look found work.
        let poll = IdlePoll::new(Duration::from_secs(3600));
        poll.set_lone_voter(true);
        let looks = AtomicU32::new(0);
        assert!(poll.before_park(|| looks.fetch_add(1, Ordering::Relaxed) == 2));
        assert_eq!(looks.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn the_runtime_does_not_poll_while_requests_crowd_in() {
        // 64 clients: the runtime still parks between bursts, and spinning there
        // took CPU the HTTP workers needed.
        let poll = IdlePoll::new(Duration::from_secs(3600));
        poll.set_lone_voter(true);
        let looks = AtomicU32::new(0);
        let first = InProgress::enter(&poll.requests);
        let second = InProgress::enter(&poll.requests);
        assert!(!poll.before_park(|| looks.fetch_add(1, Ordering::Relaxed) > 0));
        assert_eq!(
            looks.load(Ordering::Relaxed),
            0,
            "no poll with two requests"
        );
        drop(second);
        assert!(poll.before_park(|| looks.fetch_add(1, Ordering::Relaxed) > 0));
        drop(first);
        assert!(poll.before_park(|| looks.fetch_add(1, Ordering::Relaxed) > 2));
    }

    #[test]
    fn before_park_gives_up_when_the_budget_is_spent() {
        let poll = IdlePoll::new(Duration::from_millis(1));
        poll.set_lone_voter(true);
        assert!(!poll.before_park(|| false));
    }

    #[test]
    fn a_lone_request_on_an_http_worker_is_answered_without_its_thread_sleeping() {
        // The answer comes from another thread; the current-thread runtime only
        // learns of it by polling, since its waker is never called.
        let poll = Arc::new(IdlePoll::new(Duration::from_secs(3600)));
        poll.set_lone_voter(true);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let ready = Arc::new(AtomicBool::new(false));
        let setter = {
            let ready = ready.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                ready.store(true, Ordering::Release);
            })
        };
        let answer = poll.await_briefly(std::future::poll_fn(|_cx| {
            // Never registers the waker: only polling can see the flag.
            if ready.load(Ordering::Acquire) {
                Poll::Ready("answered")
            } else {
                Poll::Pending
            }
        }));
        let seen =
            runtime.block_on(async { tokio::time::timeout(Duration::from_secs(10), answer).await });
        setter.join().expect("setter");
        assert_eq!(seen, Ok("answered"), "the request slept instead of polling");
        assert_eq!(
            poll.requests.load(Ordering::Relaxed),
            0,
            "the count is released"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_request_stops_polling_once_another_one_is_in_progress() {
        let poll = Arc::new(IdlePoll::new(Duration::from_secs(3600)));
        poll.set_lone_voter(true);
        let (answer, answered) = tokio::sync::oneshot::channel::<u32>();
        let polls = Arc::new(AtomicU32::new(0));
        let first = {
            let poll = poll.clone();
            let polls = polls.clone();
            let mut answered = answered;
            tokio::spawn(async move {
                poll.await_briefly(std::future::poll_fn(move |cx| {
                    polls.fetch_add(1, Ordering::Relaxed);
                    std::pin::Pin::new(&mut answered).poll(cx)
                }))
                .await
            })
        };
        tokio::task::yield_now().await;
        assert!(polls.load(Ordering::Relaxed) >= 1);
        // A second request arrives: the first one stops polling and waits for its
        // waker, so its poll count stops growing.
        let second = poll.await_briefly(std::future::pending::<()>());
        let mut second = pin!(second);
        let _ = std::future::poll_fn(|cx| Poll::Ready(second.as_mut().poll(cx))).await;
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        let settled = polls.load(Ordering::Relaxed);
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert_eq!(polls.load(Ordering::Relaxed), settled, "still polling");
        answer.send(7).expect("send");
        assert_eq!(first.await.expect("join").expect("answer"), 7);
    }

    /// How often a request is polled while its answer takes 20 ms to come.
    async fn polls_of_a_request_answered_later(poll: &IdlePoll) -> u32 {
        let polls = AtomicU32::new(0);
        let (answer, mut answered) = tokio::sync::oneshot::channel::<u32>();
        let waiting = poll.await_briefly(std::future::poll_fn(|cx| {
            polls.fetch_add(1, Ordering::Relaxed);
            std::pin::Pin::new(&mut answered).poll(cx)
        }));
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            answer.send(5).expect("send");
        });
        assert_eq!(waiting.await.expect("answer"), 5);
        sender.await.expect("join");
        polls.load(Ordering::Relaxed)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_lone_request_on_a_lone_voter_polls_until_answered() {
        let poll = IdlePoll::new(Duration::from_secs(3600));
        poll.set_lone_voter(true);
        let polls = polls_of_a_request_answered_later(&poll).await;
        assert!(polls > 2, "polled {polls} times in 20 ms");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_request_with_followers_never_polls() {
        let poll = IdlePoll::new(Duration::from_secs(3600));
        poll.set_lone_voter(false);
        let polls = polls_of_a_request_answered_later(&poll).await;
        assert_eq!(polls, 2, "polled once, then woken once");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_request_on_the_multi_threaded_runtime_never_polls() {
        let poll = IdlePoll::new(Duration::from_secs(3600));
        poll.set_lone_voter(true);
        let polls = polls_of_a_request_answered_later(&poll).await;
        assert_eq!(polls, 2, "polled once, then woken once");
    }
}
