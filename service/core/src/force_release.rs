//! An admin's force-release: ends another holder's holding of a lock, an
//! election's leadership or a registered name, without its lease id.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::lease::Attachment;
use crate::machine::StateMachine;
use crate::name::validate_name;
use crate::outcome::{EndReason, Event};
use crate::reply::{ForceReleased, Reply};
use crate::slot::Slot;

/// What a force-release ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HoldingKind {
    /// A lock's holding.
    Lock,
    /// An election's leadership.
    Election,
    /// A name's registration.
    Name,
}

impl StateMachine {
    /// Ends the current holding of `name` as if its lease had expired for this
    /// holding alone: the lease lives on with its other holdings, a lock keeps
    /// its holder's lock delay (the holder may still be running), and the next
    /// in line is granted. `expected_token`, when given, must be the current
    /// holder's, so that an admin never ends a successor's holding by mistake.
    pub(crate) fn force_release(
        &mut self,
        kind: HoldingKind,
        name: &str,
        expected_token: Option<u64>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        validate_name(name)?;
        let slot = |slots: &BTreeMap<String, Box<Slot>>| {
            let holding = slots.get(name)?.holding.as_ref()?;
            Some((
                holding.lease_id,
                holding.token,
                holding.holder(&self.leases),
            ))
        };
        let current = match kind {
            HoldingKind::Lock => slot(&self.locks),
            HoldingKind::Election => slot(&self.elections),
            HoldingKind::Name => self
                .names
                .get(name)
                .map(|entry| (entry.lease_id, entry.token, entry.holder.clone())),
        };
        let Some((lease_id, token, holder)) = current else {
            return Err(CoreError::NotFound);
        };
        if expected_token.is_some_and(|expected| expected != token) {
            return Err(CoreError::TokenMismatch {
                current_token: token,
            });
        }
        let reason = EndReason::ForceReleased;
        let attachment = match kind {
            HoldingKind::Lock => {
                self.end_lock_holding(name, reason, events);
                Attachment::Lock(name.to_owned())
            }
            HoldingKind::Election => {
                self.end_leadership(name, reason, events);
                Attachment::Leader(name.to_owned())
            }
            HoldingKind::Name => {
                self.end_registration(name, reason, events);
                Attachment::Name(name.to_owned())
            }
        };
        self.detach(lease_id, &attachment, events);
        Ok(Reply::ForceReleased(ForceReleased { token, holder }))
    }
}
