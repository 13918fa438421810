//! Property tests of shared locks, semaphores and multi-acquire: random histories
//! over a few locks, semaphores and leases, run against a reference model written
//! here from the rules of the issue and API.md (not from the core's code), plus
//! invariants that need no model:
//!
//! - (a) a writer never coexists with any other holder;
//! - (b) a semaphore never has more than `limit` permits out;
//! - (c) nobody is overtaken by a later incompatible request: the model grants a
//!   request only when it fits beside the holders and everyone ahead of it in each
//!   of its lines, and the machine's holders and queues equal the model's after
//!   every step;
//! - (d) a multi-acquire is granted all its locks or none (model equality), and
//!   never deadlocks: the oldest waiting request always waits for a holder (or a
//!   lock delay), never only for other waiters;
//! - (e) every grant's token is its event's revision, above every earlier token;
//! - (f) a snapshot taken anywhere restores a machine that behaves identically.

use std::collections::BTreeMap;

use baton_core::{
    ApplyContext, Command, CoreError, EventKind, LeaseId, LeaseRef, Limits, LockMode, LockRequest,
    Outcome, Reply, Request, StateMachine, WaiterId,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const LOCKS: [&str; 3] = ["a", "b", "c"];
const SEMAPHORES: [&str; 2] = ["s1", "s2"];
/// Each semaphore's usual limit; a request stating another one is a mismatch.
const LIMITS: [u32; 2] = [3, 5];
const LEASES: u128 = 4;
const TERM: u64 = 3;
const START_MS: u64 = 5_000_000;
const DELAY_MS: u64 = 1_500;

// ---------------------------------------------------------------------------
// Generated operations.

#[derive(Clone, Debug)]
enum LeaseChoice {
    Existing(u8),
    New,
}

#[derive(Clone, Debug)]
enum Op {
    CreateLease {
        lease: u8,
    },
    EndLease {
        lease: u8,
        expire: bool,
    },
    /// One lock: `legacy` sends `Command::Acquire` (exclusive only), else
    /// `AcquireLocks` with one entry.
    Acquire {
        lock: u8,
        shared: bool,
        legacy: bool,
        lease: LeaseChoice,
        wait: bool,
        delay: bool,
    },
    /// Several locks (indices may repeat: a refused list), in the order given.
    AcquireMany {
        locks: Vec<(u8, bool)>,
        lease: LeaseChoice,
        wait: bool,
        delay: bool,
    },
    Permits {
        semaphore: u8,
        lease: LeaseChoice,
        /// 0: the usual limit; 1: another; 2: zero.
        limit: u8,
        permits: u8,
        wait: bool,
    },
    /// Releases the `pick`-th holder of a lock (or presents a stale token).
    Release {
        lock: u8,
        pick: u8,
        stale: bool,
    },
    ReleasePermits {
        semaphore: u8,
        pick: u8,
        stale: bool,
    },
    /// Cancels the `pick`-th waiting request, in one of its lines (or in a line
    /// it is not in).
    Cancel {
        pick: u8,
        wrong_line: bool,
    },
    Tick,
}

fn lease_choice() -> impl Strategy<Value = LeaseChoice> {
    prop_oneof![
        6 => (1..=LEASES as u8).prop_map(LeaseChoice::Existing),
        1 => Just(LeaseChoice::New),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let lock = 0..LOCKS.len() as u8;
    let semaphore = 0..SEMAPHORES.len() as u8;
    prop_oneof![
        2 => (1..=LEASES as u8).prop_map(|lease| Op::CreateLease { lease }),
        2 => (1..=LEASES as u8, any::<bool>()).prop_map(|(lease, expire)| Op::EndLease { lease, expire }),
        8 => (lock.clone(), any::<bool>(), prop::bool::weighted(0.3), lease_choice(),
              prop::bool::weighted(0.7), prop::bool::weighted(0.2))
            .prop_map(|(lock, shared, legacy, lease, wait, delay)| Op::Acquire {
                lock, shared: shared && !legacy, legacy, lease, wait, delay,
            }),
        5 => (prop::collection::vec((lock.clone(), any::<bool>()), 0..=4), lease_choice(),
              prop::bool::weighted(0.7), prop::bool::weighted(0.2))
            .prop_map(|(locks, lease, wait, delay)| Op::AcquireMany { locks, lease, wait, delay }),
        6 => (semaphore.clone(), lease_choice(), prop_oneof![12 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
              0..=6u8, prop::bool::weighted(0.7))
            .prop_map(|(semaphore, lease, limit, permits, wait)| Op::Permits {
                semaphore, lease, limit, permits, wait,
            }),
        6 => (lock, any::<u8>(), prop::bool::weighted(0.1))
            .prop_map(|(lock, pick, stale)| Op::Release { lock, pick, stale }),
        5 => (semaphore, any::<u8>(), prop::bool::weighted(0.1))
            .prop_map(|(semaphore, pick, stale)| Op::ReleasePermits { semaphore, pick, stale }),
        3 => (any::<u8>(), prop::bool::weighted(0.1))
            .prop_map(|(pick, wrong_line)| Op::Cancel { pick, wrong_line }),
        1 => Just(Op::Tick),
    ]
}

fn history() -> impl Strategy<Value = (Vec<(Op, u64)>, u8)> {
    let step = (
        op(),
        prop_oneof![6 => Just(0u64), 3 => 1..800u64, 1 => Just(DELAY_MS + 1)],
    );
    (prop::collection::vec(step, 1..120), any::<u8>())
}

// ---------------------------------------------------------------------------
// The reference model.

/// A resource: a lock or a semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Res {
    Lock(usize),
    Semaphore(usize),
}

impl Res {
    fn name(self) -> &'static str {
        match self {
            Res::Lock(i) => LOCKS[i],
            Res::Semaphore(i) => SEMAPHORES[i],
        }
    }
}

#[derive(Clone, Debug)]
struct MHolding {
    lease: u128,
    label: String,
    mode: LockMode,
    permits: u32,
    delay_ms: u64,
    token: u64,
}

/// A waiting request: one place in each of its lines.
#[derive(Clone, Debug)]
struct MRequest {
    lease: u128,
    label: String,
    /// What it asks of each resource.
    parts: Vec<(Res, LockMode, u32)>,
    delay_ms: u64,
}

#[derive(Clone, Debug, Default)]
struct MSlot {
    holders: Vec<MHolding>,
    /// Waiter ids in arrival order.
    queue: Vec<u64>,
    delay_until: Option<u64>,
    /// Semaphores: the limit that stands while anyone holds or waits.
    limit: u32,
}

impl MSlot {
    fn active(&self) -> bool {
        !self.holders.is_empty() || !self.queue.is_empty()
    }
}

/// What a claim asks the model for.
struct Ask {
    /// Each resource with its mode and permits.
    parts: Vec<(Res, LockMode, u32)>,
    /// The existing lease it names, if any.
    lease: Option<u128>,
    /// The lease created when it names none.
    new_lease: u128,
    /// A semaphore's limit (0 for locks).
    limit: u32,
    /// Its waiter id when it may wait.
    waiter: Option<u64>,
    /// Its holder label.
    label: String,
    /// Lock delay after expiry.
    delay_ms: u64,
}

#[derive(Clone, Debug, Default)]
struct Model {
    now: u64,
    leases: BTreeMap<u128, bool>,
    slots: BTreeMap<Res, MSlot>,
    requests: BTreeMap<u64, MRequest>,
}

/// What the model expects an operation to answer.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Granted,
    Queued,
    Done,
    Refused,
}

