//! One state change as watch streams publish it: the public view of a core
//! [`Event`] (no lease ids, no waiter ids), encoded once as a Server-Sent
//! Events frame that every stream shares.

use baton_core::{EndReason, Event, EventKind};
use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::{json, Value};

/// The resource family an event belongs to (the `kinds` filter of a watch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// Locks and their queues.
    Lock,
    /// Elections and their candidate queues.
    Election,
    /// Registered names.
    Name,
    /// Leases (these have no name; a `prefix` filter excludes them).
    Lease,
    /// Semaphores and their queues.
    Semaphore,
}

impl WatchKind {
    /// Every kind, in the order the API lists them.
    pub const ALL: [WatchKind; 5] = [
        WatchKind::Lock,
        WatchKind::Election,
        WatchKind::Name,
        WatchKind::Lease,
        WatchKind::Semaphore,
    ];

    /// The name used in `event:` lines and in the `kinds` query parameter.
    pub fn as_str(self) -> &'static str {
        match self {
            WatchKind::Lock => "lock",
            WatchKind::Election => "election",
            WatchKind::Name => "name",
            WatchKind::Lease => "lease",
            WatchKind::Semaphore => "semaphore",
        }
    }

    /// Parses a `kinds` entry.
    pub fn parse(text: &str) -> Option<WatchKind> {
        WatchKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }

    /// This kind's bit in a [`crate::WatchFilter`] mask.
    pub fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A published state change.
///
/// The SSE frame is encoded on first use and then shared by every stream: a
/// replica with no watcher never pays for JSON it would not send (encoding was
/// ~4% of a lock cycle's server CPU when done at apply).
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// The revision the change created (the SSE `id`).
    pub revision: u64,
    /// Resource family.
    pub kind: WatchKind,
    /// What happened (`acquired`, `released`, `expired`, ...): the SSE event is
    /// `<kind>.<what>`.
    pub what: &'static str,
    /// Whether this changes an election's leader or its value (what
    /// `:observe` reports).
    pub leader_change: bool,
    /// The core change, kept to encode the frame from.
    source: EventKind,
    /// The encoded SSE frame (`id:`, `event:`, `data:` lines and the blank line).
    frame: OnceLock<Bytes>,
}

impl PartialEq for WatchEvent {
    fn eq(&self, other: &Self) -> bool {
        // The frame is derived from the rest: whether it was encoded yet is no
        // part of the event.
        self.revision == other.revision && self.source == other.source
    }
}

fn ended(reason: EndReason) -> &'static str {
    match reason {
        EndReason::Released => "released",
        EndReason::Revoked => "revoked",
        EndReason::Expired => "expired",
        EndReason::ForceReleased => "force_released",
    }
}

/// Values are stored as compact JSON text; they were valid JSON when stored.
fn value(text: &str) -> Value {
    stored_value(text)
}

/// A value as stored (JSON text, checked on the way in). Text that no longer
/// parses is a damaged state: it is logged and shown as the raw text in a JSON
/// string, never silently as `null`.
pub fn stored_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|error| {
        tracing::error!(%error, "a stored value is not JSON");
        Value::String(text.to_owned())
    })
}

/// Encodes one SSE frame. `data` is compact JSON, so it holds no newline.
pub fn sse_frame(id: u64, event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("id: {id}\nevent: {event}\ndata: {data}\n\n"))
}

