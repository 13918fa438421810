//! Snapshot encoding: one format-version byte, then the state in postcard.

use crate::lease_ttls::LeaseTtlCounts;
use crate::machine::StateMachine;
use crate::snapshot_legacy::StateV3;

/// The snapshot format this build writes. Readers accept every version listed in
/// [`StateMachine::from_snapshot`].
pub const SNAPSHOT_FORMAT: u8 = 4;

/// Why a snapshot could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Zero bytes.
    #[error("snapshot is empty")]
    Empty,
    /// Written by a newer (or unknown) format.
    #[error("snapshot format {0} is not supported by this build (it reads formats 1 to 4)")]
    UnsupportedFormat(u8),
    /// The bytes do not decode.
    #[error("snapshot is corrupt: {0}")]
    Corrupt(#[from] postcard::Error),
}

impl StateMachine {
    /// Serializes the whole state.
    pub fn to_snapshot(&self) -> Vec<u8> {
        let bytes = vec![SNAPSHOT_FORMAT];
        // Serializing plain data structures into a Vec cannot fail.
        match postcard::to_extend(self, bytes) {
            Ok(bytes) => bytes,
            Err(error) => unreachable!("serializing the state failed: {error}"),
        }
    }

    /// Whether [`StateMachine::from_snapshot`] reads snapshots whose first byte
    /// (the format version) is `format`.
    pub fn reads_snapshot_format(format: u8) -> bool {
        (1..=SNAPSHOT_FORMAT).contains(&format)
    }

    /// Restores a state written by [`StateMachine::to_snapshot`] (of this or an older
    /// format version).
    pub fn from_snapshot(bytes: &[u8]) -> Result<StateMachine, SnapshotError> {
        let (&format, body) = bytes.split_first().ok_or(SnapshotError::Empty)?;
        let mut state: StateMachine = match format {
            // Formats 1 to 3 each add one trailing field to the one before:
            // format 1 lacks `cluster_id` (`None`), format 2 lacks `lease_owners`
            // (an empty map). postcard writes either as one zero byte. Format 4
            // changed the slots (several holders, modes, permits) and added
            // semaphores and multi-acquires: the older slots are converted.
            1..=3 => {
                let mut padded = body.to_vec();
                padded.resize(body.len() + usize::from(3 - format), 0);
                postcard::from_bytes::<StateV3>(&padded)?.upgrade()
            }
            4 => postcard::from_bytes(body)?,
            other => return Err(SnapshotError::UnsupportedFormat(other)),
        };
        // Derived counts are not in the snapshot.
        state.recount_usage();
        state.lease_ttls = LeaseTtlCounts::of(&state.leases);
        state.idempotency.recount();
        Ok(state)
    }
}
