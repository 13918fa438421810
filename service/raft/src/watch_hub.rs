//! The watch hub: a bounded history of published events that every watch
//! stream reads from its own cursor.
//!
//! # Why one shared ring and cursors
//!
//! Each event is kept, behind an `Arc`, in one ring of the last `history`
//! events; its SSE frame is encoded once, by the first stream that sends it
//! ([`WatchEvent::frame`]). A stream
//! is nothing but a cursor (the last revision it has looked at) and a filter: it
//! copies the `Arc`s after its cursor when it is polled. So 10,000 watchers cost
//! 10,000 cursors, not 10,000 copies or queues; a slow watcher costs nothing
//! while it does not read; and applying never waits for a watcher: publishing is
//! a push under a short write lock plus an `O(1)` nudge. Waking the streams is
//! done by a separate notifier task, so the apply path never touches them.
//!
//! # When a stream cannot go on
//!
//! - the ring rolled past its cursor (history compacted, or a snapshot was
//!   installed and the events it covers were never seen here): it cannot be
//!   continued exactly, the client must re-list;
//! - it is live (caught up once) and fell more than `max_lag` events behind
//!   the head: it is ended while its cursor is still well inside the ring, so
//!   resuming from its last revision works;
//! - the hub was closed (server shutdown).
//!
//! Each case ends the stream with [`Step::End`]; the HTTP layer sends a final
//! `resync` event carrying the cursor.
//!
//! # Restart
//!
//! The ring lives in memory. A node restarts with an empty ring whose floor is
//! the revision of the snapshot it restored; openraft then re-applies the log
//! after the snapshot, which refills the ring. A `since` older than the floor
//! answers 410 `revision_compacted`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use baton_core::Event;
use tokio::sync::{watch, Notify};

use crate::watch_event::{WatchEvent, WatchKind};

/// Watch settings of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchConfig {
    /// Events kept for resuming (`since` / `Last-Event-ID`).
    pub history: usize,
    /// A live stream more than this many revisions behind the newest is ended
    /// (with a final `resync` event) so that it can still resume. Keep it well
    /// below `history`.
    pub max_lag: u64,
    /// Most concurrent watch streams on this node.
    pub max_watchers: usize,
    /// Most concurrent watch streams per principal.
    pub max_watchers_per_principal: usize,
    /// Longest time between two bookmarks on a stream.
    pub bookmark_interval: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            history: 100_000,
            max_lag: 50_000,
            max_watchers: 20_000,
            max_watchers_per_principal: 10_000,
            bookmark_interval: Duration::from_secs(10),
        }
    }
}

/// Why a watch could not start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// `since` is older than the retained history.
    #[error("revision {since} is older than the oldest retained revision {oldest}: re-list, then watch from the listed revision")]
    Compacted {
        /// Asked for.
        since: u64,
        /// Events after this revision are retained.
        oldest: u64,
    },
    /// Too many streams.
    #[error("too many watch streams ({scope} limit {limit})")]
    TooManyWatchers {
        /// `total` or `principal`.
        scope: &'static str,
        /// The limit hit.
        limit: usize,
    },
    /// The node is shutting down.
    #[error("the node is shutting down")]
    Closed,
}

/// Why a stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// It fell more than `max_lag` revisions behind; resume from its cursor.
    Lagged,
    /// The history rolled past its cursor; re-list.
    Compacted,
    /// A snapshot replaced the state; the events before it are unknown; re-list.
    Snapshot,
    /// The server is stopping; resume elsewhere or later.
    Shutdown,
}

impl StreamEnd {
    /// The `reason` shown to the client.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamEnd::Lagged => "lagged",
            StreamEnd::Compacted => "compacted",
            StreamEnd::Snapshot => "snapshot",
            StreamEnd::Shutdown => "shutdown",
        }
    }
}

/// Which events a stream wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchFilter {
    kinds: u8,
    prefix: Option<String>,
    exact: Option<String>,
    leader_changes_only: bool,
    /// When set, only events of names starting with one of these (auth: the
    /// principal's watch prefixes); events without a name are left out.
    allowed: Option<Vec<String>>,
}

impl Default for WatchFilter {
    fn default() -> Self {
        WatchFilter::new(&WatchKind::ALL, None)
    }
}

