//! Identifiers that the proposer chooses and every replica stores verbatim.

use std::fmt;
use std::str::FromStr;

use data_encoding::{Encoding, BASE32_NOPAD};
use serde::{Deserialize, Serialize};

/// A lease identifier: 128 random bits chosen by the proposer from a CSPRNG.
///
/// It is a capability (whoever knows it can keep alive, release or revoke what hangs
/// on it), so it is rendered only to the caller that created the lease: as 26
/// lowercase base32 characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeaseId(pub u128);

/// The error returned when a string is not a well-formed lease id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a lease id is 26 base32 characters")]
pub struct MalformedLeaseId;

fn lower_base32() -> Encoding {
    let mut spec = BASE32_NOPAD.specification();
    spec.symbols = "abcdefghijklmnopqrstuvwxyz234567".to_owned();
    spec.encoding().unwrap_or_else(|_| BASE32_NOPAD.clone())
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&lower_base32().encode(&self.0.to_be_bytes()))
    }
}

impl fmt::Debug for LeaseId {
    // Lease ids are secrets: debug output (logs) shows only a short prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = self.to_string();
        write!(f, "LeaseId({}…)", &full[..4])
    }
}

impl FromStr for LeaseId {
    type Err = MalformedLeaseId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.len() != 26 {
            return Err(MalformedLeaseId);
        }
        let bytes = lower_base32()
            .decode(text.to_ascii_lowercase().as_bytes())
            .map_err(|_| MalformedLeaseId)?;
        let array: [u8; 16] = bytes.try_into().map_err(|_| MalformedLeaseId)?;
        Ok(LeaseId(u128::from_be_bytes(array)))
    }
}

/// Identifies one queued request (a lock waiter or an election candidate).
///
/// Chosen by the proposer before the command is proposed, so the HTTP layer can
/// start listening for its grant before the command is even applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WaiterId(pub u64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_id_round_trips_through_text() {
        for raw in [
            0u128,
            1,
            u128::MAX,
            0x0123_4567_89ab_cdef_0011_2233_4455_6677,
        ] {
            let id = LeaseId(raw);
            let text = id.to_string();
            assert_eq!(text.len(), 26);
            assert_eq!(text.parse::<LeaseId>(), Ok(id));
            assert_eq!(text.to_uppercase().parse::<LeaseId>(), Ok(id));
        }
    }

    #[test]
    fn malformed_lease_ids_are_refused() {
        for text in [
            "",
            "abc",
            "0000000000000000000000000!",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaa",
        ] {
            assert_eq!(text.parse::<LeaseId>(), Err(MalformedLeaseId), "{text:?}");
        }
    }

    #[test]
    fn debug_does_not_reveal_the_whole_id() {
        let id = LeaseId(u128::MAX);
        assert!(!format!("{id:?}").contains(&id.to_string()));
    }
}
