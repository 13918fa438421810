//! The state machine: every replica applies the same batches in the same order and
//! reaches the same state.

use serde::{Deserialize, Serialize};

use crate::command::{Batch, Command, LeaseRef, Request};
use crate::error::CoreError;
use crate::groups::{Group, GroupClaim};
use crate::idempotency::{IdempotencyTable, Record};
use crate::ids::{LeaseId, WaiterId};
use crate::lease::{Attachment, Leases};
use crate::lease_ttls::LeaseTtlCounts;
use crate::limits::Limits;
use crate::outcome::{EndReason, Event, EventKind, Outcome};
use crate::queueing::{Claim, SlotKind};
use crate::quota::Quota;
use crate::reply::Reply;
use crate::slots::Slots;
use crate::usage::UsageTable;

/// What a log entry tells the state machine about the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApplyContext {
    /// Leader-stamped wall-clock milliseconds.
    pub now_ms: u64,
    /// Bounds to judge commands by.
    pub limits: Limits,
    /// The Raft term of the log entry being applied (what leader-clock
    /// decisions are checked against; 0 outside a log).
    pub term: u64,
}

/// A registered name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NameEntry {
    pub lease_id: LeaseId,
    pub holder: String,
    pub value: String,
    pub token: u64,
    pub modified_revision: u64,
}

/// Baton's whole replicated state and the rules that change it.
///
/// Pure and deterministic: no I/O, no clock, no randomness. Time comes in through
/// [`ApplyContext::now_ms`]; ids come in through commands.
///
/// The revision counts state changes: each [`Event`] gets the next revision, and a
/// grant's fencing token is its event's revision. Tokens are therefore unique and
/// strictly increasing even when one log entry carries many commands.
///
/// The large collections are persistent maps (`imbl`): a clone shares their
/// nodes and costs O(1), and a change after a clone copies only the nodes on its
/// path. Building a snapshot clones the state under the lock that applying
/// waits for, so at a million holdings this is the difference between a pause
/// of about two seconds and none (issue 19).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateMachine {
    pub(crate) revision: u64,
    /// Highest leader-stamped time seen: leaders' wall clocks may disagree, the
    /// state machine's clock never goes back.
    pub(crate) clock_ms: u64,
    #[serde(deserialize_with = "crate::persistent::hash_map")]
    pub(crate) leases: Leases,
    /// Boxed: tree nodes are often only half full, so small entries (name +
    /// pointer) save more than the box costs.
    pub(crate) locks: Slots,
    pub(crate) elections: Slots,
    #[serde(deserialize_with = "crate::persistent::ord_map")]
    pub(crate) names: imbl::OrdMap<String, NameEntry>,
    /// Locks in lock delay, by the time the delay ends.
    #[serde(deserialize_with = "crate::persistent::ord_set")]
    pub(crate) delayed: imbl::OrdSet<(u64, String)>,
    pub(crate) idempotency: IdempotencyTable,
    /// Names the cluster; set once by the first `SetClusterId` applied. Format-1
    /// snapshots (which lack it) decode by appending `None`.
    pub(crate) cluster_id: Option<String>,
    /// The principal that created each lease, for leases created with auth on.
    /// Kept apart from [`Lease`] so that format-2 snapshots decode by appending an
    /// empty map.
    #[serde(deserialize_with = "crate::persistent::ord_map")]
    pub(crate) lease_owners: imbl::OrdMap<LeaseId, String>,
    /// Semaphores that have holders or waiters (format 4).
    pub(crate) semaphores: Slots,
    /// Multi-acquires waiting in several lock lines, by their waiter id (format 4).
    #[serde(deserialize_with = "crate::persistent::ord_map")]
    pub(crate) groups: imbl::OrdMap<WaiterId, Group>,
    /// What each principal holds, kept with every change (derived: not in
    /// snapshots, rebuilt on restore).
    #[serde(skip)]
    pub(crate) usage: UsageTable,
    /// Live leases by TTL bucket, kept with every change (derived: not in
    /// snapshots, rebuilt on restore).
    #[serde(skip)]
    pub(crate) lease_ttls: LeaseTtlCounts,
}

