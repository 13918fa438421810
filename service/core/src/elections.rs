//! Election rules: campaign or queue as candidate, proclaim, resign. An election is
//! a lock whose holder publishes a value; the leader's token is the revision at
//! which it was elected.

use crate::error::CoreError;
use crate::ids::LeaseId;
use crate::lease::Attachment;
use crate::limits::Limits;
use crate::machine::{check_holder, check_value, StateMachine};
use crate::name::validate_name;
use crate::outcome::{EndReason, Event, EventKind};
use crate::queueing::{Claim, SlotKind};
use crate::reply::{Proclaimed, Reply};

impl StateMachine {
    /// Campaigns, or queues as a candidate ([`StateMachine::claim`]), after
    /// checking what only elections have: the candidate's name and the value.
    pub(crate) fn campaign(
        &mut self,
        limits: &Limits,
        claim: Claim<'_>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        debug_assert_eq!(claim.kind, SlotKind::Election);
        validate_name(claim.name)?;
        check_holder(limits, claim.holder)?;
        check_value(limits, claim.value)?;
        self.claim(limits, claim, events)
    }

    pub(crate) fn proclaim(
        &mut self,
        limits: &Limits,
        name: &str,
        lease_id: LeaseId,
        token: u64,
        value: &str,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        validate_name(name)?;
        check_value(limits, value)?;
        if !self.leases.contains_key(&lease_id) {
            return Err(CoreError::LeaseNotFound);
        }
        if !self
            .elections
            .get(name)
            .is_some_and(|s| s.held_with(lease_id, token))
        {
            return Err(CoreError::NotLeader);
        }
        let revision = self.emit(
            events,
            EventKind::Proclaimed {
                name: name.to_owned(),
                token,
                value: value.to_owned(),
            },
        );
        if let Some(mut slot) = self.elections.get_mut(name) {
            if let Some(holding) = slot.holders.first_mut() {
                holding.value = value.to_owned();
                holding.modified_revision = revision;
            }
        }
        Ok(Reply::Proclaimed(Proclaimed {
            name: name.to_owned(),
            token,
            value: value.to_owned(),
        }))
    }

    pub(crate) fn resign(
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
            .elections
            .get(name)
            .is_some_and(|s| s.held_with(lease_id, token))
        {
            return Err(CoreError::NotLeader);
        }
        self.end_leadership(name, EndReason::Released, events);
        self.detach(lease_id, &Attachment::Leader(name.to_owned()), events);
        Ok(Reply::Resigned)
    }

    /// Ends the current leadership (the caller detaches it) and elects the next
    /// candidate in line.
    pub(crate) fn end_leadership(
        &mut self,
        name: &str,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) {
        self.take_leadership(name, reason, events);
        self.promote_next(SlotKind::Election, name, events);
    }

    /// Ends the current leadership without electing anyone yet (see
    /// [`StateMachine::take_lock_holding`]).
    pub(crate) fn take_leadership(
        &mut self,
        name: &str,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) {
        let Some(holding) = self
            .elections
            .get_mut(name)
            .and_then(|mut s| (!s.holders.is_empty()).then(|| s.holders.remove(0)))
        else {
            return;
        };
        self.emit(
            events,
            EventKind::LeaderEnded {
                name: name.to_owned(),
                token: holding.token,
                reason,
            },
        );
    }
}