impl WatchFilter {
    /// Events of these kinds whose name starts with `prefix` (lease events have
    /// no name, so a prefix leaves them out).
    pub fn new(kinds: &[WatchKind], prefix: Option<String>) -> Self {
        WatchFilter {
            kinds: kinds.iter().fold(0, |mask, kind| mask | kind.bit()),
            prefix: prefix.filter(|p| !p.is_empty()),
            exact: None,
            leader_changes_only: false,
            allowed: None,
        }
    }

    /// Leader changes and proclaimed values of one election (`:observe`).
    pub fn election(name: &str) -> Self {
        WatchFilter {
            kinds: WatchKind::Election.bit(),
            prefix: None,
            exact: Some(name.to_owned()),
            leader_changes_only: true,
            allowed: None,
        }
    }

    /// This filter, narrowed to names starting with one of `allowed`.
    pub fn within(self, allowed: Vec<String>) -> Self {
        WatchFilter {
            allowed: Some(allowed),
            ..self
        }
    }

    /// Whether the stream wants this event.
    pub fn matches(&self, event: &WatchEvent) -> bool {
        if self.kinds & event.kind.bit() == 0 {
            return false;
        }
        if self.leader_changes_only && !event.leader_change {
            return false;
        }
        let name = event.name();
        if let Some(exact) = &self.exact {
            if name != Some(exact.as_str()) {
                return false;
            }
        }
        if let Some(allowed) = &self.allowed {
            let permitted = name.is_some_and(|n| allowed.iter().any(|a| n.starts_with(a.as_str())));
            if !permitted {
                return false;
            }
        }
        match &self.prefix {
            Some(prefix) => name.is_some_and(|n| n.starts_with(prefix.as_str())),
            None => true,
        }
    }
}

/// What a stream should do next.
#[derive(Debug)]
pub enum Step {
    /// Send these (possibly none) and ask again right away.
    Events(Vec<Arc<WatchEvent>>),
    /// Nothing new: wait for [`Subscription::changed`].
    CaughtUp,
    /// Send the final event and end.
    End(StreamEnd),
}

/// The retained history.
#[derive(Debug)]
struct Ring {
    events: VecDeque<Arc<WatchEvent>>,
    /// Every event after this revision (up to `head`) is in `events`.
    floor: u64,
    /// The newest revision published.
    head: u64,
    /// Revision of the last installed snapshot: history before it has a gap.
    snapshot: u64,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_principal: HashMap<String, usize>,
}

/// Most events looked at per [`Subscription::next_step`], so that a stream
/// with a narrow filter never holds the read lock for long.
const SCAN_LIMIT: usize = 4096;

/// The hub every node has (see the module documentation).
#[derive(Debug)]
pub struct WatchHub {
    config: WatchConfig,
    ring: RwLock<Ring>,
    /// The head revision as the streams see it (set by the notifier task).
    head: watch::Sender<u64>,
    /// Set by the apply path; wakes the notifier task.
    nudge: Arc<Notify>,
    closed: watch::Sender<bool>,
    counts: Mutex<Counts>,
}

impl Drop for WatchHub {
    fn drop(&mut self) {
        // Lets the notifier task notice that the hub is gone.
        self.nudge.notify_one();
    }
}

impl WatchHub {
    /// A hub whose history starts after `revision` (the state it starts from).
    /// Must be called inside a tokio runtime: it spawns the notifier task.
    pub fn start(config: WatchConfig, revision: u64) -> Arc<WatchHub> {
        let (head, _) = watch::channel(revision);
        let (closed, _) = watch::channel(false);
        let hub = Arc::new(WatchHub {
            config,
            ring: RwLock::new(Ring {
                events: VecDeque::new(),
                floor: revision,
                head: revision,
                snapshot: 0,
            }),
            head,
            nudge: Arc::new(Notify::new()),
            closed,
            counts: Mutex::new(Counts::default()),
        });
        tokio::spawn(notify_streams(Arc::downgrade(&hub), hub.nudge.clone()));
        hub
    }

    /// This hub's settings.
    pub fn config(&self) -> &WatchConfig {
        &self.config
    }

    /// The newest revision published.
    pub fn head(&self) -> u64 {
        self.read_ring().head
    }

    /// Events after this revision are retained.
    pub fn oldest(&self) -> u64 {
        self.read_ring().floor
    }

    /// Streams open now.
    pub fn watchers(&self) -> usize {
        self.lock_counts().total
    }

