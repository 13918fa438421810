//! Property tests: random command sequences over a small universe of leases, locks,
//! elections and names, checked against a plain reference model written here from
//! the rules in API.md (not from the core's code), and against invariants that need
//! no model at all.
//!
//! - (a) at most one holder per lock, and it is the model's;
//! - (b) every grant's token is its event's revision and above every earlier token;
//!   event revisions are contiguous and strictly increasing;
//! - (c) every held lock, leadership and name belongs to a live lease;
//! - (d) no lease that has ended is granted anything (waits of a dead lease never win);
//! - (e) a snapshot taken anywhere restores a machine that behaves identically;
//! - (f) a refused command changes nothing but what time alone changes;
//! - `apply_batch` is exactly `apply` in a loop.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use baton_core::{
    validate_name, ApplyContext, Batch, Command, EventKind, HoldingKind, IdempotencyKey, LeaseId,
    LeaseRef, Limits, Outcome, Quota, Reply, Request, StateMachine, WaiterId,
    IDEMPOTENCY_RETENTION_MS,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const LOCKS: [&str; 3] = ["a", "team/b", "c"];
const ELECTIONS: [&str; 2] = ["e1", "e2"];
const NAMES: [&str; 2] = ["n1", "n2"];
/// A name that breaks the naming rules (`//`).
const BAD_NAME: &str = "bad//name";
/// Lease ids 1..=LEASES. `CreateLease` makes ids 1..=4 and `LeaseRef::New` uses
/// 4..=6: a fresh id mostly, a collision with a created lease sometimes.
const LEASES: u8 = 6;
const GOOD_TTL: u64 = 10_000;
/// The Raft term of every entry the property tests apply.
const LOG_TERM: u64 = 7;
const BAD_TTL: u64 = 10;
const START_MS: u64 = 1_000_000;

// ---------------------------------------------------------------------------
// Generated operations. They are turned into commands at run time, because
// tokens and waiter ids only exist once earlier commands have run.

#[derive(Clone, Debug)]
enum LeaseChoice {
    Existing(u8),
    New { lease: u8, ttl_ok: bool },
}

/// Which (lease, token) pair a release / proclaim / resign presents.
#[derive(Clone, Debug)]
enum Credential {
    /// The current holder's own lease and token (when there is a holder).
    Own,
    /// The given lease with one of the tokens seen so far (newest first).
    Seen { lease: u8, back: u8 },
    /// The given lease with a made-up token.
    Raw { lease: u8, token: u8 },
}

#[derive(Clone, Debug)]
enum Op {
    CreateLease {
        lease: u8,
        ttl_ok: bool,
    },
    Revoke {
        lease: u8,
    },
    Expire {
        lease: u8,
        /// 0: the old `ExpireLease`; 1: decided in the entry's own term; 2:
        /// decided in an earlier term (stale, must change nothing).
        decided: u8,
    },
    /// The lease clock's batch: several leases (repeats allowed), decided in
    /// the entry's own term or, when `stale`, an earlier one.
    ExpireMany {
        leases: Vec<u8>,
        stale: bool,
    },
    Acquire {
        lock: u8,
        lease: LeaseChoice,
        holder: u8,
        wait: bool,
        delay_ms: u64,
    },
    Release {
        lock: u8,
        who: Credential,
    },
    CancelWait {
        lock: u8,
        queued: bool,
        pick: u8,
    },
    Campaign {
        election: u8,
        lease: LeaseChoice,
        wait: bool,
        big_value: bool,
    },
    Proclaim {
        election: u8,
        who: Credential,
    },
    Resign {
        election: u8,
        who: Credential,
    },
    CancelCampaign {
        election: u8,
        queued: bool,
        pick: u8,
    },
    Register {
        name: u8,
        lease: LeaseChoice,
        holder: u8,
    },
    Unregister {
        name: u8,
        lease: u8,
    },
    /// An admin ends a holding: kind 0 lock, 1 election, 2 name; `guard` 0 sends
    /// no token, 1 the current holder's, 2 another.
    ForceRelease {
        kind: u8,
        index: u8,
        guard: u8,
    },
    Tick,
    /// Re-sends an earlier keyed request verbatim (a client retry).
    Retry {
        pick: u8,
    },
}

#[derive(Clone, Debug)]
struct Step {
    op: Op,
    /// Milliseconds the leader's clock moved (negative: a leader whose clock is
    /// behind the last one's).
    advance_ms: i64,
    /// Goes into the same log entry as the previous step.
    join_batch: bool,
    /// Sent with an idempotency key (one of a few, so keys get reused).
    key: Option<u8>,
    /// Sent by one of two principals (auth on), else plain (auth off).
    principal: Option<u8>,
}

#[derive(Clone, Debug)]
struct Case {
    steps: Vec<Step>,
    tight_limits: bool,
    /// Where the snapshot is taken, as a fraction of the steps (0..=255).
    snapshot_at: u8,
}

/// A lease id that is often alive: mostly the created ones.
fn lease_id() -> impl Strategy<Value = u8> {
    prop_oneof![6 => 1..=4u8, 1 => 5..=LEASES]
}

fn lease_choice() -> impl Strategy<Value = LeaseChoice> {
    prop_oneof![
        3 => lease_id().prop_map(LeaseChoice::Existing),
        1 => (4..=LEASES, prop::bool::weighted(0.95))
            .prop_map(|(lease, ttl_ok)| LeaseChoice::New { lease, ttl_ok }),
    ]
}

fn credential() -> impl Strategy<Value = Credential> {
    prop_oneof![
        3 => Just(Credential::Own),
        1 => (lease_id(), any::<u8>()).prop_map(|(lease, back)| Credential::Seen { lease, back }),
        1 => (lease_id(), 0..40u8).prop_map(|(lease, token)| Credential::Raw { lease, token }),
    ]
}

/// Index into LOCKS, or LOCKS.len() for the invalid name now and then.
fn lock_index() -> impl Strategy<Value = u8> {
    prop_oneof![20 => 0..LOCKS.len() as u8, 1 => Just(LOCKS.len() as u8)]
}