/// Whether a request of `mode`/`permits` may hold beside `taken`: by permits under
/// a semaphore's limit, by mode for a lock.
fn compatible(
    res: Res,
    limit: u32,
    taken: &[(LockMode, u32)],
    mode: LockMode,
    permits: u32,
) -> bool {
    match res {
        Res::Semaphore(_) => {
            let out: u64 = taken.iter().map(|(_, p)| u64::from(*p)).sum();
            out + u64::from(permits) <= u64::from(limit)
        }
        Res::Lock(_) => match mode {
            LockMode::Exclusive => taken.is_empty(),
            LockMode::Shared => taken.iter().all(|(m, _)| *m == LockMode::Shared),
        },
    }
}

impl Model {
    fn slot(&mut self, res: Res) -> &mut MSlot {
        self.slots.entry(res).or_default()
    }

    fn part_of(&self, waiter: u64, res: Res) -> Option<(LockMode, u32)> {
        self.requests[&waiter]
            .parts
            .iter()
            .find(|(r, _, _)| *r == res)
            .map(|(_, m, p)| (*m, *p))
    }

    /// What the holders of `res` and the requests in its line before `upto`
    /// (all of them when `None`) take.
    fn taken(&self, res: Res, upto: Option<u64>) -> Vec<(LockMode, u32)> {
        let Some(slot) = self.slots.get(&res) else {
            return Vec::new();
        };
        let mut taken: Vec<_> = slot.holders.iter().map(|h| (h.mode, h.permits)).collect();
        for waiter in &slot.queue {
            if Some(*waiter) == upto {
                break;
            }
            taken.push(
                self.part_of(*waiter, res)
                    .expect("queued requests ask for their lines"),
            );
        }
        taken
    }

    fn delayed(&self, res: Res) -> bool {
        self.slots
            .get(&res)
            .is_some_and(|s| s.delay_until.is_some())
    }

    fn limit(&self, res: Res) -> u32 {
        self.slots.get(&res).map_or(0, |s| s.limit)
    }

    /// A queued request may hold in `res` once it fits beside the holders and
    /// everyone ahead of it there.
    fn may_hold(&self, waiter: u64, res: Res) -> bool {
        let (mode, permits) = self.part_of(waiter, res).expect("in line");
        !self.delayed(res)
            && compatible(
                res,
                self.limit(res),
                &self.taken(res, Some(waiter)),
                mode,
                permits,
            )
    }

    /// A new request may hold in `res` now without passing anyone in line
    /// (`limit`: what a semaphore's limit becomes if nobody holds or waits).
    fn newcomer_fits(&self, res: Res, mode: LockMode, permits: u32, limit: u32) -> bool {
        let limit = match self.slots.get(&res) {
            Some(slot) if slot.active() => slot.limit,
            _ => limit,
        };
        !self.delayed(res) && compatible(res, limit, &self.taken(res, None), mode, permits)
    }

    /// `limit`: what a new semaphore's limit becomes (0: keep the one that stands).
    fn hold(&mut self, res: Res, holding: MHolding, limit: u32) {
        let slot = self.slot(res);
        if !slot.active() && limit > 0 {
            slot.limit = limit;
        }
        slot.holders.push(holding);
    }