    fn read_ring(&self) -> std::sync::RwLockReadGuard<'_, Ring> {
        self.ring.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes applied events (called on the apply path, in apply order).
    /// Never waits for a stream.
    pub fn publish(&self, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        // Convert before taking the lock: readers are not held up by it.
        let encoded: Vec<Arc<WatchEvent>> = events
            .iter()
            .map(|event| Arc::new(WatchEvent::from_core(event)))
            .collect();
        {
            let mut ring = self.ring.write().unwrap_or_else(PoisonError::into_inner);
            for event in encoded {
                // Revisions only grow; anything else would be a replay.
                if event.revision <= ring.head {
                    continue;
                }
                ring.head = event.revision;
                ring.events.push_back(event);
            }
            while ring.events.len() > self.config.history {
                if let Some(old) = ring.events.pop_front() {
                    ring.floor = old.revision;
                }
            }
        }
        self.nudge.notify_one();
    }

    /// A snapshot replaced the state at `revision`: the events it covers were
    /// never published here, so the history restarts after it.
    pub fn snapshot_installed(&self, revision: u64) {
        {
            let mut ring = self.ring.write().unwrap_or_else(PoisonError::into_inner);
            ring.events.clear();
            ring.floor = revision;
            ring.head = revision;
            ring.snapshot = revision;
        }
        self.nudge.notify_one();
    }

    /// Ends every stream (server shutdown) and refuses new ones.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Opens a stream for `principal` that starts after `since` (default: the
    /// newest revision).
    pub fn subscribe(
        self: &Arc<Self>,
        since: Option<u64>,
        principal: &str,
        filter: WatchFilter,
    ) -> Result<Subscription, WatchError> {
        if *self.closed.borrow() {
            return Err(WatchError::Closed);
        }
        let cursor = {
            let ring = self.read_ring();
            match since {
                None => ring.head,
                Some(since) if since < ring.floor => {
                    return Err(WatchError::Compacted {
                        since,
                        oldest: ring.floor,
                    })
                }
                Some(since) => since,
            }
        };
        {
            let mut counts = self.lock_counts();
            if counts.total >= self.config.max_watchers {
                return Err(WatchError::TooManyWatchers {
                    scope: "total",
                    limit: self.config.max_watchers,
                });
            }
            let mine = counts
                .per_principal
                .get(principal)
                .copied()
                .unwrap_or_default();
            if mine >= self.config.max_watchers_per_principal {
                return Err(WatchError::TooManyWatchers {
                    scope: "principal",
                    limit: self.config.max_watchers_per_principal,
                });
            }
            counts.total += 1;
            *counts
                .per_principal
                .entry(principal.to_owned())
                .or_default() += 1;
        }
        Ok(Subscription {
            hub: self.clone(),
            cursor,
            live: false,
            filter,
            principal: principal.to_owned(),
            head: self.head.subscribe(),
            closed: self.closed.subscribe(),
        })
    }

    fn release(&self, principal: &str) {
        let mut counts = self.lock_counts();
        counts.total = counts.total.saturating_sub(1);
        if let Some(mine) = counts.per_principal.get_mut(principal) {
            *mine -= 1;
            if *mine == 0 {
                counts.per_principal.remove(principal);
            }
        }
    }
}

/// Wakes the streams after the apply path published: the `O(watchers)` work of
/// waking happens here, off the apply path, and bursts coalesce into one wake.
async fn notify_streams(hub: Weak<WatchHub>, nudge: Arc<Notify>) {
    loop {
        nudge.notified().await;
        let Some(hub) = hub.upgrade() else { return };
        let head = hub.head();
        hub.head.send_replace(head);
    }
}

/// One watch stream's position in the hub. Dropping it frees its quota slot.
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<WatchHub>,
    cursor: u64,
    /// Caught up once: from then on, falling `max_lag` behind ends the stream.
    live: bool,
    filter: WatchFilter,
    principal: String,
    head: watch::Receiver<u64>,
    closed: watch::Receiver<bool>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.release(&self.principal);
    }
}

impl Subscription {
    /// Every event up to this revision has been looked at (and handed out if it
    /// matched): resuming from here loses nothing.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The hub's settings.
    pub fn config(&self) -> &WatchConfig {
        &self.hub.config
    }

