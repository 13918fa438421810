//! Counting semaphores: at most `limit` permits out at a time, each holder with
//! its own fencing token, waiting in FIFO order without overtaking (a request
//! for three permits at the head is not passed by a later request for one).
//! The limit is set by the first acquirer and stands while anyone holds or
//! waits; a request that states another limit is refused.

use crate::error::CoreError;
use crate::ids::LeaseId;
use crate::limits::Limits;
use crate::machine::{check_holder, StateMachine};
use crate::name::validate_name;
use crate::outcome::{EndReason, Event, EventKind};
use crate::queueing::{Claim, SlotKind};
use crate::reply::Reply;

/// Largest semaphore limit accepted.
pub const MAX_SEMAPHORE_LIMIT: u32 = 1_000_000;

impl StateMachine {
    /// Takes permits of a semaphore or queues for them ([`StateMachine::claim`])
    /// after checking what only semaphores have: the limit and the permits.
    pub(crate) fn acquire_permits(
        &mut self,
        limits: &Limits,
        claim: Claim<'_>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        debug_assert_eq!(claim.kind, SlotKind::Semaphore);
        validate_name(claim.name)?;
        check_holder(limits, claim.holder)?;
        if claim.limit == 0 || claim.limit > MAX_SEMAPHORE_LIMIT {
            return Err(CoreError::InvalidLimit {
                limit: claim.limit,
                max: MAX_SEMAPHORE_LIMIT,
            });
        }
        if claim.permits == 0 || claim.permits > claim.limit {
            return Err(CoreError::InvalidPermits {
                permits: claim.permits,
                limit: claim.limit,
            });
        }
        self.claim(limits, claim, events)
    }

    /// Gives back the permits of `(lease_id, token)`.
    pub(crate) fn release_permits(
        &mut self,
        name: &str,
        lease_id: LeaseId,
        token: u64,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        validate_name(name)?;
        if !self.leases.contains_key(&lease_id) {
            return Err(CoreError::LeaseNotFound);
        }
        if !self
            .semaphores
            .get(name)
            .is_some_and(|s| s.held_with(lease_id, token))
        {
            return Err(CoreError::PermitsLost);
        }
        self.end_permits(name, lease_id, EndReason::Released, events);
        let attachment = SlotKind::Semaphore.holding(name);
        self.detach(lease_id, &attachment, events);
        Ok(Reply::PermitsReleased)
    }

    /// Ends the holding of `lease_id` (the caller detaches it from its lease)
    /// and hands the freed permits on.
    pub(crate) fn end_permits(
        &mut self,
        name: &str,
        lease_id: LeaseId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) {
        if self.take_permits(name, lease_id, reason, events) {
            self.promote_next(SlotKind::Semaphore, name, events);
        }
    }

    /// Ends the holding of `lease_id` without handing the permits on (see
    /// [`StateMachine::take_lock_holding`]); returns whether the semaphore's
    /// slot is left, forgetting it when nothing is.
    pub(crate) fn take_permits(
        &mut self,
        name: &str,
        lease_id: LeaseId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) -> bool {
        let Some(mut slot) = self.semaphores.get_mut(name) else {
            return false;
        };
        let Some(holding) = slot.remove_holder(lease_id) else {
            return true;
        };
        let line_left = !slot.is_idle();
        drop(slot);
        if !line_left {
            self.semaphores.remove(name);
        }
        self.emit(
            events,
            EventKind::SemaphoreReleased {
                name: name.to_owned(),
                token: holding.token,
                permits: holding.permits,
                reason,
            },
        );
        line_left
    }
}