    /// Grants every queued request that may hold in all its lines, until none can.
    fn settle(&mut self) {
        loop {
            let ready = self.requests.keys().copied().find(|w| {
                self.requests[w]
                    .parts
                    .iter()
                    .all(|(res, _, _)| self.may_hold(*w, *res))
            });
            let Some(waiter) = ready else {
                return;
            };
            let request = self.requests.remove(&waiter).expect("found");
            for (res, mode, permits) in &request.parts {
                self.slot(*res).queue.retain(|w| *w != waiter);
                self.hold(
                    *res,
                    MHolding {
                        lease: request.lease,
                        label: request.label.clone(),
                        mode: *mode,
                        permits: *permits,
                        delay_ms: request.delay_ms,
                        token: 0,
                    },
                    0,
                );
            }
        }
    }

    fn clear_due_delays(&mut self) {
        let now = self.now;
        for slot in self.slots.values_mut() {
            if slot.delay_until.is_some_and(|until| until <= now) {
                slot.delay_until = None;
            }
        }
    }

    fn attachments(&self, lease: u128) -> usize {
        let held: usize = self
            .slots
            .values()
            .map(|s| s.holders.iter().filter(|h| h.lease == lease).count())
            .sum();
        let waiting: usize = self
            .requests
            .values()
            .filter(|r| r.lease == lease)
            .map(|r| r.parts.len())
            .sum();
        held + waiting
    }

    /// An ephemeral lease left with nothing is revoked.
    fn drop_if_unused(&mut self, lease: u128) {
        if self.leases.get(&lease) == Some(&true) && self.attachments(lease) == 0 {
            self.end_lease(lease, false);
        }
    }

    fn end_lease(&mut self, lease: u128, expired: bool) {
        self.leases.remove(&lease);
        let now = self.now;
        self.requests.retain(|_, r| r.lease != lease);
        for slot in self.slots.values_mut() {
            let mut delay = None;
            slot.holders.retain(|h| {
                if h.lease != lease {
                    return true;
                }
                if expired && h.delay_ms > 0 {
                    delay = Some(now + h.delay_ms);
                }
                false
            });
            if let Some(until) = delay {
                slot.delay_until = Some(slot.delay_until.map_or(until, |d| d.max(until)));
            }
        }
        let requests = &self.requests;
        for slot in self.slots.values_mut() {
            slot.queue.retain(|w| requests.contains_key(w));
        }
        self.settle();
    }

    /// A claim (validated already), as the model expects it to end.
    fn claim(&mut self, ask: Ask) -> Expect {
        let Ask {
            parts,
            lease,
            new_lease,
            limit,
            waiter,
            label,
            delay_ms,
        } = ask;
        let lease_id = lease.unwrap_or(new_lease);
        if lease.is_some_and(|l| !self.leases.contains_key(&l)) {
            return Expect::Refused;
        }
        if let Some((res, _, _)) = parts.first() {
            if let Res::Semaphore(_) = res {
                if self
                    .slots
                    .get(res)
                    .is_some_and(|s| s.active() && s.limit != limit)
                {
                    return Expect::Refused;
                }
            }
        }
        // Retries: what this lease holds or waits for already.
        let mut held = 0;
        for (res, mode, _) in &parts {
            let slot = self.slots.get(res);
            if let Some(holding) = slot.and_then(|s| s.holders.iter().find(|h| h.lease == lease_id))
            {
                if holding.mode == LockMode::Shared && *mode == LockMode::Exclusive {
                    return Expect::Refused;
                }
                held += 1;
            } else if slot
                .is_some_and(|s| s.queue.iter().any(|w| self.requests[w].lease == lease_id))
            {
                // Its place in line answers a waiting request; a try is refused.
                return if waiter.is_some() {
                    Expect::Queued
                } else {
                    Expect::Refused
                };
            }
        }
        if held == parts.len() {
            return Expect::Granted;
        }
        if held > 0 {
            return Expect::Refused;
        }
        let fits = parts
            .iter()
            .all(|(res, mode, permits)| self.newcomer_fits(*res, *mode, *permits, limit));
        if !fits && waiter.is_none() {
            return Expect::Refused;
        }
        if lease.is_none() {
            self.leases.insert(lease_id, true);
        }
        if fits {
            for (res, mode, permits) in parts {
                let holding = MHolding {
                    lease: lease_id,
                    label: label.clone(),
                    mode,
                    permits,
                    delay_ms,
                    token: 0,
                };
                self.hold(res, holding, limit);
            }
            return Expect::Granted;
        }
        let waiter = waiter.expect("may wait");
        for (res, _, _) in &parts {
            let slot = self.slot(*res);
            if !slot.active() {
                slot.limit = limit;
            }
            slot.queue.push(waiter);
        }
        self.requests.insert(
            waiter,
            MRequest {
                lease: lease_id,
                label,
                parts,
                delay_ms,
            },
        );
        Expect::Queued
    }

    /// The oldest waiting request waits for a holder or a lock delay in at
    /// least one of its lines, never only for younger requests: it is at the
    /// head of all of them, so it holds as soon as those holders leave.
    fn oldest_waits_for_a_holder(&self) -> bool {
        let Some((&oldest, request)) = self.requests.iter().next() else {
            return true;
        };
        let heads_every_line = request.parts.iter().all(|(res, _, _)| {
            self.taken(*res, Some(oldest)).len() == self.slots[res].holders.len()
        });
        heads_every_line
            && !request
                .parts
                .iter()
                .all(|(res, _, _)| self.may_hold(oldest, *res))
    }
}

