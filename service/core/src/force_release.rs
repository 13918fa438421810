//! An admin's force-release: ends another holder's holding of a lock, an
//! election's leadership or a registered name, without its lease id.

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::ids::LeaseId;
use crate::lease::Attachment;
use crate::machine::StateMachine;
use crate::name::validate_name;
use crate::outcome::{EndReason, Event};
use crate::queueing::SlotKind;
use crate::reply::{ForceReleased, Reply};
use crate::slots::Slots;

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
    /// in line is granted. `expected_token`, when given, must be a current
    /// holder's, so that an admin never ends a successor's holding by mistake; a
    /// shared lock without one loses every holder (the answer names the first).
    pub(crate) fn force_release(
        &mut self,
        kind: HoldingKind,
        name: &str,
        expected_token: Option<u64>,
        events: &mut Vec<Event>,
    ) -> Result<Reply, CoreError> {
        validate_name(name)?;
        let holders = |slots: &Slots| -> Vec<(LeaseId, u64, String)> {
            slots.get(name).map_or_else(Vec::new, |slot| {
                slot.holders
                    .iter()
                    .map(|h| (h.lease_id, h.token, h.holder(&self.leases)))
                    .collect()
            })
        };
        let current = match kind {
            HoldingKind::Lock => holders(&self.locks),
            HoldingKind::Election => holders(&self.elections),
            HoldingKind::Name => self
                .names
                .get(name)
                .map(|entry| (entry.lease_id, entry.token, entry.holder.clone()))
                .into_iter()
                .collect(),
        };
        let Some(newest) = current.iter().map(|(_, token, _)| *token).max() else {
            return Err(CoreError::NotFound);
        };
        let ended: Vec<_> = match expected_token {
            Some(expected) => current
                .into_iter()
                .filter(|(_, token, _)| *token == expected)
                .collect(),
            None => current,
        };
        let Some((_, token, holder)) = ended.first().cloned() else {
            return Err(CoreError::TokenMismatch {
                current_token: newest,
            });
        };
        let reason = EndReason::ForceReleased;
        // Every ended holding goes before the next in line is granted.
        for (lease_id, _, _) in &ended {
            match kind {
                HoldingKind::Lock => {
                    self.take_lock_holding(name, *lease_id, reason, events);
                }
                HoldingKind::Election => self.take_leadership(name, reason, events),
                HoldingKind::Name => self.end_registration(name, reason, events),
            }
        }
        let (attachment, line) = match kind {
            HoldingKind::Lock => (Attachment::Lock(name.to_owned()), Some(SlotKind::Lock)),
            HoldingKind::Election => (
                Attachment::Leader(name.to_owned()),
                Some(SlotKind::Election),
            ),
            HoldingKind::Name => (Attachment::Name(name.to_owned()), None),
        };
        if let Some(line) = line {
            self.promote_next(line, name, events);
        }
        for (lease_id, _, _) in ended {
            self.detach(lease_id, &attachment, events);
        }
        Ok(Reply::ForceReleased(ForceReleased { token, holder }))
    }
}