fn delay_ms() -> impl Strategy<Value = u64> {
    // 100 s is above the default max_lock_delay_ms (60 s): refused.
    prop_oneof![
        10 => Just(0u64),
        6 => Just(1_500u64),
        3 => Just(5_000u64),
        1 => Just(100_000u64),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..=4u8, prop::bool::weighted(0.95))
            .prop_map(|(lease, ttl_ok)| Op::CreateLease { lease, ttl_ok }),
        1 => lease_id().prop_map(|lease| Op::Revoke { lease }),
        2 => (lease_id(), 0..3u8).prop_map(|(lease, decided)| Op::Expire { lease, decided }),
        1 => (prop::collection::vec(lease_id(), 0..4), prop::bool::weighted(0.2))
            .prop_map(|(leases, stale)| Op::ExpireMany { leases, stale }),
        10 => (lock_index(), lease_choice(), holder_index(), prop::bool::weighted(0.6), delay_ms()).prop_map(
            |(lock, lease, holder, wait, delay_ms)| Op::Acquire { lock, lease, holder, wait, delay_ms }
        ),
        4 => (lock_index(), credential()).prop_map(|(lock, who)| Op::Release { lock, who }),
        2 => (lock_index(), prop::bool::weighted(0.8), any::<u8>())
            .prop_map(|(lock, queued, pick)| Op::CancelWait { lock, queued, pick }),
        3 => (0..2u8, lease_choice(), prop::bool::weighted(0.6), prop::bool::weighted(0.03)).prop_map(
            |(election, lease, wait, big_value)| Op::Campaign { election, lease, wait, big_value }
        ),
        1 => (0..2u8, credential()).prop_map(|(election, who)| Op::Proclaim { election, who }),
        2 => (0..2u8, credential()).prop_map(|(election, who)| Op::Resign { election, who }),
        1 => (0..2u8, prop::bool::weighted(0.8), any::<u8>())
            .prop_map(|(election, queued, pick)| Op::CancelCampaign { election, queued, pick }),
        2 => (0..2u8, lease_choice(), holder_index())
            .prop_map(|(name, lease, holder)| Op::Register { name, lease, holder }),
        1 => (0..2u8, lease_id()).prop_map(|(name, lease)| Op::Unregister { name, lease }),
        1 => (0..3u8, any::<u8>(), 0..3u8)
            .prop_map(|(kind, index, guard)| Op::ForceRelease { kind, index, guard }),
        2 => Just(Op::Tick),
        1 => any::<u8>().prop_map(|pick| Op::Retry { pick }),
    ]
}

/// Index for [`holder_text`]: mostly fine, now and then too long.
fn holder_index() -> impl Strategy<Value = u8> {
    prop_oneof![30 => 0..5u8, 1 => Just(5u8)]
}