    /// The next events after the cursor (at most `max`), or why to stop.
    pub fn next_step(&mut self, max: usize) -> Step {
        if *self.closed.borrow() {
            return Step::End(StreamEnd::Shutdown);
        }
        // Mark the current head as seen before reading, so that a publish after
        // this read makes `changed` resolve.
        self.head.borrow_and_update();
        let ring = self.hub.read_ring();
        if self.cursor < ring.floor {
            return Step::End(if self.cursor < ring.snapshot {
                StreamEnd::Snapshot
            } else {
                StreamEnd::Compacted
            });
        }
        if self.live && ring.head.saturating_sub(self.cursor) > self.hub.config.max_lag {
            return Step::End(StreamEnd::Lagged);
        }
        let start = ring.events.partition_point(|e| e.revision <= self.cursor);
        let mut out = Vec::new();
        let mut scanned = 0;
        for event in ring.events.range(start..) {
            if out.len() >= max || scanned >= SCAN_LIMIT {
                break;
            }
            scanned += 1;
            self.cursor = event.revision;
            if self.filter.matches(event) {
                out.push(event.clone());
            }
        }
        if start + scanned == ring.events.len() {
            // Reached the head (which may be past the last event after a
            // snapshot install with nothing published since).
            self.cursor = self.cursor.max(ring.head);
            self.live = true;
            if out.is_empty() {
                return Step::CaughtUp;
            }
        }
        Step::Events(out)
    }

