//! Election rules: campaign or queue as candidate, proclaim, resign. An election is
//! a lock whose holder publishes a value; the leader's token is the revision at
//! which it was elected.

use crate::command::LeaseRef;
use crate::error::CoreError;
use crate::ids::{LeaseId, WaiterId};
use crate::lease::{Attachment, Leases};
use crate::limits::Limits;
use crate::machine::{check_holder, check_value, StateMachine};
use crate::name::validate_name;
use crate::outcome::{EndReason, Event, EventKind, Grant, Reply};
use crate::slot::{Holding, Slot, Waiting};

impl StateMachine {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn campaign(
        &mut self,
        limits: &Limits,
        name: &str,
        lease: &LeaseRef,
        candidate: &str,
        value: &str,
        waiter: Option<WaiterId>,
        idempotency: Option<(String, String)>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        validate_name(name)?;
        check_holder(limits, Some(candidate))?;
        check_value(limits, value)?;
        let lease_id = lease.id();
        if let LeaseRef::Existing(id) = lease {
            if !self.leases.contains_key(id) {
                return Err(CoreError::LeaseNotFound);
            }
        }
        if let Some(slot) = self.elections.get(name) {
            if let Some(held) = slot.held_by(lease_id) {
                return Ok(Reply::Elected {
                    grant: Grant {
                        name: name.to_owned(),
                        token: held.token,
                        lease_id,
                        ttl_ms: self.lease_ttl(lease_id),
                        holder: held.holder(&self.leases),
                    },
                    value: held.value.clone(),
                });
            }
            if let (Some(_), Some(queued)) = (waiter, slot.queued_by(lease_id)) {
                return Ok(Reply::CampaignQueued {
                    waiter: queued.waiter,
                    lease_id,
                    leader: leader_name(slot, &self.leases),
                });
            }
        }
        if let Some(slot) = self
            .elections
            .get(name)
            .filter(|slot| slot.holding.is_some() || !slot.queue.is_empty())
        {
            let Some(waiter) = waiter else {
                return Err(not_elected(slot, &self.leases));
            };
            if slot.queue.len() >= limits.max_waiters_per_lock as usize {
                return Err(CoreError::QuotaExceeded {
                    what: format!(
                        "an election has at most {} candidates waiting",
                        limits.max_waiters_per_lock
                    ),
                });
            }
            self.check_lease_for_holding(limits, lease)?;
            self.materialize_lease(lease, Some(candidate), events);
            let slot = self.elections.entry(name.to_owned()).or_default();
            slot.queue.push_back(Waiting {
                waiter,
                lease_id,
                holder: candidate.to_owned(),
                lock_delay_ms: 0,
                value: value.to_owned(),
                idempotency,
            });
            let leader = leader_name(slot, &self.leases);
            self.attach(lease_id, Attachment::Candidacy(name.to_owned(), waiter));
            self.emit(
                events,
                EventKind::CandidateQueued {
                    name: name.to_owned(),
                    waiter,
                },
            );
            return Ok(Reply::CampaignQueued {
                waiter,
                lease_id,
                leader,
            });
        }
        self.check_lease_for_holding(limits, lease)?;
        self.materialize_lease(lease, Some(candidate), events);
        let (grant, value) = self.elect(name, lease_id, candidate, value, None, events);
        self.attach(lease_id, Attachment::Leader(name.to_owned()));
        Ok(Reply::Elected { grant, value })
    }

    fn elect(
        &mut self,
        name: &str,
        lease_id: LeaseId,
        candidate: &str,
        value: &str,
        waiter: Option<WaiterId>,
        events: &mut Vec<Event>,
    ) -> (Grant, String) {
        let token = self.next_revision();
        let grant = Grant {
            name: name.to_owned(),
            token,
            lease_id,
            ttl_ms: self.lease_ttl(lease_id),
            holder: candidate.to_owned(),
        };
        let holder = Holding::holder_to_store(&self.leases, lease_id, candidate);
        let slot = self.elections.entry(name.to_owned()).or_default();
        slot.holding = Some(Holding {
            lease_id,
            token,
            holder,
            lock_delay_ms: 0,
            value: value.to_owned(),
            modified_revision: token,
        });
        self.emit(
            events,
            EventKind::Elected {
                grant: grant.clone(),
                value: value.to_owned(),
                waiter,
            },
        );
        (grant, value.to_owned())
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
        if let Some(holding) = self
            .elections
            .get_mut(name)
            .and_then(|s| s.holding.as_mut())
        {
            holding.value = value.to_owned();
            holding.modified_revision = revision;
        }
        Ok(Reply::Proclaimed {
            name: name.to_owned(),
            token,
            value: value.to_owned(),
        })
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
        let Some(holding) = self.elections.get_mut(name).and_then(|s| s.holding.take()) else {
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
        let next = self
            .elections
            .get_mut(name)
            .and_then(|s| s.queue.pop_front());
        if let Some(next) = next {
            let (grant, value) = self.elect(
                name,
                next.lease_id,
                &next.holder,
                &next.value,
                Some(next.waiter),
                events,
            );
            self.replace_attachment(
                next.lease_id,
                &Attachment::Candidacy(name.to_owned(), next.waiter),
                Attachment::Leader(name.to_owned()),
            );
            self.record_wait_end(next.idempotency, Ok(Reply::Elected { grant, value }));
        }
        if self.elections.get(name).is_some_and(|slot| slot.is_idle()) {
            self.elections.remove(name);
        }
    }

    pub(crate) fn cancel_campaign(
        &mut self,
        name: &str,
        waiter: WaiterId,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        let lease_id = self
            .elections
            .get(name)
            .and_then(|slot| slot.queue.iter().find(|w| w.waiter == waiter))
            .map(|w| w.lease_id)
            .ok_or(CoreError::WaiterNotFound)?;
        self.drop_candidate(name, waiter, EndReason::Released, events);
        self.detach(
            lease_id,
            &Attachment::Candidacy(name.to_owned(), waiter),
            events,
        );
        Ok(Reply::WaitCancelled)
    }

    pub(crate) fn drop_candidate(
        &mut self,
        name: &str,
        waiter: WaiterId,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) {
        let Some(slot) = self.elections.get_mut(name) else {
            return;
        };
        let Some(removed) = slot.remove_waiter(waiter) else {
            return;
        };
        let refusal = not_elected(slot, &self.leases);
        if slot.is_idle() {
            self.elections.remove(name);
        }
        self.emit(
            events,
            EventKind::CampaignEnded {
                name: name.to_owned(),
                waiter,
                reason,
            },
        );
        let final_answer = match reason {
            EndReason::Released => Err(refusal),
            // Only holdings are force-released, never a wait: grouped for completeness.
            EndReason::Revoked | EndReason::Expired | EndReason::ForceReleased => {
                Err(CoreError::LeaseNotFound)
            }
        };
        self.record_wait_end(removed.idempotency, final_answer);
    }
}

fn leader_name(slot: &Slot, leases: &Leases) -> Option<String> {
    slot.holding.as_ref().map(|h| h.holder(leases))
}

fn not_elected(slot: &Slot, leases: &Leases) -> CoreError {
    CoreError::NotElected {
        leader: leader_name(slot, leases),
        token: slot.holding.as_ref().map(|h| h.token),
    }
}