impl StateMachine {
    /// An empty state at revision 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The revision: how many state changes have been applied.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The cluster's id, once the first `SetClusterId` has been applied.
    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.as_deref()
    }

    /// The state machine's clock: the highest leader-stamped time applied so far.
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// Applies one log entry's batch: one outcome per request, in order.
    pub fn apply_batch(&mut self, batch: &Batch, term: u64) -> Vec<Outcome> {
        let ctx = ApplyContext {
            now_ms: batch.now_ms,
            limits: batch.limits,
            term,
        };
        batch
            .requests
            .iter()
            .map(|request| self.apply(&ctx, request))
            .collect()
    }

    /// Applies one request.
    ///
    /// Time-driven changes come first, whatever the request: the clock advances,
    /// old idempotency records are forgotten, and locks whose lock delay has passed
    /// go to their next waiter. So the events of any outcome (even a refusal or a
    /// replay) may carry such grants; the request itself, if refused, changes nothing.
    pub fn apply(&mut self, ctx: &ApplyContext, request: &Request) -> Outcome {
        let mut events = Vec::new();
        self.advance_clock(ctx.now_ms, &mut events);
        if let Some(key) = &request.idempotency {
            if let Some(record) = self.idempotency.get(&key.principal, &key.key) {
                let replayed = record.fingerprint == key.fingerprint;
                let result = if replayed {
                    record.result.clone()
                } else {
                    Err(CoreError::IdempotencyKeyReused)
                };
                // A replay answers with the revision of the first answer, so the
                // retried HTTP response is the original one, byte for byte.
                let revision = if replayed {
                    record.revision
                } else {
                    self.revision
                };
                return Outcome {
                    revision,
                    result,
                    replayed,
                    events,
                };
            }
        }
        if let (Some(key), Some((Some(_), quota))) =
            (&request.idempotency, request.command.admission())
        {
            // Per principal: with auth off every client shares the "" key space,
            // and one cap for all would throttle the whole cluster. Refused
            // before anything is remembered: a later retry may succeed.
            if let Err(error) = self.check_idempotency_quota(&key.principal, quota) {
                return Outcome {
                    revision: self.revision,
                    result: Err(error),
                    replayed: false,
                    events,
                };
            }
        }
        let idempotency = request
            .idempotency
            .as_ref()
            .map(|key| (key.principal.clone(), key.key.clone()));
        let result = self.execute(ctx, &request.command, idempotency, &mut events);
        // A quota refusal is not remembered: it depends on what else the
        // principal holds, so a retry with the same key may succeed later.
        let remember = !matches!(result, Err(CoreError::QuotaReached { .. }));
        if let Some(key) = request.idempotency.as_ref().filter(|_| remember) {
            let record = Record {
                fingerprint: key.fingerprint,
                result: result.clone(),
                revision: self.revision,
            };
            self.idempotency
                .insert(self.clock_ms, &key.principal, &key.key, record);
        }
        Outcome {
            revision: self.revision,
            result,
            replayed: false,
            events,
        }
    }

    fn advance_clock(&mut self, now_ms: u64, events: &mut Vec<Event>) {
        if now_ms > self.clock_ms {
            self.clock_ms = now_ms;
            self.idempotency.expire(now_ms);
        }
        // Every due lock, before the command and whatever it is: these grants are
        // time's doing, so a command that is then refused has changed nothing.
        self.settle_due_delays(events);
    }

    fn execute(
        &mut self,
        ctx: &ApplyContext,
        command: &Command,
        idempotency: Option<(String, String)>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        let limits = &ctx.limits;
        match command {
            Command::CreateLease {
                lease_id,
                ttl_ms,
                holder,
            } => self.create_lease(limits, *lease_id, *ttl_ms, holder, events),
            Command::RevokeLease { lease_id } => {
                self.end_lease_command(*lease_id, EndReason::Revoked, events)
            }
            Command::ExpireLease { lease_id } => {
                self.end_lease_command(*lease_id, EndReason::Expired, events)
            }
            Command::ExpireLeaseOfTerm { lease_id, term } => {
                Self::check_expiry_term(*term, ctx)?;
                self.end_lease_command(*lease_id, EndReason::Expired, events)
            }
            Command::ExpireLeasesOfTerm { lease_ids, term } => {
                Self::check_expiry_term(*term, ctx)?;
                Ok(self.expire_leases(lease_ids, events))
            }
            Command::Acquire {
                name,
                lease,
                holder,
                waiter,
                lock_delay_ms,
            } => {
                let claim = Claim::lock(name, lease, holder.as_deref(), *lock_delay_ms, *waiter);
                self.acquire(limits, claim.remembered_as(idempotency), events)
            }
            Command::Release {
                name,
                lease_id,
                token,
            } => self.release(name, *lease_id, *token, events),
            Command::CancelWait { name, waiter } => {
                self.cancel_waiting(SlotKind::Lock, name, *waiter, events)
            }
            Command::AcquireLocks {
                locks,
                lease,
                holder,
                waiter,
                lock_delay_ms,
            } => {
                let claim = GroupClaim {
                    locks,
                    lease,
                    holder: holder.as_deref(),
                    lock_delay_ms: *lock_delay_ms,
                    waiter: *waiter,
                    idempotency,
                };
                self.acquire_locks(limits, claim, events)
            }
            Command::AcquirePermits {
                name,
                lease,
                holder,
                limit,
                permits,
                waiter,
            } => {
                let claim =
                    Claim::permits(name, lease, holder.as_deref(), *limit, *permits, *waiter);
                self.acquire_permits(limits, claim.remembered_as(idempotency), events)
            }
            Command::ReleasePermits {
                name,
                lease_id,
                token,
            } => self.release_permits(name, *lease_id, *token, events),
            Command::CancelPermitWait { name, waiter } => {
                self.cancel_waiting(SlotKind::Semaphore, name, *waiter, events)
            }
            Command::Campaign {
                name,
                lease,
                candidate,
                value,
                waiter,
            } => {
                let claim = Claim::election(name, lease, candidate, value, *waiter);
                self.campaign(limits, claim.remembered_as(idempotency), events)
            }
            Command::Proclaim {
                name,
                lease_id,
                token,
                value,
            } => self.proclaim(limits, name, *lease_id, *token, value, events),
            Command::Resign {
                name,
                lease_id,
                token,
            } => self.resign(name, *lease_id, *token, events),
            Command::CancelCampaign { name, waiter } => {
                self.cancel_waiting(SlotKind::Election, name, *waiter, events)
            }
            Command::Register {
                name,
                lease,
                holder,
                value,
            } => self.register(limits, name, lease, holder.as_deref(), value, events),
            Command::Unregister { name, lease_id } => self.unregister(name, *lease_id, events),
            // Time-driven rules already ran in `apply`.
            Command::Tick => Ok(Reply::Ticked),
            Command::ForceRelease {
                kind,
                name,
                expected_token,
            } => self.force_release(*kind, name, *expected_token, events),
            Command::AsPrincipal { principal, command } => self.execute_as(
                ctx,
                Some(principal.as_str()),
                None,
                command,
                idempotency,
                events,
            ),
            Command::Within {
                principal,
                quota,
                command,
            } => self.execute_as(
                ctx,
                principal.as_deref(),
                Some(quota),
                command,
                idempotency,
                events,
            ),
            // Metadata, not a state change of any lock: no revision.
            Command::SetClusterId { cluster_id } => {
                let kept = self.cluster_id.get_or_insert_with(|| cluster_id.clone());
                Ok(Reply::ClusterId {
                    cluster_id: kept.clone(),
                })
            }
        }
    }

    /// Runs `command` for `principal` (`None` with auth off), judged by `quota`
    /// when given (older log entries carry none): refused when it presents a
    /// live lease another principal owns (checked first, so a foreign lease is
    /// a 403 whatever the quota), or when it would exceed the quota; any lease
    /// it creates becomes the principal's.
    fn execute_as(
        &mut self,
        ctx: &ApplyContext,
        principal: Option<&str>,
        quota: Option<&Quota>,
        command: &Command,
        idempotency: Option<(String, String)>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        if command.is_wrapper() {
            return Err(CoreError::LeaseNotOwned);
        }
        if let (Some(principal), Some(lease_id)) = (principal, command.presented_lease()) {
            self.check_lease_owner(lease_id, Some(principal))?;
        }
        if let Some(quota) = quota {
            self.check_quota(principal, quota, command)?;
        }
        let reply = self.execute(ctx, command, idempotency, events)?;
        if let (Some(principal), Some((lease_id, _))) = (principal, command.created_lease()) {
            self.record_owner(lease_id, principal);
        }
        Ok(reply)
    }

    /// Records one state change and returns its revision.
    pub(crate) fn emit(&mut self, events: &mut Vec<Event>, kind: EventKind) -> u64 {
        self.revision += 1;
        events.push(Event {
            revision: self.revision,
            kind,
        });
        self.revision
    }

    /// The revision the next event will get (a grant's token, before it is emitted).
    pub(crate) fn next_revision(&self) -> u64 {
        self.revision + 1
    }

    /// Checks that `count` holdings (or places in line) on `lease` may be added:
    /// the lease exists (or will be created with a valid TTL) and has room.
    /// Changes nothing.
    pub(crate) fn check_lease_for_holding(
        &self,
        limits: &Limits,
        lease: &LeaseRef,
        count: usize,
    ) -> Result<(), CoreError> {
        let attached = match lease {
            LeaseRef::Existing(id) => {
                let lease = self.leases.get(id).ok_or(CoreError::LeaseNotFound)?;
                lease.attachments.len()
            }
            LeaseRef::New { lease_id, ttl_ms } => {
                check_ttl(limits, *ttl_ms)?;
                if self.leases.contains_key(lease_id) {
                    return Err(CoreError::LeaseExists);
                }
                0
            }
        };
        if attached + count > limits.max_holdings_per_lease as usize {
            return Err(CoreError::QuotaExceeded {
                what: format!(
                    "a lease holds at most {} locks, names, elections, permits and waits",
                    limits.max_holdings_per_lease
                ),
            });
        }
        Ok(())
    }

    /// Creates the lease of a [`LeaseRef::New`] (after all checks passed) and returns
    /// the holder to record: the explicit one, else the lease's.
    pub(crate) fn materialize_lease(
        &mut self,
        lease: &LeaseRef,
        holder: Option<&str>,
        events: &mut Vec<Event>,
    ) -> String {
        if let LeaseRef::New { lease_id, ttl_ms } = lease {
            let holder = holder.unwrap_or_default().to_owned();
            self.insert_new_lease(*lease_id, *ttl_ms, holder, true, events);
        }
        match holder {
            Some(holder) => holder.to_owned(),
            None => self
                .leases
                .get(&lease.id())
                .map(|l| l.holder.clone())
                .unwrap_or_default(),
        }
    }

    pub(crate) fn attach(&mut self, lease_id: LeaseId, attachment: Attachment) {
        if !self.leases.contains_key(&lease_id) {
            return;
        }
        self.count_attachment(lease_id, &attachment, true);
        if let Some(lease) = self.leases.get_mut(&lease_id) {
            lease.attach(attachment);
        }
    }

    /// A queued request of `lease_id` became a holding: `old` (its wait) is
    /// replaced by `new`.
    pub(crate) fn replace_attachment(
        &mut self,
        lease_id: LeaseId,
        old: &Attachment,
        new: Attachment,
    ) {
        let Some(lease) = self.leases.get_mut(&lease_id) else {
            return;
        };
        let replaced = lease.replace(old, new.clone());
        if replaced {
            self.count_attachment(lease_id, old, false);
        }
        self.count_attachment(lease_id, &new, true);
    }

    pub(crate) fn lease_ttl(&self, lease_id: LeaseId) -> u64 {
        self.leases.get(&lease_id).map_or(0, |l| l.ttl_ms)
    }

    /// Detaches a holding; an ephemeral lease left with nothing is revoked.
    pub(crate) fn detach(
        &mut self,
        lease_id: LeaseId,
        attachment: &Attachment,
        events: &mut Vec<Event>,
    ) {
        let Some(lease) = self.leases.get_mut(&lease_id) else {
            return;
        };
        let detached = lease.detach(attachment);
        let now_unused = lease.ephemeral && lease.attachments.is_empty();
        if detached {
            self.count_attachment(lease_id, attachment, false);
        }
        if now_unused {
            self.end_lease(lease_id, EndReason::Revoked, events);
        }
    }

    pub(crate) fn record_wait_end(
        &mut self,
        idempotency: Option<(String, String)>,
        result: Result<Reply, CoreError>,
    ) {
        if let Some((principal, key)) = idempotency {
            self.idempotency
                .update(&principal, &key, result, self.revision);
        }
    }
}

pub(crate) fn check_ttl(limits: &Limits, ttl_ms: u64) -> Result<(), CoreError> {
    if ttl_ms < limits.min_ttl_ms || ttl_ms > limits.max_ttl_ms {
        return Err(CoreError::InvalidTtl {
            ttl_ms,
            min_ms: limits.min_ttl_ms,
            max_ms: limits.max_ttl_ms,
        });
    }
    Ok(())
}

pub(crate) fn check_holder(limits: &Limits, holder: Option<&str>) -> Result<(), CoreError> {
    let size = holder.map_or(0, str::len);
    if size > limits.max_holder_bytes as usize {
        return Err(CoreError::HolderTooLong {
            size,
            max: limits.max_holder_bytes as usize,
        });
    }
    Ok(())
}

pub(crate) fn check_value(limits: &Limits, value: &str) -> Result<(), CoreError> {
    if value.len() > limits.max_value_bytes as usize {
        return Err(CoreError::ValueTooLarge {
            size: value.len(),
            max: limits.max_value_bytes as usize,
        });
    }
    Ok(())
}