    /// Resolves when new events may have been published or the hub closed.
    pub async fn changed(&mut self) {
        tokio::select! {
            changed = self.head.changed() => {
                if changed.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            _ = self.closed.changed() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::{EndReason, EventKind};

    fn lock_event(revision: u64, name: &str) -> Event {
        Event {
            revision,
            kind: EventKind::LockReleased {
                name: name.into(),
                token: revision,
                reason: EndReason::Released,
            },
        }
    }

    fn events(range: std::ops::RangeInclusive<u64>) -> Vec<Event> {
        range.map(|r| lock_event(r, &format!("l{r}"))).collect()
    }

    fn config(history: usize, max_lag: u64) -> WatchConfig {
        WatchConfig {
            history,
            max_lag,
            max_watchers: 3,
            max_watchers_per_principal: 2,
            bookmark_interval: Duration::from_secs(10),
        }
    }

    fn drain(sub: &mut Subscription) -> Result<Vec<u64>, StreamEnd> {
        let mut seen = Vec::new();
        loop {
            match sub.next_step(7) {
                Step::Events(batch) => seen.extend(batch.iter().map(|e| e.revision)),
                Step::CaughtUp => return Ok(seen),
                Step::End(end) => return Err(end),
            }
        }
    }

    #[tokio::test]
    async fn resumes_from_any_retained_revision_without_gap_or_duplicate() {
        let hub = WatchHub::start(config(10, 5), 0);
        hub.publish(&events(1..=8));
        for since in 0..=8 {
            let mut sub = hub
                .subscribe(Some(since), "p", WatchFilter::default())
                .expect("retained");
            let seen = drain(&mut sub).expect("no end");
            assert_eq!(seen, (since + 1..=8).collect::<Vec<_>>());
            assert_eq!(sub.cursor(), 8);
        }
        let mut sub = hub
            .subscribe(None, "p", WatchFilter::default())
            .expect("new");
        assert_eq!(drain(&mut sub), Ok(vec![]));
        hub.publish(&events(9..=9));
        assert_eq!(drain(&mut sub), Ok(vec![9]));
    }

    #[tokio::test]
    async fn the_ring_rolls_over_and_old_revisions_are_refused() {
        let hub = WatchHub::start(config(4, 100), 0);
        let mut old = hub
            .subscribe(Some(0), "p", WatchFilter::default())
            .expect("retained");
        hub.publish(&events(1..=10));
        assert_eq!(hub.oldest(), 6);
        assert_eq!(
            hub.subscribe(Some(5), "q", WatchFilter::default())
                .map(|s| s.cursor()),
            Err(WatchError::Compacted {
                since: 5,
                oldest: 6
            })
        );
        let mut sub = hub
            .subscribe(Some(6), "q", WatchFilter::default())
            .expect("retained");
        assert_eq!(drain(&mut sub), Ok(vec![7, 8, 9, 10]));
        // A stream whose cursor the ring rolled past cannot continue exactly.
        assert_eq!(drain(&mut old), Err(StreamEnd::Compacted));
    }

    #[tokio::test]
    async fn a_live_stream_that_falls_behind_is_ended_while_it_can_still_resume() {
        let hub = WatchHub::start(config(100, 5), 0);
        let mut slow = hub
            .subscribe(None, "p", WatchFilter::default())
            .expect("new");
        hub.publish(&events(1..=3));
        assert_eq!(drain(&mut slow), Ok(vec![1, 2, 3]));
        // It stops reading while ten more events arrive.
        hub.publish(&events(4..=13));
        assert_eq!(drain(&mut slow), Err(StreamEnd::Lagged));
        let resumed_from = slow.cursor();
        assert_eq!(resumed_from, 3);
        drop(slow);
        // Resuming is a catch-up, not live yet: it gets everything.
        let mut again = hub
            .subscribe(Some(resumed_from), "p", WatchFilter::default())
            .expect("still retained");
        assert_eq!(drain(&mut again), Ok((4..=13).collect()));
    }

    #[tokio::test]
    async fn a_snapshot_install_ends_streams_behind_it() {
        let hub = WatchHub::start(config(100, 50), 0);
        hub.publish(&events(1..=3));
        let mut behind = hub
            .subscribe(Some(3), "p", WatchFilter::default())
            .expect("retained");
        hub.snapshot_installed(20);
        assert_eq!(drain(&mut behind), Err(StreamEnd::Snapshot));
        assert!(matches!(
            hub.subscribe(Some(3), "p", WatchFilter::default()),
            Err(WatchError::Compacted { oldest: 20, .. })
        ));
        drop(behind);
        let mut fresh = hub
            .subscribe(Some(20), "p", WatchFilter::default())
            .expect("at the snapshot");
        hub.publish(&events(21..=22));
        assert_eq!(drain(&mut fresh), Ok(vec![21, 22]));
    }

    #[tokio::test]
    async fn filters_and_quotas() {
        let hub = WatchHub::start(config(100, 50), 0);
        let filter = WatchFilter::new(&[WatchKind::Lock], Some("l1".into()));
        let mut sub = hub.subscribe(Some(0), "p", filter).expect("new");
        hub.publish(&events(1..=12));
        assert_eq!(drain(&mut sub), Ok(vec![1, 10, 11, 12]));
        let mut elections = hub
            .subscribe(Some(0), "p", WatchFilter::election("l1"))
            .expect("new");
        assert_eq!(drain(&mut elections), Ok(vec![]));
        assert_eq!(elections.cursor(), 12);
        // Two per principal, three in total; dropping frees the slot.
        assert!(matches!(
            hub.subscribe(None, "p", WatchFilter::default()),
            Err(WatchError::TooManyWatchers {
                scope: "principal",
                ..
            })
        ));
        let third = hub.subscribe(None, "q", WatchFilter::default());
        assert!(third.is_ok());
        assert!(matches!(
            hub.subscribe(None, "r", WatchFilter::default()),
            Err(WatchError::TooManyWatchers { scope: "total", .. })
        ));
        drop(sub);
        let again = hub.subscribe(None, "p", WatchFilter::default());
        assert!(again.is_ok());
        assert_eq!(hub.watchers(), 3);
    }

    #[tokio::test]
    async fn closing_ends_streams_and_wakes_waiters() {
        let hub = WatchHub::start(config(100, 50), 0);
        let mut sub = hub
            .subscribe(None, "p", WatchFilter::default())
            .expect("new");
        assert_eq!(drain(&mut sub), Ok(vec![]));
        let waiting = tokio::spawn(async move {
            sub.changed().await;
            matches!(sub.next_step(10), Step::End(StreamEnd::Shutdown))
        });
        hub.close();
        assert!(waiting.await.expect("task"));
        assert_eq!(
            hub.subscribe(None, "p", WatchFilter::default())
                .map(|s| s.cursor()),
            Err(WatchError::Closed)
        );
    }

    #[tokio::test]
    async fn publishing_wakes_a_waiting_stream() {
        let hub = WatchHub::start(config(100, 50), 0);
        let mut sub = hub
            .subscribe(None, "p", WatchFilter::default())
            .expect("new");
        assert_eq!(drain(&mut sub), Ok(vec![]));
        let waiting = tokio::spawn(async move {
            sub.changed().await;
            drain(&mut sub)
        });
        hub.publish(&events(1..=2));
        assert_eq!(waiting.await.expect("task"), Ok(vec![1, 2]));
    }
}
