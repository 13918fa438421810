//! Lease rules: create, revoke, expire; ending a lease releases all it holds.

use crate::error::CoreError;
use crate::ids::LeaseId;
use crate::lease::{Attachment, Lease};
use crate::limits::Limits;
use crate::machine::{check_holder, check_ttl, ApplyContext, StateMachine};
use crate::outcome::{EndReason, Event, EventKind, Released};
use crate::queueing::SlotKind;
use crate::reply::{LeaseCreated, Reply};

impl StateMachine {
    /// Adds a lease with no attachments, counted in the TTL buckets and announced:
    /// the one way a lease comes into the state, so the counts cannot miss one.
    pub(crate) fn insert_new_lease(
        &mut self,
        lease_id: LeaseId,
        ttl_ms: u64,
        holder: String,
        ephemeral: bool,
        events: &mut Vec<Event>,
    ) {
        self.lease_ttls.add(ttl_ms);
        self.leases.insert(
            lease_id,
            Lease {
                ttl_ms,
                holder: holder.clone(),
                ephemeral,
                attachments: Vec::new(),
            },
        );
        self.emit(
            events,
            EventKind::LeaseCreated {
                lease_id,
                ttl_ms,
                holder,
            },
        );
    }

    pub(crate) fn create_lease(
        &mut self,
        limits: &Limits,
        lease_id: LeaseId,
        ttl_ms: u64,
        holder: &str,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        check_ttl(limits, ttl_ms)?;
        check_holder(limits, Some(holder))?;
        if self.leases.contains_key(&lease_id) {
            return Err(CoreError::LeaseExists);
        }
        self.insert_new_lease(lease_id, ttl_ms, holder.to_owned(), false, events);
        Ok(Reply::LeaseCreated(LeaseCreated {
            lease_id,
            ttl_ms,
            holder: holder.to_owned(),
        }))
    }

    pub(crate) fn end_lease_command(
        &mut self,
        lease_id: LeaseId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        if !self.leases.contains_key(&lease_id) {
            return Err(CoreError::LeaseNotFound);
        }
        let released = self.end_lease(lease_id, reason, events);
        Ok(Reply::LeaseClosed(released))
    }

    /// Ends each of `lease_ids` that is still there, in order.
    pub(crate) fn expire_leases(
        &mut self,
        lease_ids: &[LeaseId],
        events: &mut Vec<Event>,
    ) -> Reply {
        let mut ended = 0;
        for &lease_id in lease_ids {
            if self.leases.contains_key(&lease_id) {
                self.end_lease(lease_id, EndReason::Expired, events);
                ended += 1;
            }
        }
        Reply::LeasesExpired { ended }
    }

    /// An expiry decided by the leader of `term` applies only in an entry of
    /// that term: a new term restarts every lease at a full TTL.
    pub(crate) fn check_expiry_term(term: u64, ctx: &ApplyContext) -> Result<(), CoreError> {
        if term == ctx.term {
            Ok(())
        } else {
            Err(CoreError::ExpiryOutdated {
                decided_in: term,
                written_in: ctx.term,
            })
        }
    }

    /// Removes a lease and, in the same step, everything attached to it. Its
    /// queued requests leave every line and its holdings end before anything is
    /// handed on, so no hand-off picks a request of the lease that is ending or
    /// sees some of its holdings still there.
    pub(crate) fn end_lease(
        &mut self,
        lease_id: LeaseId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) -> Released {
        let Some(lease) = self.leases.remove(&lease_id) else {
            return Released::default();
        };
        self.lease_ttls.remove(lease.ttl_ms);
        self.forget_owner(lease_id, &lease);
        self.emit(
            events,
            EventKind::LeaseEnded {
                lease_id,
                holder: lease.holder.clone(),
                reason,
            },
        );
        let mut released = Released::default();
        let (waits, holdings): (Vec<_>, Vec<_>) =
            lease.attachments.into_iter().partition(Attachment::is_wait);
        let mut lines_left = Vec::new();
        for attachment in waits {
            let (kind, name, waiter) = match attachment {
                Attachment::LockWait(name, waiter) => (SlotKind::Lock, name, waiter),
                Attachment::Candidacy(name, waiter) => (SlotKind::Election, name, waiter),
                Attachment::PermitWait(name, waiter) => (SlotKind::Semaphore, name, waiter),
                _ => continue,
            };
            lines_left.extend(self.drop_waiter(kind, &name, waiter, reason, events));
        }
        // Every holding ends before anything is handed on: a grant must see the
        // lease wholly gone (and every lock delay it leaves already started).
        for attachment in holdings {
            match attachment {
                Attachment::Lock(name) => {
                    if self.take_lock_holding(&name, lease_id, reason, events) {
                        lines_left.push((SlotKind::Lock, name.clone()));
                    }
                    released.locks.push(name);
                }
                Attachment::Leader(name) => {
                    self.take_leadership(&name, reason, events);
                    lines_left.push((SlotKind::Election, name.clone()));
                    released.elections.push(name);
                }
                Attachment::Name(name) => {
                    self.end_registration(&name, reason, events);
                    released.names.push(name);
                }
                Attachment::Permits(name) => {
                    if self.take_permits(&name, lease_id, reason, events) {
                        lines_left.push((SlotKind::Semaphore, name.clone()));
                    }
                    released.semaphores.push(name);
                }
                Attachment::LockWait(..)
                | Attachment::Candidacy(..)
                | Attachment::PermitWait(..) => {}
            }
        }
        for (kind, name) in lines_left {
            self.promote_next(kind, &name, events);
        }
        released.locks.sort();
        released.names.sort();
        released.elections.sort();
        released.semaphores.sort();
        released
    }
}
