//! Admission quotas: caps on what the cluster and each principal may hold.

use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::error::CoreError;
use crate::machine::StateMachine;

/// Caps a command is judged against, stamped into it by the node that admitted
/// it (from its flags and the principal's entry in the auth file), so every
/// replica judges it the same way.
///
/// A command that would exceed a cap is refused before it changes anything
/// ([`CoreError::QuotaExceeded`], naming the cap). A request that might queue
/// (an acquire or campaign with a wait) counts against both the holdings and
/// the waiters cap, since whether it queues is only known once it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// Most live leases in the whole cluster, owned or not.
    pub max_leases: u64,
    /// Most live leases one principal owns.
    pub max_leases_per_principal: u64,
    /// Most holdings (held locks, leaderships, registered names) on one
    /// principal's leases.
    pub max_holdings_per_principal: u64,
    /// Most queued requests (lock waits, candidacies) on one principal's leases.
    pub max_waiters_per_principal: u64,
    /// Most idempotency keys one principal has remembered at a time (every key is
    /// kept for ten minutes). Not applied with auth off, where every client
    /// shares one key space.
    pub max_idempotency_keys_per_principal: u64,
}

impl Quota {
    /// No caps at all.
    pub const UNLIMITED: Quota = Quota {
        max_leases: u64::MAX,
        max_leases_per_principal: u64::MAX,
        max_holdings_per_principal: u64::MAX,
        max_waiters_per_principal: u64::MAX,
        max_idempotency_keys_per_principal: u64::MAX,
    };
}

impl Default for Quota {
    /// Generous caps that only stop runaway clients: about 800 MB of state at the
    /// cluster-wide lease cap.
    fn default() -> Self {
        Quota {
            max_leases: 1_000_000,
            max_leases_per_principal: 100_000,
            max_holdings_per_principal: 1_000_000,
            max_waiters_per_principal: 100_000,
            max_idempotency_keys_per_principal: 1_000_000,
        }
    }
}

fn exceeded(what: String, limit: u64) -> CoreError {
    CoreError::QuotaReached { what, limit }
}

impl StateMachine {
    /// Refuses `command` (sent by `principal`, `None` with auth off) if running it
    /// could exceed `quota`. Changes nothing.
    pub(crate) fn check_quota(
        &self,
        principal: Option<&str>,
        quota: &Quota,
        command: &Command,
    ) -> Result<(), CoreError> {
        let usage = principal
            .map(|p| self.principal_usage(p))
            .unwrap_or_default();
        let (mut holds, mut may_wait) = command.adds_holdings();
        if self.already_there(command) {
            // A retry, or an update of one's own name: it adds nothing, and it
            // must get the answer it would get below the cap.
            (holds, may_wait) = (0, false);
        }
        if let Some((lease_id, _)) = command.created_lease() {
            if !self.leases.contains_key(&lease_id) {
                if self.leases.len() as u64 >= quota.max_leases {
                    return Err(exceeded(
                        format!("the cluster holds at most {} leases", quota.max_leases),
                        quota.max_leases,
                    ));
                }
                if principal.is_some() && usage.leases >= quota.max_leases_per_principal {
                    return Err(exceeded(
                        format!(
                            "a principal owns at most {} leases",
                            quota.max_leases_per_principal
                        ),
                        quota.max_leases_per_principal,
                    ));
                }
            }
        }
        if principal.is_some()
            && holds > 0
            && usage.holdings.saturating_add(holds) > quota.max_holdings_per_principal
        {
            return Err(exceeded(
                format!(
                    "a principal holds at most {} locks, leaderships and names",
                    quota.max_holdings_per_principal
                ),
                quota.max_holdings_per_principal,
            ));
        }
        // A queued multi-acquire takes a place in each of its lines.
        let places = holds.max(1);
        if principal.is_some()
            && may_wait
            && usage.waiters.saturating_add(places) > quota.max_waiters_per_principal
        {
            return Err(exceeded(
                format!(
                    "a principal has at most {} queued requests",
                    quota.max_waiters_per_principal
                ),
                quota.max_waiters_per_principal,
            ));
        }
        Ok(())
    }

    /// Whether `command` is by a lease that already holds or waits for what it
    /// asks (a retried acquire or campaign, a name's value updated by its owner).
    fn already_there(&self, command: &Command) -> bool {
        use crate::command::LeaseRef;
        let involves = |slot: &crate::slot::Slot, lease_id: &crate::ids::LeaseId| {
            slot.held_by(*lease_id).is_some() || slot.queued_by(*lease_id).is_some()
        };
        match command {
            Command::Acquire {
                name,
                lease: LeaseRef::Existing(lease_id),
                ..
            } => self
                .locks
                .get(name)
                .is_some_and(|slot| involves(slot, lease_id)),
            Command::Campaign {
                name,
                lease: LeaseRef::Existing(lease_id),
                ..
            } => self
                .elections
                .get(name)
                .is_some_and(|slot| involves(slot, lease_id)),
            Command::Register {
                name,
                lease: LeaseRef::Existing(lease_id),
                ..
            } => self
                .names
                .get(name)
                .is_some_and(|entry| entry.lease_id == *lease_id),
            Command::AcquireLocks {
                locks,
                lease: LeaseRef::Existing(lease_id),
                ..
            } => locks.iter().any(|lock| {
                self.locks
                    .get(&lock.name)
                    .is_some_and(|slot| involves(slot, lease_id))
            }),
            Command::AcquirePermits {
                name,
                lease: LeaseRef::Existing(lease_id),
                ..
            } => self
                .semaphores
                .get(name)
                .is_some_and(|slot| involves(slot, lease_id)),
            _ => false,
        }
    }

    /// Refuses to remember one more idempotency key of `principal` beyond `quota`.
    pub(crate) fn check_idempotency_quota(
        &self,
        principal: &str,
        quota: &Quota,
    ) -> Result<(), CoreError> {
        if self.idempotency.count_of(principal) as u64 >= quota.max_idempotency_keys_per_principal {
            return Err(exceeded(
                format!(
                    "a principal has at most {} idempotency keys remembered (each for ten minutes)",
                    quota.max_idempotency_keys_per_principal
                ),
                quota.max_idempotency_keys_per_principal,
            ));
        }
        Ok(())
    }
}