// ---------------------------------------------------------------------------
// Running a history on both.

struct Run {
    sm: StateMachine,
    /// Restored from a snapshot of `sm` taken mid-history: it is given every
    /// later command too, and must answer exactly as `sm` does.
    twin: Option<StateMachine>,
    /// The first command the twin answered differently, if any.
    diverged: Option<String>,
    model: Model,
    next_waiter: u64,
    next_lease: u128,
    next_label: u64,
    last_token: u64,
}

fn lease(n: u128) -> LeaseId {
    LeaseId(n)
}

fn lease_ref(choice: &LeaseChoice, fresh: u128) -> (LeaseRef, Option<u128>) {
    match choice {
        LeaseChoice::Existing(n) => (
            LeaseRef::Existing(lease(u128::from(*n))),
            Some(u128::from(*n)),
        ),
        LeaseChoice::New => (
            LeaseRef::New {
                lease_id: lease(fresh),
                ttl_ms: 10_000,
            },
            None,
        ),
    }
}

fn outcome_class(outcome: &Outcome) -> Expect {
    match &outcome.result {
        Ok(Reply::LockGranted(_) | Reply::LocksGranted(_) | Reply::PermitsGranted(_)) => {
            Expect::Granted
        }
        Ok(Reply::LockQueued { .. } | Reply::LocksQueued { .. } | Reply::PermitsQueued { .. }) => {
            Expect::Queued
        }
        Ok(_) => Expect::Done,
        Err(_) => Expect::Refused,
    }
}

impl Run {
    fn new() -> Run {
        let mut run = Run {
            sm: StateMachine::new(),
            twin: None,
            diverged: None,
            model: Model {
                now: START_MS,
                ..Model::default()
            },
            next_waiter: 1,
            next_lease: 100,
            next_label: 1,
            last_token: 0,
        };
        for n in 1..=LEASES {
            run.apply(Command::CreateLease {
                lease_id: lease(n),
                ttl_ms: 10_000,
                holder: format!("lease-{n}"),
            });
            run.model.leases.insert(n, false);
        }
        run
    }

    fn apply(&mut self, command: Command) -> Outcome {
        let ctx = ApplyContext {
            now_ms: self.model.now,
            limits: Limits::default(),
            term: TERM,
        };
        let request = Request::plain(command);
        let outcome = self.sm.apply(&ctx, &request);
        if let Some(twin) = self.twin.as_mut() {
            let twin_outcome = twin.apply(&ctx, &request);
            if twin_outcome != outcome && self.diverged.is_none() {
                self.diverged = Some(format!("{request:?}: {outcome:?} vs {twin_outcome:?}"));
            }
        }
        outcome
    }

    fn label(&mut self) -> String {
        self.next_label += 1;
        format!("r{}", self.next_label)
    }

