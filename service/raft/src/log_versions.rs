//! Which log version each peer runs, as its answers say
//! ([`baton_core::LOG_VERSION`]): what lets a leader of a newer build propose
//! only what every member can decode while a rolling upgrade is half done.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Header on every answer of the peer listener: the answering node's log
/// version (its `--log-version`).
pub const LOG_VERSION_HEADER: &str = "baton-log-version";

/// The log version each peer said in its latest answer to this node.
///
/// Only a leader calls its peers, so only a leader's view is filled; it is
/// kept across terms, and every answer overwrites it, so a peer restarted on
/// an older build is seen as such at its first heartbeat.
#[derive(Clone, Debug, Default)]
pub struct PeerLogVersions(Arc<Mutex<BTreeMap<u64, u32>>>);

/// The log version an answer whose [`LOG_VERSION_HEADER`] was `header` says.
/// An answer without it comes from a build before the header (version 0); so
/// does one whose value does not parse, as the safe reading.
pub fn version_in(header: Option<&[u8]>) -> u32 {
    header
        .and_then(|value| std::str::from_utf8(value).ok())
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// Refuses a log version newer than this build's: a node cannot promise to
/// read commands it does not know.
pub fn check_log_version(version: u32) -> Result<(), String> {
    if version > baton_core::LOG_VERSION {
        return Err(format!(
            "log version {version} is newer than this build's ({})",
            baton_core::LOG_VERSION
        ));
    }
    Ok(())
}

impl PeerLogVersions {
    /// Records that `peer` said it runs `version` ([`version_in`]).
    pub fn heard(&self, peer: u64, version: u32) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(peer, version);
    }

    /// The version `peer` said last, if it has answered.
    pub fn of(&self, peer: u64) -> Option<u32> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&peer)
            .copied()
    }

    /// The newest log version every one of `members` decodes: `own` for
    /// `own_id`, what each other member said last, and 0 for a member that has
    /// not answered (it may be an older build: assuming otherwise could leave
    /// it unable to take a single append).
    pub fn lowest(&self, own_id: u64, own: u32, members: impl IntoIterator<Item = u64>) -> u32 {
        let said = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        members
            .into_iter()
            .filter(|member| *member != own_id)
            .map(|member| said.get(&member).copied().unwrap_or(0))
            .fold(own, u32::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_that_has_not_answered_or_did_not_say_counts_as_the_oldest() {
        let versions = PeerLogVersions::default();
        assert_eq!(
            versions.lowest(1, 1, [1]),
            1,
            "alone, a node is its own version"
        );
        assert_eq!(
            versions.lowest(1, 1, [1, 2, 3]),
            0,
            "2 and 3 have not answered"
        );
        versions.heard(2, version_in(Some(b"1")));
        versions.heard(3, version_in(Some(b"1")));
        assert_eq!(versions.lowest(1, 1, [1, 2, 3]), 1);
        versions.heard(3, version_in(None));
        assert_eq!(
            versions.lowest(1, 1, [1, 2, 3]),
            0,
            "3 restarted on an older build"
        );
        versions.heard(3, version_in(Some(b"garbage")));
        assert_eq!(versions.of(3), Some(0));
        versions.heard(3, version_in(Some(b"7")));
        assert_eq!(
            versions.lowest(1, 1, [1, 2, 3]),
            1,
            "a newer peer does not raise the cluster above this node"
        );
        assert_eq!(
            versions.lowest(1, 0, [1, 2, 3]),
            0,
            "nor above what this node advertises"
        );
    }
}
