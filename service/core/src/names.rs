//! Name registry rules: one owner per name across the whole cluster.

use crate::command::LeaseRef;
use crate::error::CoreError;
use crate::ids::LeaseId;
use crate::lease::Attachment;
use crate::limits::Limits;
use crate::machine::{check_holder, check_value, NameEntry, StateMachine};
use crate::name::validate_name;
use crate::outcome::{EndReason, Event, EventKind, Grant};
use crate::reply::{NameRegistered, Reply};

impl StateMachine {
    pub(crate) fn register(
        &mut self,
        limits: &Limits,
        name: &str,
        lease: &LeaseRef,
        holder: Option<&str>,
        value: &str,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        validate_name(name)?;
        check_holder(limits, holder)?;
        check_value(limits, value)?;
        let lease_id = lease.id();
        if let LeaseRef::Existing(id) = lease {
            if !self.leases.contains_key(id) {
                return Err(CoreError::LeaseNotFound);
            }
        }
        if let Some(entry) = self.names.get(name) {
            if entry.lease_id != lease_id {
                return Err(CoreError::NameTaken {
                    holder: entry.holder.clone(),
                    token: entry.token,
                });
            }
            let token = entry.token;
            let holder = holder.map_or_else(|| entry.holder.clone(), str::to_owned);
            let grant = Grant {
                name: name.to_owned(),
                token,
                lease_id,
                ttl_ms: self.lease_ttl(lease_id),
                holder: holder.clone(),
            };
            let revision = self.emit(
                events,
                EventKind::NameRegistered {
                    grant: grant.clone(),
                    value: value.to_owned(),
                    created: false,
                },
            );
            if let Some(entry) = self.names.get_mut(name) {
                entry.value = value.to_owned();
                entry.holder = holder;
                entry.modified_revision = revision;
            }
            return Ok(Reply::NameRegistered(NameRegistered {
                grant,
                value: value.to_owned(),
                created: false,
            }));
        }
        self.check_lease_for_holding(limits, lease, 1)?;
        let holder = self.materialize_lease(lease, holder, events);
        let token = self.next_revision();
        let grant = Grant {
            name: name.to_owned(),
            token,
            lease_id,
            ttl_ms: self.lease_ttl(lease_id),
            holder: holder.clone(),
        };
        self.names.insert(
            name.to_owned(),
            NameEntry {
                lease_id,
                holder,
                value: value.to_owned(),
                token,
                modified_revision: token,
            },
        );
        self.emit(
            events,
            EventKind::NameRegistered {
                grant: grant.clone(),
                value: value.to_owned(),
                created: true,
            },
        );
        self.attach(lease_id, Attachment::Name(name.to_owned()));
        Ok(Reply::NameRegistered(NameRegistered {
            grant,
            value: value.to_owned(),
            created: true,
        }))
    }

    pub(crate) fn unregister(
        &mut self,
        name: &str,
        lease_id: LeaseId,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        validate_name(name)?;
        let entry = self.names.get(name).ok_or(CoreError::NotFound)?;
        if entry.lease_id != lease_id {
            return Err(CoreError::NotOwner);
        }
        self.end_registration(name, EndReason::Released, events);
        self.detach(lease_id, &Attachment::Name(name.to_owned()), events);
        Ok(Reply::NameUnregistered)
    }

    /// Removes a registration (the caller detaches it from its lease).
    pub(crate) fn end_registration(
        &mut self,
        name: &str,
        reason: EndReason,
        events: &mut Vec<Event>,
    ) {
        if let Some(entry) = self.names.remove(name) {
            self.emit(
                events,
                EventKind::NameUnregistered {
                    name: name.to_owned(),
                    token: entry.token,
                    reason,
                },
            );
        }
    }
}