/// Resource family, what happened, and whether an election's leader changed.
fn classify(kind: &EventKind) -> (WatchKind, &'static str, bool) {
    match kind {
        EventKind::LeaseCreated { .. } => (WatchKind::Lease, "created", false),
        EventKind::LeaseEnded { reason, .. } => (WatchKind::Lease, ended(*reason), false),
        EventKind::LockAcquired { .. } => (WatchKind::Lock, "acquired", false),
        EventKind::LockQueued { .. } => (WatchKind::Lock, "queued", false),
        EventKind::LockReleased { reason, .. } => (WatchKind::Lock, ended(*reason), false),
        EventKind::LockWaitEnded { .. } => (WatchKind::Lock, "wait_ended", false),
        EventKind::Elected { .. } => (WatchKind::Election, "elected", true),
        EventKind::CandidateQueued { .. } => (WatchKind::Election, "candidate_queued", false),
        EventKind::Proclaimed { .. } => (WatchKind::Election, "proclaimed", true),
        EventKind::LeaderEnded { reason, .. } => (
            WatchKind::Election,
            match reason {
                EndReason::Released => "resigned",
                other => ended(*other),
            },
            true,
        ),
        EventKind::CampaignEnded { .. } => (WatchKind::Election, "candidate_left", false),
        EventKind::NameRegistered { created, .. } => (
            WatchKind::Name,
            if *created { "registered" } else { "updated" },
            false,
        ),
        EventKind::NameUnregistered { reason, .. } => (
            WatchKind::Name,
            match reason {
                EndReason::Released => "unregistered",
                other => ended(*other),
            },
            false,
        ),
        EventKind::SemaphoreAcquired { .. } => (WatchKind::Semaphore, "acquired", false),
        EventKind::SemaphoreQueued { .. } => (WatchKind::Semaphore, "queued", false),
        EventKind::SemaphoreReleased { reason, .. } => {
            (WatchKind::Semaphore, ended(*reason), false)
        }
        EventKind::SemaphoreWaitEnded { .. } => (WatchKind::Semaphore, "wait_ended", false),
    }
}

/// The lock, election or name an event concerns; `None` for lease events.
fn subject(kind: &EventKind) -> Option<&str> {
    match kind {
        EventKind::LeaseCreated { .. } | EventKind::LeaseEnded { .. } => None,
        EventKind::LockAcquired { grant, .. }
        | EventKind::Elected { grant, .. }
        | EventKind::NameRegistered { grant, .. }
        | EventKind::SemaphoreAcquired { grant, .. } => Some(&grant.name),
        EventKind::SemaphoreQueued { name, .. }
        | EventKind::SemaphoreReleased { name, .. }
        | EventKind::SemaphoreWaitEnded { name, .. }
        | EventKind::LockQueued { name, .. }
        | EventKind::LockReleased { name, .. }
        | EventKind::LockWaitEnded { name, .. }
        | EventKind::CandidateQueued { name, .. }
        | EventKind::Proclaimed { name, .. }
        | EventKind::LeaderEnded { name, .. }
        | EventKind::CampaignEnded { name, .. }
        | EventKind::NameUnregistered { name, .. } => Some(name),
    }
}

/// The public `data:` of an event. Lease ids and waiter ids are left out on
/// purpose: a lease id is a capability, and waiter ids are internal.
fn public_data(kind: &EventKind) -> Value {
    match kind {
        EventKind::LeaseCreated { ttl_ms, holder, .. } => {
            json!({"holder": holder, "ttl_ms": ttl_ms})
        }
        EventKind::LeaseEnded { holder, reason, .. } => {
            json!({"holder": holder, "reason": ended(*reason)})
        }
        EventKind::LockAcquired { grant, mode, .. } => {
            json!({"name": grant.name, "token": grant.token, "holder": grant.holder,
                   "ttl_ms": grant.ttl_ms, "mode": mode})
        }
        EventKind::SemaphoreAcquired {
            grant,
            permits,
            limit,
            ..
        } => json!({"name": grant.name, "token": grant.token, "holder": grant.holder,
                    "ttl_ms": grant.ttl_ms, "permits": permits, "limit": limit}),
        EventKind::SemaphoreReleased {
            name,
            token,
            permits,
            reason,
        } => json!({"name": name, "token": token, "permits": permits, "reason": ended(*reason)}),
        EventKind::LockQueued { name, .. }
        | EventKind::CandidateQueued { name, .. }
        | EventKind::SemaphoreQueued { name, .. } => {
            json!({"name": name})
        }
        EventKind::LockReleased {
            name,
            token,
            reason,
        }
        | EventKind::LeaderEnded {
            name,
            token,
            reason,
        }
        | EventKind::NameUnregistered {
            name,
            token,
            reason,
        } => json!({"name": name, "token": token, "reason": ended(*reason)}),
        EventKind::LockWaitEnded { name, reason, .. }
        | EventKind::CampaignEnded { name, reason, .. }
        | EventKind::SemaphoreWaitEnded { name, reason, .. } => {
            json!({"name": name, "reason": ended(*reason)})
        }
        EventKind::Elected {
            grant, value: v, ..
        } => json!({"name": grant.name, "candidate": grant.holder, "token": grant.token,
                    "value": value(v)}),
        EventKind::Proclaimed {
            name,
            token,
            value: v,
        } => json!({"name": name, "token": token, "value": value(v)}),
        EventKind::NameRegistered {
            grant, value: v, ..
        } => json!({"name": grant.name, "holder": grant.holder, "token": grant.token,
                    "value": value(v)}),
    }
}