    /// Runs one operation on both; returns the outcome and what the model expected.
    fn step(&mut self, op: &Op, advance: u64) -> (Outcome, Expect) {
        self.model.now += advance;
        // Time's doing comes first, whatever the command.
        self.model.clear_due_delays();
        self.model.settle();
        let fresh = self.next_lease;
        self.next_lease += 1;
        match op {
            Op::CreateLease { lease: n } => {
                let n = u128::from(*n);
                let expect = match self.model.leases.entry(n) {
                    std::collections::btree_map::Entry::Occupied(_) => Expect::Refused,
                    std::collections::btree_map::Entry::Vacant(slot) => {
                        slot.insert(false);
                        Expect::Done
                    }
                };
                let out = self.apply(Command::CreateLease {
                    lease_id: lease(n),
                    ttl_ms: 10_000,
                    holder: format!("lease-{n}"),
                });
                (out, expect)
            }
            Op::EndLease { lease: n, expire } => {
                let n = u128::from(*n);
                let expect = if self.model.leases.contains_key(&n) {
                    self.model.end_lease(n, *expire);
                    Expect::Done
                } else {
                    Expect::Refused
                };
                let command = if *expire {
                    Command::ExpireLeaseOfTerm {
                        lease_id: lease(n),
                        term: TERM,
                    }
                } else {
                    Command::RevokeLease { lease_id: lease(n) }
                };
                (self.apply(command), expect)
            }
            Op::Acquire {
                lock,
                shared,
                legacy,
                lease: choice,
                wait,
                delay,
            } => {
                let (lease_ref, existing) = lease_ref(choice, fresh);
                let waiter = wait.then(|| self.next_waiter());
                let label = self.label();
                let mode = if *shared {
                    LockMode::Shared
                } else {
                    LockMode::Exclusive
                };
                let delay_ms = if *delay { DELAY_MS } else { 0 };
                let res = Res::Lock(usize::from(*lock));
                let expect = self.model.claim(Ask {
                    parts: vec![(res, mode, 1)],
                    lease: existing,
                    new_lease: fresh,
                    limit: 0,
                    waiter,
                    label: label.clone(),
                    delay_ms,
                });
                let command = if *legacy {
                    Command::Acquire {
                        name: res.name().into(),
                        lease: lease_ref,
                        holder: Some(label),
                        waiter: waiter.map(WaiterId),
                        lock_delay_ms: delay_ms,
                    }
                } else {
                    Command::AcquireLocks {
                        locks: vec![LockRequest {
                            name: res.name().into(),
                            mode,
                        }],
                        lease: lease_ref,
                        holder: Some(label),
                        waiter: waiter.map(WaiterId),
                        lock_delay_ms: delay_ms,
                    }
                };
                (self.apply(command), expect)
            }
            Op::AcquireMany {
                locks,
                lease: choice,
                wait,
                delay,
            } => {
                let (lease_ref, existing) = lease_ref(choice, fresh);
                let waiter = wait.then(|| self.next_waiter());
                let label = self.label();
                let delay_ms = if *delay { DELAY_MS } else { 0 };
                let parts: Vec<(Res, LockMode, u32)> = locks
                    .iter()
                    .map(|(i, shared)| {
                        let mode = if *shared {
                            LockMode::Shared
                        } else {
                            LockMode::Exclusive
                        };
                        (Res::Lock(usize::from(*i)), mode, 1)
                    })
                    .collect();
                let mut distinct: Vec<Res> = parts.iter().map(|(r, _, _)| *r).collect();
                distinct.sort();
                distinct.dedup();
                let expect = if parts.is_empty() || distinct.len() != parts.len() {
                    Expect::Refused
                } else {
                    self.model.claim(Ask {
                        parts: parts.clone(),
                        lease: existing,
                        new_lease: fresh,
                        limit: 0,
                        waiter,
                        label: label.clone(),
                        delay_ms,
                    })
                };
                let command = Command::AcquireLocks {
                    locks: parts
                        .iter()
                        .map(|(res, mode, _)| LockRequest {
                            name: res.name().into(),
                            mode: *mode,
                        })
                        .collect(),
                    lease: lease_ref,
                    holder: Some(label),
                    waiter: waiter.map(WaiterId),
                    lock_delay_ms: delay_ms,
                };
                (self.apply(command), expect)
            }
            Op::Permits {
                semaphore,
                lease: choice,
                limit,
                permits,
                wait,
            } => {
                let (lease_ref, existing) = lease_ref(choice, fresh);
                let waiter = wait.then(|| self.next_waiter());
                let label = self.label();
                let index = usize::from(*semaphore);
                let limit = match limit {
                    0 => LIMITS[index],
                    1 => LIMITS[index] + 1,
                    _ => 0,
                };
                let permits = u32::from(*permits);
                let res = Res::Semaphore(index);
                let expect = if limit == 0 || permits == 0 || permits > limit {
                    Expect::Refused
                } else {
                    self.model.claim(Ask {
                        parts: vec![(res, LockMode::Exclusive, permits)],
                        lease: existing,
                        new_lease: fresh,
                        limit,
                        waiter,
                        label: label.clone(),
                        delay_ms: 0,
                    })
                };
                let command = Command::AcquirePermits {
                    name: res.name().into(),
                    lease: lease_ref,
                    holder: Some(label),
                    limit,
                    permits,
                    waiter: waiter.map(WaiterId),
                };
                (self.apply(command), expect)
            }
            Op::Release { lock, pick, stale } => {
                self.release(Res::Lock(usize::from(*lock)), *pick, *stale)
            }
            Op::ReleasePermits {
                semaphore,
                pick,
                stale,
            } => self.release(Res::Semaphore(usize::from(*semaphore)), *pick, *stale),
            Op::Cancel { pick, wrong_line } => self.cancel(*pick, *wrong_line),
            Op::Tick => (self.apply(Command::Tick), Expect::Done),
        }
    }

    fn next_waiter(&mut self) -> u64 {
        self.next_waiter += 1;
        self.next_waiter
    }

    fn release(&mut self, res: Res, pick: u8, stale: bool) -> (Outcome, Expect) {
        let holders = self
            .model
            .slots
            .get(&res)
            .map(|s| s.holders.clone())
            .unwrap_or_default();
        let (lease_n, token) = match holders.get(usize::from(pick) % holders.len().max(1)) {
            Some(h) if !stale => (h.lease, h.token),
            Some(h) => (h.lease, h.token.saturating_sub(1)),
            None => (1, 1),
        };
        // A grant that time makes in this same apply (a lock delay ending) has
        // no token the client could know yet: token 0 is never a holder's.
        let valid = token != 0
            && holders
                .iter()
                .any(|h| h.lease == lease_n && h.token == token)
            && self.model.leases.contains_key(&lease_n);
        let expect = if valid {
            self.model
                .slot(res)
                .holders
                .retain(|h| !(h.lease == lease_n && h.token == token));
            self.model.drop_if_unused(lease_n);
            self.model.settle();
            Expect::Done
        } else {
            Expect::Refused
        };
        let command = match res {
            Res::Lock(_) => Command::Release {
                name: res.name().into(),
                lease_id: lease(lease_n),
                token,
            },
            Res::Semaphore(_) => Command::ReleasePermits {
                name: res.name().into(),
                lease_id: lease(lease_n),
                token,
            },
        };
        (self.apply(command), expect)
    }

