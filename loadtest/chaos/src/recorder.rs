//! The shared recorder that workers, the register and the final read append to.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::history::{Event, EventType, OpKind};

/// Thread-safe, cheap to clone; events are kept in memory and written at the end
/// (a run makes at most some hundred thousand of them).
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Inner>,
}

struct Inner {
    start: Instant,
    next_op: AtomicU64,
    events: Mutex<Vec<Event>>,
}

impl Recorder {
    /// Starts the clock of the run.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                start: Instant::now(),
                next_op: AtomicU64::new(1),
                events: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Monotonic nanoseconds since the start of the run.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.inner.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records an invoke and returns a handle to complete it. The invoke event is
    /// stamped here, right before the request goes out.
    pub fn invoke(
        &self,
        process: u32,
        f: OpKind,
        key: &str,
        fill: impl FnOnce(&mut Event),
    ) -> Pending {
        let op = self.inner.next_op.fetch_add(1, Ordering::Relaxed);
        let mut e = Event::new(op, process, EventType::Invoke, f, key, 0);
        fill(&mut e);
        let invoke_ns = self.push_stamped(e);
        Pending {
            recorder: self.clone(),
            op,
            process,
            f,
            key: key.to_owned(),
            invoke_ns,
        }
    }

    fn push_stamped(&self, mut e: Event) -> u64 {
        // Stamp under the lock so the file order is the time order.
        let mut events = self.inner.events.lock().unwrap_or_else(|p| p.into_inner());
        e.time_ns = self.now_ns();
        let t = e.time_ns;
        events.push(e);
        t
    }

    /// Every event so far, in time order.
    pub fn events(&self) -> Vec<Event> {
        self.inner
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many events so far.
    pub fn len(&self) -> usize {
        self.inner
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

/// An invoked operation waiting for its completion.
pub struct Pending {
    recorder: Recorder,
    op: u64,
    process: u32,
    f: OpKind,
    key: String,
    invoke_ns: u64,
}

impl Pending {
    /// When the invoke was recorded.
    pub fn invoke_ns(&self) -> u64 {
        self.invoke_ns
    }

    /// Records the completion; returns its time.
    pub fn complete(self, kind: EventType, fill: impl FnOnce(&mut Event)) -> u64 {
        let mut e = Event::new(self.op, self.process, kind, self.f, &self.key, 0);
        fill(&mut e);
        self.recorder.push_stamped(e)
    }
}