impl WatchEvent {
    /// The public view of a core event (see [`public_data`] for what is left out).
    pub fn from_core(event: &Event) -> WatchEvent {
        let (kind, what, leader_change) = classify(&event.kind);
        WatchEvent {
            revision: event.revision,
            kind,
            what,
            leader_change,
            source: event.kind.clone(),
            frame: OnceLock::new(),
        }
    }

    /// The lock, election or name concerned; `None` for lease events.
    pub fn name(&self) -> Option<&str> {
        subject(&self.source)
    }

    /// The SSE frame, encoded on the first call and shared afterwards.
    pub fn frame(&self) -> Bytes {
        self.frame
            .get_or_init(|| {
                let mut data = public_data(&self.source);
                if let Value::Object(fields) = &mut data {
                    fields.insert("revision".into(), json!(self.revision));
                }
                sse_frame(self.revision, &self.event_name(), &data)
            })
            .clone()
    }

    /// The SSE event name, `<kind>.<what>`.
    pub fn event_name(&self) -> String {
        format!("{}.{}", self.kind.as_str(), self.what)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_damaged_stored_value_is_shown_as_its_text_not_as_null() {
        assert_eq!(stored_value("{\"a\":1}"), serde_json::json!({"a": 1}));
        assert_eq!(stored_value("{\"a\":"), Value::String("{\"a\":".into()));
    }

    use super::*;
    use baton_core::{Grant, LeaseId, WaiterId};

    fn text(event: &WatchEvent) -> String {
        String::from_utf8(event.frame().to_vec()).expect("frames are UTF-8")
    }

    #[test]
    fn lease_ids_and_waiter_ids_never_appear() {
        let lease_id = LeaseId(0xdead_beef_dead_beef_dead_beef_dead_beef);
        let shown = lease_id.to_string();
        let grant = Grant {
            name: "db/migrate".into(),
            token: 7,
            lease_id,
            ttl_ms: 5000,
            holder: "pod-a".into(),
        };
        let kinds = [
            EventKind::LeaseCreated {
                lease_id,
                ttl_ms: 5000,
                holder: "pod-a".into(),
            },
            EventKind::LeaseEnded {
                lease_id,
                holder: "pod-a".into(),
                reason: EndReason::Expired,
            },
            EventKind::LockAcquired {
                grant: grant.clone(),
                waiter: Some(WaiterId(4242)),
                mode: baton_core::LockMode::Shared,
            },
            EventKind::SemaphoreAcquired {
                grant: grant.clone(),
                permits: 2,
                limit: 8,
                waiter: Some(WaiterId(4243)),
            },
            EventKind::Elected {
                grant: grant.clone(),
                value: "{\"addr\":\"10.0.0.1\"}".into(),
                waiter: None,
            },
            EventKind::NameRegistered {
                grant,
                value: "1".into(),
                created: true,
            },
        ];
        for kind in kinds {
            let event = WatchEvent::from_core(&Event { revision: 7, kind });
            let text = text(&event);
            assert!(!text.contains(&shown), "{text}");
            assert!(!text.contains("lease_id"), "{text}");
            assert!(!text.contains("4242") && !text.contains("4243"), "{text}");
            assert!(text.starts_with("id: 7\nevent: "), "{text}");
            assert!(text.ends_with("\n\n"), "{text}");
            assert_eq!(text.matches('\n').count(), 4, "{text}");
        }
    }

    #[test]
    fn names_follow_kind_and_reason() {
        let event = WatchEvent::from_core(&Event {
            revision: 3,
            kind: EventKind::LeaderEnded {
                name: "e".into(),
                token: 2,
                reason: EndReason::Released,
            },
        });
        assert_eq!(event.event_name(), "election.resigned");
        assert!(event.leader_change);
        let event = WatchEvent::from_core(&Event {
            revision: 4,
            kind: EventKind::LockReleased {
                name: "l".into(),
                token: 2,
                reason: EndReason::Expired,
            },
        });
        assert_eq!(event.event_name(), "lock.expired");
        assert!(!text(&event).contains("\"value\""));
    }
}