    fn cancel(&mut self, pick: u8, wrong_line: bool) -> (Outcome, Expect) {
        let waiting: Vec<u64> = self.model.requests.keys().copied().collect();
        let Some(&waiter) = waiting.get(usize::from(pick) % waiting.len().max(1)) else {
            let out = self.apply(Command::CancelWait {
                name: LOCKS[0].into(),
                waiter: WaiterId(0),
            });
            return (out, Expect::Refused);
        };
        let request = self.model.requests[&waiter].clone();
        let own = request.parts[0].0;
        let line = match own {
            Res::Lock(_) if wrong_line => LOCKS
                .iter()
                .enumerate()
                .map(|(i, _)| Res::Lock(i))
                .find(|r| !request.parts.iter().any(|(p, _, _)| p == r))
                .unwrap_or(own),
            _ => own,
        };
        let in_line = request.parts.iter().any(|(p, _, _)| *p == line);
        let expect = if in_line {
            self.model.requests.remove(&waiter);
            for (res, _, _) in &request.parts {
                self.model.slot(*res).queue.retain(|w| *w != waiter);
            }
            self.model.drop_if_unused(request.lease);
            self.model.settle();
            Expect::Done
        } else {
            Expect::Refused
        };
        let command = match line {
            Res::Lock(_) => Command::CancelWait {
                name: line.name().into(),
                waiter: WaiterId(waiter),
            },
            Res::Semaphore(_) => Command::CancelPermitWait {
                name: line.name().into(),
                waiter: WaiterId(waiter),
            },
        };
        (self.apply(command), expect)
    }

    /// Learns the tokens of the grants the command made (the model does not
    /// predict token values, only who holds) and checks (e).
    fn learn_tokens(&mut self, out: &Outcome) -> Result<(), TestCaseError> {
        for event in &out.events {
            let (grant, res) = match &event.kind {
                EventKind::LockAcquired { grant, .. } => {
                    let i = LOCKS
                        .iter()
                        .position(|n| *n == grant.name)
                        .expect("known lock");
                    (grant, Res::Lock(i))
                }
                EventKind::SemaphoreAcquired { grant, .. } => {
                    let i = SEMAPHORES
                        .iter()
                        .position(|n| *n == grant.name)
                        .expect("known");
                    (grant, Res::Semaphore(i))
                }
                _ => continue,
            };
            prop_assert_eq!(
                grant.token,
                event.revision,
                "(e) token is the event's revision"
            );
            prop_assert!(grant.token > self.last_token, "(e) tokens increase");
            self.last_token = grant.token;
            let holding = self
                .model
                .slot(res)
                .holders
                .iter_mut()
                .find(|h| h.lease == grant.lease_id.0 && h.token == 0);
            match holding {
                Some(holding) => holding.token = grant.token,
                None => {
                    // Granted and ended in the same command (time granted it
                    // first, then the command ended its lease): its end follows.
                    let ended = out.events.iter().any(|later| {
                        later.revision > event.revision
                            && matches!(&later.kind,
                                EventKind::LockReleased { token, .. }
                                | EventKind::SemaphoreReleased { token, .. } if *token == grant.token)
                    });
                    prop_assert!(ended, "the model granted it too: {:?}", event);
                }
            }
        }
        Ok(())
    }

    /// The machine's holders, queues and delays equal the model's, and (a), (b), (d) hold.
    fn check(&self) -> Result<(), TestCaseError> {
        for (i, name) in LOCKS.iter().enumerate() {
            let view = self.sm.lock(name);
            let slot = self
                .model
                .slots
                .get(&Res::Lock(i))
                .cloned()
                .unwrap_or_default();
            let mut real: Vec<(String, LockMode, u64)> = view
                .holders
                .iter()
                .map(|h| (h.holder.clone(), h.mode, h.token))
                .collect();
            let mut model: Vec<(String, LockMode, u64)> = slot
                .holders
                .iter()
                .map(|h| (h.label.clone(), h.mode, h.token))
                .collect();
            real.sort();
            model.sort();
            prop_assert_eq!(&real, &model, "holders of lock {}", name);
            if view.holders.iter().any(|h| h.mode == LockMode::Exclusive) {
                prop_assert_eq!(view.holders.len(), 1, "(a) a writer holds {} alone", name);
            }
            let queue: Vec<String> = slot
                .queue
                .iter()
                .map(|w| self.model.requests[w].label.clone())
                .collect();
            prop_assert_eq!(&view.queue, &queue, "line of lock {}", name);
            prop_assert_eq!(
                view.delay_until_ms.is_some(),
                slot.delay_until.is_some(),
                "lock delay of {}",
                name
            );
        }
        for (i, name) in SEMAPHORES.iter().enumerate() {
            let view = self.sm.semaphore(name);
            let slot = self
                .model
                .slots
                .get(&Res::Semaphore(i))
                .cloned()
                .unwrap_or_default();
            let mut real: Vec<(String, u32, u64)> = view
                .holders
                .iter()
                .map(|h| (h.holder.clone(), h.permits, h.token))
                .collect();
            let mut model: Vec<(String, u32, u64)> = slot
                .holders
                .iter()
                .map(|h| (h.label.clone(), h.permits, h.token))
                .collect();
            real.sort();
            model.sort();
            prop_assert_eq!(&real, &model, "holders of semaphore {}", name);
            if let Some(limit) = view.limit {
                prop_assert!(
                    view.in_use <= u64::from(limit),
                    "(b) {} within its limit",
                    name
                );
                prop_assert_eq!(limit, slot.limit);
            } else {
                prop_assert!(!slot.active());
            }
            let queue: Vec<(String, u32)> = slot
                .queue
                .iter()
                .map(|w| {
                    let request = &self.model.requests[w];
                    (request.label.clone(), request.parts[0].2)
                })
                .collect();
            let real_queue: Vec<(String, u32)> = view
                .queue
                .iter()
                .map(|q| (q.holder.clone(), q.permits))
                .collect();
            prop_assert_eq!(&real_queue, &queue, "line of semaphore {}", name);
        }
        for n in 1..=LEASES {
            prop_assert_eq!(
                self.sm.lease(lease(n)).is_some(),
                self.model.leases.contains_key(&n),
                "lease {} alive",
                n
            );
        }
        prop_assert!(
            self.model.oldest_waits_for_a_holder(),
            "(d) the oldest request waits for a holder: {:?}",
            self.model
        );
        Ok(())
    }
}

