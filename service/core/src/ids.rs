//! Identifiers that the proposer chooses and every replica stores verbatim.

use std::fmt;
use std::hash::Hasher;
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

/// Lower-case RFC 4648 base32 without padding, built once: building it per
/// encode or parse showed up in the server profile (every lease id in and out).
static LOWER_BASE32: std::sync::LazyLock<Encoding> = std::sync::LazyLock::new(|| {
    let mut spec = BASE32_NOPAD.specification();
    spec.symbols = "abcdefghijklmnopqrstuvwxyz234567".to_owned();
    spec.encoding().unwrap_or_else(|_| BASE32_NOPAD.clone())
});

fn lower_base32() -> &'static Encoding {
    &LOWER_BASE32
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

/// Hashes [`LeaseId`]s for the lease table. The ids are 128 bits from the
/// proposer's CSPRNG and clients cannot choose them, so a keyed, flood-resistant
/// hash (std's SipHash, a third of an uncontended acquire's time) buys nothing:
/// folding the two halves and multiplying spreads them over every bit, high ones
/// included (hashbrown takes its 7-bit tags from the top).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LeaseIdHasher(u64);

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for LeaseIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u128(&mut self, n: u128) {
        let folded = (n as u64) ^ ((n >> 64) as u64);
        self.0 = (self.0 ^ folded).wrapping_mul(GOLDEN).rotate_left(29);
    }

    /// Only `write_u128` is used (`LeaseId` derives `Hash`); anything else still
    /// hashes correctly, byte by byte.
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(GOLDEN);
        }
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
    fn lease_id_hashes_spread_over_high_and_low_bits() {
        use std::collections::BTreeSet;
        use std::hash::{BuildHasher, BuildHasherDefault};
        let build = BuildHasherDefault::<LeaseIdHasher>::default();
        // Sequential ids (tests, benches) and ids differing only in the high half.
        for ids in [
            (0..1024u128).collect::<Vec<_>>(),
            (0..1024u128).map(|i| i << 64).collect(),
        ] {
            let hashes: Vec<u64> = ids.iter().map(|n| build.hash_one(LeaseId(*n))).collect();
            let tags: BTreeSet<u64> = hashes.iter().map(|h| h >> 57).collect();
            let buckets: BTreeSet<u64> = hashes.iter().map(|h| h & 1023).collect();
            assert!(tags.len() > 100, "{} distinct tags", tags.len());
            assert!(buckets.len() > 600, "{} distinct buckets", buckets.len());
        }
    }

    #[test]
    fn debug_does_not_reveal_the_whole_id() {
        let id = LeaseId(u128::MAX);
        assert!(!format!("{id:?}").contains(&id.to_string()));
    }
}