fn advance_ms() -> impl Strategy<Value = i64> {
    prop_oneof![
        8 => Just(0i64),
        8 => 1..2_000i64,
        2 => Just(5_000i64),
        1 => Just(IDEMPOTENCY_RETENTION_MS as i64),
        1 => Just(-700i64),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (
        op(),
        advance_ms(),
        prop::bool::weighted(0.3),
        prop::option::weighted(0.08, 0..5u8),
        prop::option::weighted(0.3, 0..2u8),
    )
        .prop_map(|(op, advance_ms, join_batch, key, principal)| Step {
            op,
            advance_ms,
            join_batch,
            key,
            principal,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(step(), 1..80),
        prop::bool::weighted(0.3),
        any::<u8>(),
    )
        .prop_map(|(generated, tight_limits, snapshot_at)| {
            // Start with leases 1..=4 alive, so that most commands have something
            // to work on; later steps revoke, expire and re-create them.
            let mut steps: Vec<Step> = (1..=4)
                .map(|lease| Step {
                    op: Op::CreateLease {
                        lease,
                        ttl_ok: true,
                    },
                    advance_ms: 0,
                    join_batch: lease > 1,
                    key: None,
                    principal: (lease > 2).then_some(lease % 2),
                })
                .collect();
            steps.extend(generated);
            Case {
                steps,
                tight_limits,
                snapshot_at,
            }
        })
}

// ---------------------------------------------------------------------------
// The reference model: plain maps, the rules of API.md, nothing clever.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Lock,
    Election,
    Name,
}

/// The token of a grant the model made in the command being run: learnt from
/// the grant's event once the command has run; no request can present it before.
const UNKNOWN_TOKEN: u64 = u64::MAX;

#[derive(Clone, Debug)]
struct MHold {
    lease: u128,
    /// Filled in from the grant's event after the command ran.
    token: u64,
    holder: String,
    delay_ms: u64,
}

#[derive(Clone, Debug)]
struct MWait {
    waiter: u64,
    lease: u128,
    holder: String,
    delay_ms: u64,
}

#[derive(Clone, Debug)]
struct MLease {
    ephemeral: bool,
    holder: String,
}

#[derive(Clone, Debug)]
struct MName {
    lease: u128,
    token: u64,
    holder: String,
}

#[derive(Clone, Debug, Default)]
struct MSlot {
    holder: Option<MHold>,
    queue: VecDeque<MWait>,
    delay_until: Option<u64>,
}

impl MSlot {
    fn idle(&self) -> bool {
        self.holder.is_none() && self.queue.is_empty() && self.delay_until.is_none()
    }
}

/// What the model expects a command's reply to be.
#[derive(Clone, Debug, PartialEq, Eq)]
enum MReply {
    LeaseCreated,
    LeaseEnded {
        locks: Vec<String>,
        names: Vec<String>,
        elections: Vec<String>,
    },
    Granted(u128),
    Queued(u128),
    Released,
    WaitCancelled,
    Elected(u128),
    CampaignQueued(u128),
    Proclaimed,
    Resigned,
    NameRegistered(bool),
    NameUnregistered,
    Ticked,
    ForceReleased,
    LeasesExpired(u64),
}

enum Prediction {
    /// The command runs: accepted (with this reply) or refused.
    Runs(Option<MReply>),
    /// A retry of a remembered keyed request: the old answer, no change.
    Replayed,
    /// A remembered key with a different request: refused, no change.
    KeyReused,
}

#[derive(Clone, Debug)]
struct Model {
    limits: Limits,
    clock: u64,
    leases: BTreeMap<u128, MLease>,
    locks: BTreeMap<String, MSlot>,
    elections: BTreeMap<String, MSlot>,
    names: BTreeMap<String, MName>,
    /// (principal, idempotency key) -> (fingerprint, recorded at).
    keys: BTreeMap<(String, String), (u64, u64)>,
    /// The principal that created each lease (stale for dead leases: only
    /// entries of live leases count).
    owners: BTreeMap<u128, String>,
    /// Grants made by the command being run: (kind, name, lease, waiter).
    granted: Vec<(Kind, String, u128, Option<u64>)>,
}

impl Model {
    fn new(limits: Limits) -> Self {
        Model {
            limits,
            clock: 0,
            leases: BTreeMap::new(),
            locks: BTreeMap::new(),
            elections: BTreeMap::new(),
            names: BTreeMap::new(),
            keys: BTreeMap::new(),
            owners: BTreeMap::new(),
            granted: Vec::new(),
        }
    }

    fn slots(&mut self, kind: Kind) -> &mut BTreeMap<String, MSlot> {
        match kind {
            Kind::Lock => &mut self.locks,
            Kind::Election => &mut self.elections,
            Kind::Name => unreachable!("names are not slots"),
        }
    }

    fn holdings(&self, lease: u128) -> usize {
        let in_slots = |slots: &BTreeMap<String, MSlot>| {
            slots
                .values()
                .map(|s| {
                    usize::from(s.holder.as_ref().is_some_and(|h| h.lease == lease))
                        + s.queue.iter().filter(|w| w.lease == lease).count()
                })
                .sum::<usize>()
        };
        in_slots(&self.locks)
            + in_slots(&self.elections)
            + self.names.values().filter(|n| n.lease == lease).count()
    }

    fn held_names(slots: &BTreeMap<String, MSlot>, lease: u128) -> Vec<String> {
        slots
            .iter()
            .filter(|(_, s)| s.holder.as_ref().is_some_and(|h| h.lease == lease))
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn waiting(&self, lease: u128) -> usize {
        self.locks
            .values()
            .chain(self.elections.values())
            .map(|s| s.queue.iter().filter(|w| w.lease == lease).count())
            .sum()
    }

    fn ttl_ok(&self, ttl: u64) -> bool {
        (self.limits.min_ttl_ms..=self.limits.max_ttl_ms).contains(&ttl)
    }

    /// May a new holding (or wait) hang on this lease?
    fn room_on(&self, lease: &LeaseRef) -> bool {
        match lease {
            LeaseRef::Existing(id) => {
                self.leases.contains_key(&id.0)
                    && self.holdings(id.0) < self.limits.max_holdings_per_lease as usize
            }
            LeaseRef::New { lease_id, ttl_ms } => {
                self.ttl_ok(*ttl_ms) && !self.leases.contains_key(&lease_id.0)
            }
        }
    }

    /// Creates the lease of a `LeaseRef::New` (its holder: the holding's holder, or
    /// none), and returns the holding's holder: the explicit one, else the lease's.
    fn create_if_new(&mut self, lease: &LeaseRef, holder: Option<&str>) -> String {
        if let LeaseRef::New { lease_id, .. } = lease {
            let holder = holder.unwrap_or_default().to_owned();
            self.leases.insert(
                lease_id.0,
                MLease {
                    ephemeral: true,
                    holder,
                },
            );
        }
        match holder {
            Some(holder) => holder.to_owned(),
            None => self.leases[&lease.id().0].holder.clone(),
        }
    }

    fn existing_is_dead(&self, lease: &LeaseRef) -> bool {
        matches!(lease, LeaseRef::Existing(id) if !self.leases.contains_key(&id.0))
    }

    fn grant(&mut self, kind: Kind, name: &str, wait: MWait, waiter: Option<u64>) {
        let lease = wait.lease;
        self.slots(kind).entry(name.to_owned()).or_default().holder = Some(MHold {
            lease,
            token: UNKNOWN_TOKEN,
            holder: wait.holder,
            delay_ms: wait.delay_ms,
        });
        self.granted.push((kind, name.to_owned(), lease, waiter));
    }

    /// A free slot (no holder, no delay) goes to the first in line.
    fn hand_off(&mut self, kind: Kind, name: &str) {
        let slot = self.slots(kind).entry(name.to_owned()).or_default();
        if slot.holder.is_none() && slot.delay_until.is_none() {
            if let Some(next) = slot.queue.pop_front() {
                let waiter = next.waiter;
                self.grant(kind, name, next, Some(waiter));
            }
        }
    }

    fn end_holding(&mut self, kind: Kind, name: &str, expired: bool) {
        let clock = self.clock;
        let slot = self.slots(kind).entry(name.to_owned()).or_default();
        let Some(held) = slot.holder.take() else {
            return;
        };
        if kind == Kind::Lock && expired && held.delay_ms > 0 {
            slot.delay_until = Some(clock + held.delay_ms);
        }
        self.hand_off(kind, name);
    }

    fn settle(&mut self, name: &str) {
        let clock = self.clock;
        let slot = self.locks.entry(name.to_owned()).or_default();
        if slot.delay_until.is_some_and(|until| until <= clock) {
            slot.delay_until = None;
            self.hand_off(Kind::Lock, name);
        }
    }

    fn settle_all(&mut self) {
        let names: Vec<String> = self.locks.keys().cloned().collect();
        for name in names {
            self.settle(&name);
        }
    }

    /// The lease's last holding went: an ephemeral lease goes with it.
    fn after_detach(&mut self, lease: u128) {
        if self.leases.get(&lease).is_some_and(|l| l.ephemeral) && self.holdings(lease) == 0 {
            self.end_lease(lease, false);
        }
    }

    fn end_lease(&mut self, lease: u128, expired: bool) -> MReply {
        self.leases.remove(&lease);
        for slot in self.locks.values_mut().chain(self.elections.values_mut()) {
            slot.queue.retain(|w| w.lease != lease);
        }
        let locks = Self::held_names(&self.locks, lease);
        let elections = Self::held_names(&self.elections, lease);
        for name in &locks {
            self.end_holding(Kind::Lock, name, expired);
        }
        for name in &elections {
            self.end_holding(Kind::Election, name, expired);
        }
        let names: Vec<String> = self
            .names
            .iter()
            .filter(|(_, entry)| entry.lease == lease)
            .map(|(n, _)| n.clone())
            .collect();
        for name in &names {
            self.names.remove(name);
        }
        MReply::LeaseEnded {
            locks,
            names,
            elections,
        }
    }

    fn holder_ok(&self, holder: Option<&str>) -> bool {
        holder.map_or(0, str::len) <= self.limits.max_holder_bytes as usize
    }

    fn value_ok(&self, value: &str) -> bool {
        value.len() <= self.limits.max_value_bytes as usize
    }

    fn predict(&mut self, now_ms: u64, request: &Request) -> Prediction {
        self.granted.clear();
        self.clock = self.clock.max(now_ms);
        let clock = self.clock;
        self.keys
            .retain(|_, (_, at)| *at + IDEMPOTENCY_RETENTION_MS > clock);
        // Lock delays that have passed end before any command, refused or not.
        self.settle_all();
        if let Some(key) = &request.idempotency {
            let recorded = self.keys.get(&(key.principal.clone(), key.key.clone()));
            if let Some((fingerprint, _)) = recorded {
                return if *fingerprint == key.fingerprint {
                    Prediction::Replayed
                } else {
                    Prediction::KeyReused
                };
            }
        }
        let reply = self.run(&request.command);
        if let Some(key) = &request.idempotency {
            let id = (key.principal.clone(), key.key.clone());
            self.keys.insert(id, (key.fingerprint, clock));
        }
        Prediction::Runs(reply)
    }

    /// A principal's command: refused when it presents a live lease another
    /// principal created; a lease it creates becomes its own.
    fn run_as(&mut self, principal: &str, command: &Command) -> Option<MReply> {
        if command.is_wrapper() {
            return None;
        }
        if let Some(id) = command.presented_lease() {
            let owner = self
                .owners
                .get(&id.0)
                .filter(|_| self.leases.contains_key(&id.0));
            if owner.is_some_and(|owner| owner != principal) {
                return None;
            }
        }
        let reply = self.run(command)?;
        if let Some((id, _)) = command.created_lease() {
            if self.leases.contains_key(&id.0) {
                self.owners.insert(id.0, principal.to_owned());
            }
        }
        Some(reply)
    }

    fn run(&mut self, command: &Command) -> Option<MReply> {
        if let Some((id, _)) = command.created_lease() {
            if !self.leases.contains_key(&id.0) {
                // A new lease starts with no owner (`run_as` then sets one).
                self.owners.remove(&id.0);
            }
        }
        match command {
            Command::AcquireLocks { .. }
            | Command::AcquirePermits { .. }
            | Command::ReleasePermits { .. }
            | Command::CancelPermitWait { .. } => {
                unreachable!("shared locks and semaphores are modelled in modes.rs")
            }
            Command::AsPrincipal { principal, command } => self.run_as(principal, command),
            Command::Within {
                principal: Some(principal),
                command,
                ..
            } => self.run_as(principal, command),
            Command::Within {
                principal: None,
                command,
                ..
            } => {
                if command.is_wrapper() {
                    return None;
                }
                self.run(command)
            }
            Command::CreateLease {
                lease_id,
                ttl_ms,
                holder,
            } => {
                if !self.ttl_ok(*ttl_ms)
                    || !self.holder_ok(Some(holder))
                    || self.leases.contains_key(&lease_id.0)
                {
                    return None;
                }
                self.leases.insert(
                    lease_id.0,
                    MLease {
                        ephemeral: false,
                        holder: holder.clone(),
                    },
                );
                Some(MReply::LeaseCreated)
            }
            Command::ExpireLeaseOfTerm { term, .. } | Command::ExpireLeasesOfTerm { term, .. }
                if *term != LOG_TERM =>
            {
                None
            }
            Command::ExpireLeasesOfTerm { lease_ids, .. } => {
                let mut ended = 0;
                for lease_id in lease_ids {
                    if self.leases.contains_key(&lease_id.0) {
                        self.end_lease(lease_id.0, true);
                        ended += 1;
                    }
                }
                Some(MReply::LeasesExpired(ended))
            }
            Command::RevokeLease { lease_id }
            | Command::ExpireLease { lease_id }
            | Command::ExpireLeaseOfTerm { lease_id, .. } => {
                if !self.leases.contains_key(&lease_id.0) {
                    return None;
                }
                let expired = !matches!(command, Command::RevokeLease { .. });
                Some(self.end_lease(lease_id.0, expired))
            }
            Command::Acquire {
                name,
                lease,
                holder,
                waiter,
                lock_delay_ms,
            } => {
                if validate_name(name).is_err()
                    || !self.holder_ok(holder.as_deref())
                    || *lock_delay_ms > self.limits.max_lock_delay_ms
                    || self.existing_is_dead(lease)
                {
                    return None;
                }
                let id = lease.id().0;
                let slot = self.locks.get(name).cloned().unwrap_or_default();
                if slot.holder.as_ref().is_some_and(|h| h.lease == id) {
                    return Some(MReply::Granted(id));
                }
                if waiter.is_some() && slot.queue.iter().any(|w| w.lease == id) {
                    return Some(MReply::Queued(id));
                }
                let free =
                    slot.holder.is_none() && slot.delay_until.is_none() && slot.queue.is_empty();
                if free {
                    if !self.room_on(lease) {
                        return None;
                    }
                    let holder = self.create_if_new(lease, holder.as_deref());
                    let wait = MWait {
                        waiter: 0,
                        lease: id,
                        holder,
                        delay_ms: *lock_delay_ms,
                    };
                    self.grant(Kind::Lock, name, wait, None);
                    return Some(MReply::Granted(id));
                }
                let waiter = (*waiter)?;
                if slot.queue.len() >= self.limits.max_waiters_per_lock as usize
                    || !self.room_on(lease)
                {
                    return None;
                }
                let holder = self.create_if_new(lease, holder.as_deref());
                self.locks
                    .entry(name.clone())
                    .or_default()
                    .queue
                    .push_back(MWait {
                        waiter: waiter.0,
                        lease: id,
                        holder,
                        delay_ms: *lock_delay_ms,
                    });
                Some(MReply::Queued(id))
            }
            Command::Release {
                name,
                lease_id,
                token,
            } => {
                if validate_name(name).is_err() || !self.leases.contains_key(&lease_id.0) {
                    return None;
                }
                let holder = self.locks.get(name).and_then(|s| s.holder.as_ref());
                if !holder.is_some_and(|h| h.lease == lease_id.0 && h.token == *token) {
                    return None;
                }
                self.end_holding(Kind::Lock, name, false);
                self.after_detach(lease_id.0);
                Some(MReply::Released)
            }
            Command::CancelWait { name, waiter } => {
                self.cancel(Kind::Lock, name, *waiter)?;
                Some(MReply::WaitCancelled)
            }
            Command::Campaign {
                name,
                lease,
                candidate,
                value,
                waiter,
            } => {
                if validate_name(name).is_err()
                    || !self.holder_ok(Some(candidate))
                    || !self.value_ok(value)
                    || self.existing_is_dead(lease)
                {
                    return None;
                }
                let id = lease.id().0;
                let slot = self.elections.get(name).cloned().unwrap_or_default();
                if slot.holder.as_ref().is_some_and(|h| h.lease == id) {
                    return Some(MReply::Elected(id));
                }
                if waiter.is_some() && slot.queue.iter().any(|w| w.lease == id) {
                    return Some(MReply::CampaignQueued(id));
                }
                if slot.holder.is_none() && slot.queue.is_empty() {
                    if !self.room_on(lease) {
                        return None;
                    }
                    let holder = self.create_if_new(lease, Some(candidate));
                    let wait = MWait {
                        waiter: 0,
                        lease: id,
                        holder,
                        delay_ms: 0,
                    };
                    self.grant(Kind::Election, name, wait, None);
                    return Some(MReply::Elected(id));
                }
                let waiter = (*waiter)?;
                if slot.queue.len() >= self.limits.max_waiters_per_lock as usize
                    || !self.room_on(lease)
                {
                    return None;
                }
                let holder = self.create_if_new(lease, Some(candidate));
                self.elections
                    .entry(name.clone())
                    .or_default()
                    .queue
                    .push_back(MWait {
                        waiter: waiter.0,
                        lease: id,
                        holder,
                        delay_ms: 0,
                    });
                Some(MReply::CampaignQueued(id))
            }
            Command::Proclaim {
                name,
                lease_id,
                token,
                value,
            } => {
                if validate_name(name).is_err()
                    || !self.value_ok(value)
                    || !self.leads(name, lease_id.0, *token)
                {
                    return None;
                }
                Some(MReply::Proclaimed)
            }
            Command::Resign {
                name,
                lease_id,
                token,
            } => {
                if validate_name(name).is_err() || !self.leads(name, lease_id.0, *token) {
                    return None;
                }
                self.end_holding(Kind::Election, name, false);
                self.after_detach(lease_id.0);
                Some(MReply::Resigned)
            }
            Command::CancelCampaign { name, waiter } => {
                self.cancel(Kind::Election, name, *waiter)?;
                Some(MReply::WaitCancelled)
            }
            Command::Register {
                name,
                lease,
                holder,
                value,
            } => {
                if validate_name(name).is_err()
                    || !self.holder_ok(holder.as_deref())
                    || !self.value_ok(value)
                    || self.existing_is_dead(lease)
                {
                    return None;
                }
                let id = lease.id().0;
                if let Some(entry) = self.names.get_mut(name) {
                    if entry.lease != id {
                        return None;
                    }
                    if let Some(holder) = holder {
                        entry.holder.clone_from(holder);
                    }
                    return Some(MReply::NameRegistered(false));
                }
                if !self.room_on(lease) {
                    return None;
                }
                let holder = self.create_if_new(lease, holder.as_deref());
                self.names.insert(
                    name.clone(),
                    MName {
                        lease: id,
                        token: UNKNOWN_TOKEN,
                        holder,
                    },
                );
                self.granted.push((Kind::Name, name.clone(), id, None));
                Some(MReply::NameRegistered(true))
            }
            Command::Unregister { name, lease_id } => {
                if validate_name(name).is_err()
                    || self.names.get(name).map(|entry| entry.lease) != Some(lease_id.0)
                {
                    return None;
                }
                self.names.remove(name);
                self.after_detach(lease_id.0);
                Some(MReply::NameUnregistered)
            }
            Command::ForceRelease {
                kind,
                name,
                expected_token,
            } => {
                validate_name(name).ok()?;
                let (lease, token) = match kind {
                    HoldingKind::Lock => {
                        let held = self.locks.get(name)?.holder.as_ref()?;
                        (held.lease, held.token)
                    }
                    HoldingKind::Election => {
                        let held = self.elections.get(name)?.holder.as_ref()?;
                        (held.lease, held.token)
                    }
                    HoldingKind::Name => {
                        let entry = self.names.get(name)?;
                        (entry.lease, entry.token)
                    }
                };
                if expected_token.is_some_and(|expected| expected != token) {
                    return None;
                }
                match kind {
                    // As an expiry of this holding alone: the lock delay applies.
                    HoldingKind::Lock => self.end_holding(Kind::Lock, name, true),
                    HoldingKind::Election => self.end_holding(Kind::Election, name, true),
                    HoldingKind::Name => {
                        self.names.remove(name);
                    }
                }
                self.after_detach(lease);
                Some(MReply::ForceReleased)
            }
            Command::Tick => Some(MReply::Ticked),
            // Not generated: cluster metadata, no lock state.
            Command::SetClusterId { .. } => Some(MReply::Ticked),
        }
    }

    fn leads(&self, name: &str, lease: u128, token: u64) -> bool {
        self.leases.contains_key(&lease)
            && self
                .elections
                .get(name)
                .and_then(|s| s.holder.as_ref())
                .is_some_and(|h| h.lease == lease && h.token == token)
    }

    fn cancel(&mut self, kind: Kind, name: &str, waiter: WaiterId) -> Option<()> {
        let slot = self.slots(kind).get_mut(name)?;
        let index = slot.queue.iter().position(|w| w.waiter == waiter.0)?;
        let lease = slot.queue.remove(index)?.lease;
        self.after_detach(lease);
        Some(())
    }

    /// Takes the tokens of this command's grants from its events.
    fn learn_tokens(&mut self, granted: &[SeenGrant]) {
        for SeenGrant {
            kind,
            name,
            lease,
            token,
            ..
        } in granted
        {
            match kind {
                Kind::Name => {
                    if let Some(entry) = self.names.get_mut(name) {
                        if entry.lease == *lease {
                            entry.token = *token;
                        }
                    }
                }
                Kind::Lock | Kind::Election => {
                    if let Some(held) = self
                        .slots(*kind)
                        .get_mut(name)
                        .and_then(|s| s.holder.as_mut())
                    {
                        if held.lease == *lease {
                            held.token = *token;
                        }
                    }
                }
            }
        }
    }
}

fn classify(reply: &Reply) -> MReply {
    match reply {
        Reply::LeaseCreated(_) => MReply::LeaseCreated,
        Reply::LeaseEnded { released } => MReply::LeaseEnded {
            locks: released.locks.clone(),
            names: released.names.clone(),
            elections: released.elections.clone(),
        },
        Reply::LeaseClosed(released) => MReply::LeaseEnded {
            locks: released.locks.clone(),
            names: released.names.clone(),
            elections: released.elections.clone(),
        },
        Reply::LeasesExpired { ended } => MReply::LeasesExpired(*ended),
        Reply::LockGranted(grant) => MReply::Granted(grant.lease_id.0),
        Reply::LockQueued { lease_id, .. } => MReply::Queued(lease_id.0),
        Reply::LockReleased => MReply::Released,
        Reply::WaitCancelled => MReply::WaitCancelled,
        Reply::Elected { grant, .. } => MReply::Elected(grant.lease_id.0),
        Reply::CampaignQueued { lease_id, .. } => MReply::CampaignQueued(lease_id.0),
        Reply::Proclaimed(_) => MReply::Proclaimed,
        Reply::Resigned => MReply::Resigned,
        Reply::NameRegistered(registered) => MReply::NameRegistered(registered.created),
        Reply::NameUnregistered => MReply::NameUnregistered,
        Reply::Ticked | Reply::ClusterId { .. } => MReply::Ticked,
        Reply::ForceReleased(_) => MReply::ForceReleased,
        Reply::LocksGranted(_)
        | Reply::LocksQueued { .. }
        | Reply::PermitsGranted(_)
        | Reply::PermitsQueued { .. }
        | Reply::PermitsReleased => {
            unreachable!("shared locks and semaphores are modelled in modes.rs")
        }
    }
}

// ---------------------------------------------------------------------------
// The runner.

#[derive(Clone, Copy, Default)]
struct Checks {
    /// (a), (c): compare every view with the model after every command.
    model: bool,
    /// (e): restore a snapshot and run the rest on both machines.
    snapshot: bool,
    /// (f): refused commands change nothing but time-driven state.
    refusals: bool,
}

/// Everything about the run that is not the machine: what ids exist so far.
struct History {
    now_ms: u64,
    next_waiter: u64,
    next_fingerprint: u64,
    waiters: Vec<u64>,
    tokens: Vec<u64>,
    keyed: Vec<Request>,
}

fn lock_name(index: u8) -> String {
    LOCKS
        .get(usize::from(index))
        .copied()
        .unwrap_or(BAD_NAME)
        .to_owned()
}

fn lease_ref(choice: &LeaseChoice) -> LeaseRef {
    match choice {
        LeaseChoice::Existing(n) => LeaseRef::Existing(LeaseId(u128::from(*n))),
        LeaseChoice::New { lease, ttl_ok } => LeaseRef::New {
            lease_id: LeaseId(u128::from(*lease)),
            ttl_ms: if *ttl_ok { GOOD_TTL } else { BAD_TTL },
        },
    }
}

fn holder_text(n: u8) -> Option<String> {
    match n {
        0 | 1 => None,
        // The same text as lease 1's own holder.
        2 => Some("pod-abc-1".to_owned()),
        5 => Some("h".repeat(300)), // above max_holder_bytes: refused
        n => Some(format!("pod-{n}")),
    }
}

fn credential_of(who: &Credential, current: Option<&MHold>, history: &History) -> (LeaseId, u64) {
    match who {
        Credential::Own => current.map_or((LeaseId(1), 1), |h| (LeaseId(h.lease), h.token)),
        Credential::Seen { lease, back } => {
            let token = match history.tokens.len() {
                0 => 1,
                n => history.tokens[n - 1 - usize::from(*back) % n],
            };
            (LeaseId(u128::from(*lease)), token)
        }
        Credential::Raw { lease, token } => (LeaseId(u128::from(*lease)), u64::from(*token)),
    }
}

fn pick_waiter(slot: Option<&MSlot>, queued: bool, pick: u8, history: &History) -> WaiterId {
    let in_queue = slot.filter(|s| queued && !s.queue.is_empty());
    if let Some(slot) = in_queue {
        return WaiterId(slot.queue[usize::from(pick) % slot.queue.len()].waiter);
    }
    match history.waiters.len() {
        0 => WaiterId(999_999),
        n => WaiterId(history.waiters[usize::from(pick) % n]),
    }
}

fn to_request(step: &Step, model: &Model, history: &mut History) -> Request {
    let fresh_waiter = |wait: bool, history: &mut History| {
        wait.then(|| {
            history.next_waiter += 1;
            history.waiters.push(history.next_waiter);
            WaiterId(history.next_waiter)
        })
    };
    let command = match &step.op {
        Op::CreateLease { lease, ttl_ok } => Command::CreateLease {
            lease_id: LeaseId(u128::from(*lease)),
            ttl_ms: if *ttl_ok { GOOD_TTL } else { BAD_TTL },
            holder: format!("pod-abc-{lease}"),
        },
        Op::Revoke { lease } => Command::RevokeLease {
            lease_id: LeaseId(u128::from(*lease)),
        },
        Op::Expire { lease, decided: 0 } => Command::ExpireLease {
            lease_id: LeaseId(u128::from(*lease)),
        },
        Op::ExpireMany { leases, stale } => Command::ExpireLeasesOfTerm {
            lease_ids: leases.iter().map(|l| LeaseId(u128::from(*l))).collect(),
            term: if *stale { LOG_TERM - 1 } else { LOG_TERM },
        },
        Op::Expire { lease, decided } => Command::ExpireLeaseOfTerm {
            lease_id: LeaseId(u128::from(*lease)),
            term: if *decided == 1 {
                LOG_TERM
            } else {
                LOG_TERM - 1
            },
        },
        Op::Acquire {
            lock,
            lease,
            holder,
            wait,
            delay_ms,
        } => Command::Acquire {
            name: lock_name(*lock),
            lease: lease_ref(lease),
            holder: holder_text(*holder),
            waiter: fresh_waiter(*wait, history),
            lock_delay_ms: *delay_ms,
        },
        Op::Release { lock, who } => {
            let name = lock_name(*lock);
            let current = model.locks.get(&name).and_then(|s| s.holder.as_ref());
            let (lease_id, token) = credential_of(who, current, history);
            Command::Release {
                name,
                lease_id,
                token,
            }
        }
        Op::CancelWait { lock, queued, pick } => {
            let name = lock_name(*lock);
            let waiter = pick_waiter(model.locks.get(&name), *queued, *pick, history);
            Command::CancelWait { name, waiter }
        }
        Op::Campaign {
            election,
            lease,
            wait,
            big_value,
        } => {
            let lease = lease_ref(lease);
            Command::Campaign {
                name: ELECTIONS[usize::from(*election)].to_owned(),
                candidate: format!("c{}", lease.id().0),
                value: if *big_value {
                    format!("\"{}\"", "v".repeat(5_000))
                } else {
                    format!("\"addr-{}\"", lease.id().0)
                },
                lease,
                waiter: fresh_waiter(*wait, history),
            }
        }
        Op::Proclaim { election, who } => {
            let name = ELECTIONS[usize::from(*election)].to_owned();
            let current = model.elections.get(&name).and_then(|s| s.holder.as_ref());
            let (lease_id, token) = credential_of(who, current, history);
            Command::Proclaim {
                name,
                lease_id,
                token,
                value: format!("{token}"),
            }
        }
        Op::Resign { election, who } => {
            let name = ELECTIONS[usize::from(*election)].to_owned();
            let current = model.elections.get(&name).and_then(|s| s.holder.as_ref());
            let (lease_id, token) = credential_of(who, current, history);
            Command::Resign {
                name,
                lease_id,
                token,
            }
        }
        Op::CancelCampaign {
            election,
            queued,
            pick,
        } => {
            let name = ELECTIONS[usize::from(*election)].to_owned();
            let waiter = pick_waiter(model.elections.get(&name), *queued, *pick, history);
            Command::CancelCampaign { name, waiter }
        }
        Op::Register {
            name,
            lease,
            holder,
        } => Command::Register {
            name: NAMES[usize::from(*name)].to_owned(),
            lease: lease_ref(lease),
            holder: holder_text(*holder),
            value: format!("{{\"n\":{holder}}}"),
        },
        Op::Unregister { name, lease } => Command::Unregister {
            name: NAMES[usize::from(*name)].to_owned(),
            lease_id: LeaseId(u128::from(*lease)),
        },
        Op::ForceRelease { kind, index, guard } => {
            let (kind, name) = match kind {
                0 => (
                    HoldingKind::Lock,
                    lock_name(*index % (LOCKS.len() as u8 + 1)),
                ),
                1 => (
                    HoldingKind::Election,
                    ELECTIONS[usize::from(*index) % 2].to_owned(),
                ),
                _ => (HoldingKind::Name, NAMES[usize::from(*index) % 2].to_owned()),
            };
            let current = match kind {
                HoldingKind::Lock => model
                    .locks
                    .get(&name)
                    .and_then(|s| s.holder.as_ref())
                    .map(|h| h.token),
                HoldingKind::Election => model
                    .elections
                    .get(&name)
                    .and_then(|s| s.holder.as_ref())
                    .map(|h| h.token),
                HoldingKind::Name => model.names.get(&name).map(|entry| entry.token),
            };
            // A grant earlier in the same entry has no known token yet: no guard.
            let known = current.filter(|token| *token != UNKNOWN_TOKEN);
            let expected_token = match guard {
                0 => None,
                1 => known,
                _ => known.map(|token| token + 1),
            };
            Command::ForceRelease {
                kind,
                name,
                expected_token,
            }
        }
        Op::Tick => Command::Tick,
        Op::Retry { pick } => {
            return match history.keyed.len() {
                0 => Request::plain(Command::Tick),
                n => history.keyed[usize::from(*pick) % n].clone(),
            };
        }
    };
    let principal = step.principal.map(|p| format!("p{p}"));
    // Principal p0 sends the pre-quota wrapper (older log entries), p1 the
    // current one with quotas too high to refuse anything (their refusals have
    // their own tests); the usage counts are checked after every entry.
    let command = match step.principal {
        Some(1) => command.within(principal.as_deref(), Quota::UNLIMITED),
        _ => command.by(principal.as_deref()),
    };
    match step.key {
        None => Request::plain(command),
        Some(key) => {
            history.next_fingerprint += 1;
            let request = Request {
                idempotency: Some(IdempotencyKey {
                    principal: principal.unwrap_or_default(),
                    key: format!("key-{key}"),
                    fingerprint: history.next_fingerprint,
                }),
                command,
            };
            history.keyed.push(request.clone());
            request
        }
    }
}

/// A grant as its event tells it.
struct SeenGrant {
    kind: Kind,
    name: String,
    lease: u128,
    token: u64,
    waiter: Option<u64>,
}

/// Checks that need no model: revisions, tokens, and that only live leases win.
struct EventChecks {
    revision: u64,
    last_token: u64,
    /// Live leases according to the events seen so far.
    alive: BTreeSet<u128>,
}

impl EventChecks {
    /// Returns this outcome's grants.
    fn check(&mut self, outcome: &Outcome) -> Result<Vec<SeenGrant>, TestCaseError> {
        let mut grants = Vec::new();
        for event in &outcome.events {
            // (b) one revision per change, no gaps.
            prop_assert_eq!(
                event.revision,
                self.revision + 1,
                "revisions are contiguous"
            );
            self.revision = event.revision;
            let grant = match &event.kind {
                EventKind::LeaseCreated { lease_id, .. } => {
                    prop_assert!(self.alive.insert(lease_id.0), "created twice: {:?}", event);
                    None
                }
                EventKind::LeaseEnded { lease_id, .. } => {
                    prop_assert!(self.alive.remove(&lease_id.0), "ended twice: {:?}", event);
                    None
                }
                EventKind::LockAcquired { grant, waiter, .. } => {
                    Some((Kind::Lock, grant, waiter.map(|w| w.0)))
                }
                EventKind::Elected { grant, waiter, .. } => {
                    Some((Kind::Election, grant, waiter.map(|w| w.0)))
                }
                EventKind::NameRegistered {
                    grant,
                    created: true,
                    ..
                } => Some((Kind::Name, grant, None)),
                _ => None,
            };
            if let Some((kind, grant, waiter)) = grant {
                // (b) the token is the grant's revision, above every earlier token.
                prop_assert_eq!(grant.token, event.revision);
                prop_assert!(grant.token > self.last_token);
                self.last_token = grant.token;
                // (d) nothing is ever granted to a lease that has ended.
                prop_assert!(
                    self.alive.contains(&grant.lease_id.0),
                    "granted to a dead lease: {:?}",
                    event
                );
                grants.push(SeenGrant {
                    kind,
                    name: grant.name.clone(),
                    lease: grant.lease_id.0,
                    token: grant.token,
                    waiter,
                });
            }
        }
        if outcome.replayed {
            // A replay answers with the revision of the first answer.
            prop_assert!(outcome.revision <= self.revision, "{:?}", outcome);
        } else {
            prop_assert_eq!(outcome.revision, self.revision);
        }
        Ok(grants)
    }
}

/// (a), (c): the machine's views say what the model says.
fn compare(sm: &StateMachine, model: &Model) -> Result<(), TestCaseError> {
    prop_assert!(
        sm.usage_is_consistent(),
        "the running usage counts equal a count from scratch"
    );
    prop_assert!(
        sm.counts_are_consistent(),
        "the running slot counts equal a count from scratch"
    );
    for id in model.leases.keys() {
        for principal in ["p0", "p1"] {
            let foreign = model.owners.get(id).is_some_and(|owner| owner != principal);
            prop_assert_eq!(
                sm.check_lease_owner(LeaseId(*id), Some(principal)).is_err(),
                foreign,
                "lease {} owned by {:?}, asked by {}",
                id,
                model.owners.get(id),
                principal
            );
        }
    }
    for name in LOCKS {
        let view = sm.lock(name);
        let slot = model.locks.get(name).cloned().unwrap_or_default();
        prop_assert_eq!(view.held, slot.holder.is_some(), "lock {} held", name);
        prop_assert_eq!(
            view.token,
            slot.holder.as_ref().map(|h| h.token),
            "lock {}",
            name
        );
        let holder = slot.holder.as_ref().map(|h| h.holder.clone());
        prop_assert_eq!(view.holder, holder, "lock {} holder", name);
        prop_assert_eq!(view.waiters, slot.queue.len(), "lock {} waiters", name);
        prop_assert_eq!(view.delay_until_ms, slot.delay_until, "lock {} delay", name);
    }
    let stored = model.locks.values().filter(|s| !s.idle()).count();
    prop_assert_eq!(
        sm.locks("", None, 100).len(),
        stored,
        "free locks are not stored"
    );
    prop_assert_eq!(
        sm.next_timer_ms(),
        model.locks.values().filter_map(|s| s.delay_until).min()
    );
    for name in ELECTIONS {
        let slot = model.elections.get(name).cloned().unwrap_or_default();
        match sm.election(name) {
            None => prop_assert!(slot.idle(), "election {} missing", name),
            Some(view) => {
                prop_assert_eq!(view.candidates, slot.queue.len());
                let leader = view.leader.map(|l| (l.candidate, l.token));
                let expected = slot.holder.map(|h| (h.holder, h.token));
                prop_assert_eq!(leader, expected, "election {} leader", name);
            }
        }
    }
    for name in NAMES {
        let got = sm.name(name).map(|view| (view.token, view.holder));
        let expected = model.names.get(name).map(|n| (n.token, n.holder.clone()));
        prop_assert_eq!(got, expected, "name {}", name);
    }
    prop_assert_eq!(sm.lease_count(), model.leases.len());
    for n in 1..=u128::from(LEASES) {
        let view = sm.lease(LeaseId(n));
        prop_assert_eq!(view.is_some(), model.leases.contains_key(&n), "lease {}", n);
        let Some(view) = view else { continue };
        // (c) what a lease says it holds is exactly what is held by it.
        let lease = &model.leases[&n];
        prop_assert_eq!(
            (view.ephemeral, &view.holder),
            (lease.ephemeral, &lease.holder)
        );
        prop_assert_eq!(
            view.locks,
            Model::held_names(&model.locks, n),
            "lease {}",
            n
        );
        prop_assert_eq!(view.elections, Model::held_names(&model.elections, n));
        let names: Vec<String> = model
            .names
            .iter()
            .filter(|(_, entry)| entry.lease == n)
            .map(|(name, _)| name.clone())
            .collect();
        prop_assert_eq!(view.names, names);
        prop_assert_eq!(view.waiting, model.waiting(n), "lease {} waiting", n);
    }
    Ok(())
}

/// A command that changes nothing but what time alone changes.
fn time_only() -> Request {
    Request::plain(Command::Tick)
}

fn run_case(case: &Case, checks: Checks) -> Result<(), TestCaseError> {
    let limits = if case.tight_limits {
        Limits {
            max_waiters_per_lock: 2,
            max_holdings_per_lease: 3,
            ..Limits::default()
        }
    } else {
        Limits::default()
    };
    let mut sm = StateMachine::new();
    let mut seq = StateMachine::new();
    let mut model = Model::new(limits);
    let mut events = EventChecks {
        revision: 0,
        last_token: 0,
        alive: BTreeSet::new(),
    };
    let mut history = History {
        now_ms: START_MS,
        next_waiter: 0,
        next_fingerprint: 0,
        waiters: Vec::new(),
        tokens: Vec::new(),
        keyed: Vec::new(),
    };
    let snapshot_at = case.steps.len() * usize::from(case.snapshot_at) / 256;
    let mut twin: Option<StateMachine> = None;

    let mut index = 0;
    while index < case.steps.len() {
        if checks.snapshot && twin.is_none() && index >= snapshot_at {
            let restored = StateMachine::from_snapshot(&sm.to_snapshot()).unwrap();
            prop_assert!(restored == sm, "a restored snapshot equals its source");
            twin = Some(restored);
        }
        // One log entry: this step and the following ones that join it.
        let first = &case.steps[index];
        history.now_ms = history.now_ms.saturating_add_signed(first.advance_ms);
        let ctx = ApplyContext {
            now_ms: history.now_ms,
            limits,
            term: LOG_TERM,
        };
        let mut batch = Batch {
            now_ms: ctx.now_ms,
            limits,
            requests: Vec::new(),
        };
        let mut outcomes = Vec::new();
        loop {
            let step = &case.steps[index];
            let request = to_request(step, &model, &mut history);
            let before = checks.refusals.then(|| seq.clone());
            let expected = model.predict(ctx.now_ms, &request);
            let outcome = seq.apply(&ctx, &request);

            let grants = events.check(&outcome)?;
            history.tokens.extend(grants.iter().map(|g| g.token));
            let mut seen: Vec<_> = grants
                .iter()
                .map(|g| (g.kind, g.name.clone(), g.lease, g.waiter))
                .collect();
            let mut predicted = model.granted.clone();
            match &expected {
                Prediction::Runs(reply) => {
                    let got = outcome.result.as_ref().ok().map(classify);
                    prop_assert_eq!(&got, reply, "reply to {:?}: {:?}", request, outcome);
                    prop_assert!(!outcome.replayed);
                }
                Prediction::Replayed => prop_assert!(outcome.replayed, "{:?}", outcome),
                Prediction::KeyReused => {
                    prop_assert!(
                        !outcome.replayed && outcome.result.is_err(),
                        "{:?}",
                        outcome
                    );
                }
            }
            if checks.model {
                seen.sort();
                predicted.sort();
                prop_assert_eq!(seen, predicted, "grants of {:?}", request);
            }
            model.learn_tokens(&grants);

            // (f) a refusal, or a replay, changes only what time changes.
            if let Some(mut before) = before {
                let refused = outcome.result.is_err() && request.idempotency.is_none();
                if refused || outcome.replayed {
                    let tick = before.apply(&ctx, &time_only());
                    prop_assert_eq!(&outcome.events, &tick.events, "{:?}", request);
                    prop_assert!(
                        seq == before,
                        "{:?} changed the state: {:?}",
                        request,
                        outcome
                    );
                }
            }
            if checks.model {
                compare(&seq, &model)?;
            }
            outcomes.push(outcome);
            batch.requests.push(request);
            index += 1;
            if index >= case.steps.len() || !case.steps[index].join_batch {
                break;
            }
        }
        // The same entry through apply_batch: the same outcomes, the same state.
        let batched = sm.apply_batch(&batch, LOG_TERM);
        prop_assert_eq!(&batched, &outcomes);
        prop_assert!(sm == seq, "apply_batch and apply agree");
        if let Some(twin) = twin.as_mut() {
            let again = twin.apply_batch(&batch, LOG_TERM);
            prop_assert_eq!(&again, &outcomes, "the restored machine answers alike");
        }
    }
    if let Some(twin) = twin {
        prop_assert!(twin == sm, "the restored machine ends in the same state");
    }
    Ok(())
}

/// 512 cases per property (about a second each in a debug build); the
/// `PROPTEST_CASES` environment variable overrides it for a longer soak.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(512);
    ProptestConfig {
        cases,
        max_shrink_iters: 4_096,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// (a) (b) (c) (d): holders, queues, leaders and names are the model's, tokens
    /// and revisions only go up, and only live leases are granted anything.
    #[test]
    fn the_model_predicts_every_holder_queue_and_token(case in case()) {
        run_case(&case, Checks { model: true, ..Checks::default() })?;
    }

    /// (e) a snapshot at any point restores a machine that answers the rest of the
    /// sequence identically and ends in an equal state.
    #[test]
    fn a_restored_snapshot_behaves_identically(case in case()) {
        run_case(&case, Checks { snapshot: true, ..Checks::default() })?;
    }

    /// (f) a refused command (or a replayed retry) changes nothing but time-driven
    /// state, exactly as a `Tick` at the same moment would.
    #[test]
    fn refused_commands_change_nothing(case in case()) {
        run_case(&case, Checks { refusals: true, ..Checks::default() })?;
    }
}

// Decoders fed bytes and text they never wrote (issue 16's fuzz targets): each
// answers or refuses, never panics, and reads back what it wrote.
proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn lease_ids_round_trip_and_other_text_is_refused_or_read(id in any::<u128>(), text in ".{0,40}") {
        let lease = LeaseId(id);
        prop_assert_eq!(lease.to_string().parse::<LeaseId>(), Ok(lease));
        prop_assert_eq!(lease.to_string().to_uppercase().parse::<LeaseId>(), Ok(lease));
        if let Ok(parsed) = text.parse::<LeaseId>() {
            prop_assert_eq!(parsed.to_string(), text.to_ascii_lowercase());
        }
    }

    #[test]
    fn arbitrary_snapshot_bytes_are_refused_or_restored(format in 0u8..=4, bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut input = vec![format];
        input.extend(bytes);
        let _ = StateMachine::from_snapshot(&input);
    }

    #[test]
    fn a_corrupted_snapshot_is_refused_or_restored(at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let mut sm = StateMachine::new();
        let ctx = ApplyContext { now_ms: 1_000, limits: Limits::default(), term: 1 };
        for (n, name) in ["a", "b/c"].iter().enumerate() {
            let lease = LeaseId(n as u128 + 1);
            sm.apply(&ctx, &Request::plain(Command::CreateLease { lease_id: lease, ttl_ms: 5_000, holder: "h".into() }.by(Some("p"))));
            sm.apply(&ctx, &Request::plain(Command::Acquire { name: (*name).into(), lease: LeaseRef::Existing(lease), holder: None, waiter: None, lock_delay_ms: 10 }));
        }
        let mut bytes = sm.to_snapshot();
        let at = at.index(bytes.len());
        bytes[at] = byte;
        let _ = StateMachine::from_snapshot(&bytes);
        bytes.truncate(cut.index(bytes.len()));
        let _ = StateMachine::from_snapshot(&bytes);
    }

    #[test]
    fn arbitrary_log_batches_are_refused_or_read(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(batch) = postcard::from_bytes::<Batch>(&bytes) {
            // Whatever decodes re-encodes to something that decodes the same.
            let again = postcard::to_allocvec(&batch).unwrap();
            prop_assert_eq!(postcard::from_bytes::<Batch>(&again).unwrap(), batch);
        }
    }
}