fn run_history(ops: &[(Op, u64)], snapshot_at: u8) -> Result<Run, TestCaseError> {
    let mut run = Run::new();
    let snapshot_step = usize::from(snapshot_at) * ops.len() / 256;
    for (index, (op, advance)) in ops.iter().enumerate() {
        if index == snapshot_step {
            let bytes = run.sm.to_snapshot();
            let restored = StateMachine::from_snapshot(&bytes)
                .map_err(|e| TestCaseError::fail(format!("restore: {e}")))?;
            prop_assert_eq!(&restored, &run.sm, "(f) the snapshot restores the state");
            run.twin = Some(restored);
        }
        let before = run.sm.clone();
        let now = run.model.now + advance;
        let (out, expect) = run.step(op, *advance);
        prop_assert_eq!(
            outcome_class(&out),
            expect.clone(),
            "answer to {:?}: {:?}",
            op,
            out
        );
        if expect == Expect::Refused {
            // A refusal changes nothing but what time alone changes.
            let mut timed = before;
            let ctx = ApplyContext {
                now_ms: now,
                limits: Limits::default(),
                term: TERM,
            };
            timed.apply(&ctx, &Request::plain(Command::Tick));
            prop_assert!(timed == run.sm, "the refused {:?} changed the state", op);
        }
        run.learn_tokens(&out)?;
        run.check()?;
        prop_assert!(
            run.diverged.is_none(),
            "(f) the restored twin diverged: {:?}",
            run.diverged
        );
    }
    if let Some(twin) = &run.twin {
        prop_assert!(twin == &run.sm, "(f) the twin ends in the same state");
    }
    Ok(run)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn shared_locks_semaphores_and_multi_acquire_follow_the_model((ops, snapshot_at) in history()) {
        run_history(&ops, snapshot_at)?;
    }
}

/// One client of the deadlock test: a lease and the locks it asks for together.
#[derive(Clone, Debug)]
struct Client {
    locks: Vec<(u8, bool)>,
    /// Its lease expires instead of releasing (once granted, or while it waits).
    expires: bool,
}

fn clients() -> impl Strategy<Value = (Vec<Client>, Vec<u8>)> {
    let client = (
        prop::sample::subsequence(vec![0u8, 1, 2], 1..=3).prop_shuffle(),
        prop::collection::vec(any::<bool>(), 3),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(locks, shared, expires)| Client {
            locks: locks.into_iter().zip(shared).collect(),
            expires,
        });
    (
        prop::collection::vec(client, 2..=8),
        prop::collection::vec(any::<u8>(), 64),
    )
}

/// Every client asks for its locks in its own order and waits; whoever is
/// granted releases everything (or lets its lease expire), in a random order.
/// Nobody is ever stuck: until every request has been granted or has left with
/// its lease, some lease holds something it will give back. Each grant gives a
/// request all its locks in one step.
fn drain(clients: &[Client], picks: &[u8]) -> Result<(), TestCaseError> {
    let mut run = Run::new();
    let base = 10u128;
    for i in 0..clients.len() {
        let n = base + i as u128;
        run.apply(Command::CreateLease {
            lease_id: lease(n),
            ttl_ms: 10_000,
            holder: format!("client-{i}"),
        });
    }
    let mut granted = vec![false; clients.len()];
    let mut gone = vec![false; clients.len()];
    let note = |out: &Outcome, granted: &mut Vec<bool>| -> Result<(), TestCaseError> {
        let mut by_lease: BTreeMap<u128, Vec<String>> = BTreeMap::new();
        for event in &out.events {
            if let EventKind::LockAcquired { grant, .. } = &event.kind {
                by_lease
                    .entry(grant.lease_id.0)
                    .or_default()
                    .push(grant.name.clone());
            }
        }
        for (n, names) in by_lease {
            let i = (n - base) as usize;
            prop_assert!(!granted[i], "client {} granted twice", i);
            prop_assert_eq!(names.len(), clients[i].locks.len(), "all its locks at once");
            granted[i] = true;
        }
        Ok(())
    };
    for (i, client) in clients.iter().enumerate() {
        let out = run.apply(Command::AcquireLocks {
            locks: client
                .locks
                .iter()
                .map(|(l, shared)| LockRequest {
                    name: LOCKS[usize::from(*l)].into(),
                    mode: if *shared {
                        LockMode::Shared
                    } else {
                        LockMode::Exclusive
                    },
                })
                .collect(),
            lease: LeaseRef::Existing(lease(base + i as u128)),
            holder: None,
            waiter: Some(WaiterId(1_000 + i as u64)),
            lock_delay_ms: 0,
        });
        prop_assert!(out.result.is_ok(), "{:?}", out);
        note(&out, &mut granted)?;
    }
    // Each round one client lets go (its lease ends), so n rounds end them all.
    let mut pick = picks.iter().cycle();
    for _ in 0..clients.len() {
        // Who can let go now: a granted client (it is done), or a waiting one
        // whose lease expires.
        let candidates: Vec<usize> = (0..clients.len())
            .filter(|&i| !gone[i] && (granted[i] || clients[i].expires))
            .collect();
        if candidates.is_empty() {
            let stuck: Vec<usize> = (0..clients.len()).filter(|&i| !gone[i]).collect();
            prop_assert!(
                stuck.is_empty(),
                "deadlock: {:?} wait and nobody holds anything",
                stuck
            );
            break;
        }
        let i = candidates[usize::from(*pick.next().unwrap_or(&0)) % candidates.len()];
        let lease_id = lease(base + i as u128);
        let command = if clients[i].expires {
            Command::ExpireLeaseOfTerm {
                lease_id,
                term: TERM,
            }
        } else {
            Command::RevokeLease { lease_id }
        };
        let out = run.apply(command);
        prop_assert!(out.result.is_ok(), "{:?}", out);
        gone[i] = true;
        note(&out, &mut granted)?;
    }
    prop_assert!(
        gone.iter().all(|g| *g),
        "every client finished: {:?} {:?}",
        granted,
        gone
    );
    for name in LOCKS {
        let view = run.sm.lock(name);
        prop_assert!(
            !view.held && view.waiters == 0,
            "{} is left free: {:?}",
            name,
            view
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn multi_acquires_in_any_order_never_deadlock((clients, picks) in clients()) {
        drain(&clients, &picks)?;
    }
}

#[test]
fn refusals_name_the_error() {
    let mut run = Run::new();
    let (out, _) = run.step(
        &Op::AcquireMany {
            locks: vec![],
            lease: LeaseChoice::Existing(1),
            wait: false,
            delay: false,
        },
        0,
    );
    assert!(matches!(out.result, Err(CoreError::InvalidLockList { .. })));
}

/// Found by the property test: a request granted from the line onto a semaphore
/// whose line it emptied reset the limit to 0 (the view showed no limit while
/// permits were out, and the next acquirer could state any limit).
#[test]
fn a_semaphore_keeps_its_limit_when_its_line_hands_on() {
    let permits = |lease, permits, wait| Op::Permits {
        semaphore: 0,
        lease: LeaseChoice::Existing(lease),
        limit: 0,
        permits,
        wait,
    };
    let ops = vec![
        (permits(2, 1, false), 0),
        (permits(1, 3, true), 0),
        (
            Op::ReleasePermits {
                semaphore: 0,
                pick: 0,
                stale: false,
            },
            0,
        ),
    ];
    let run = run_history(&ops, 0).unwrap();
    let view = run.sm.semaphore(SEMAPHORES[0]);
    assert_eq!((view.limit, view.in_use), (Some(LIMITS[0]), 3));
}

/// Found by the property test: a try (no wait) by a lease that already waits in
/// a lock's line was granted beside its own place, and the place's later grant
/// gave the lease a second holding of the same lock.
#[test]
fn a_lease_waiting_in_a_line_is_not_granted_beside_its_place() {
    let ops = vec![
        (
            Op::AcquireMany {
                locks: vec![(0, false)],
                lease: LeaseChoice::Existing(2),
                wait: false,
                delay: false,
            },
            0,
        ),
        (
            Op::AcquireMany {
                locks: vec![(2, true), (0, false)],
                lease: LeaseChoice::Existing(1),
                wait: true,
                delay: false,
            },
            0,
        ),
        (
            Op::Acquire {
                lock: 2,
                shared: true,
                legacy: false,
                lease: LeaseChoice::Existing(1),
                wait: false,
                delay: false,
            },
            0,
        ),
        (
            Op::Release {
                lock: 0,
                pick: 0,
                stale: false,
            },
            0,
        ),
    ];
    run_history(&ops, 0).unwrap();
}

/// Found by the property test: an expiring lease handed each lock on as it
/// released it, so a multi-acquire waiting for two of its locks was granted the
/// first while the second was still held, before that one's lock delay began.
#[test]
fn an_ending_lease_hands_on_only_once_all_its_holdings_are_gone() {
    let ops = vec![
        (
            Op::AcquireMany {
                locks: vec![(2, false)],
                lease: LeaseChoice::Existing(4),
                wait: false,
                delay: false,
            },
            0,
        ),
        (
            Op::Acquire {
                lock: 0,
                shared: true,
                legacy: false,
                lease: LeaseChoice::Existing(4),
                wait: false,
                delay: true,
            },
            0,
        ),
        (
            Op::AcquireMany {
                locks: vec![(2, false), (0, true)],
                lease: LeaseChoice::Existing(1),
                wait: true,
                delay: false,
            },
            0,
        ),
        (
            Op::EndLease {
                lease: 4,
                expire: true,
            },
            0,
        ),
    ];
    let run = run_history(&ops, 0).unwrap();
    assert!(
        !run.sm.lock(LOCKS[2]).held,
        "nothing granted during the lock delay"
    );
    assert_eq!(run.sm.lock(LOCKS[2]).waiters, 1);
}
