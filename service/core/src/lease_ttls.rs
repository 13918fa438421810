//! Live leases counted by TTL bucket, kept with every lease created and ended,
//! so a metrics scrape reads them in O(1) instead of walking every lease.
//!
//! Issue 19: the walk took a copy of the state, and while a scrape walked 100,000
//! leases every entry applied beside it copied the map nodes it touched (three
//! times the apply time of an expiry slice in the `expiry_storm_entry` bench).

use crate::lease::Leases;

/// Upper bounds, in seconds, of the TTL buckets (`baton_leases_by_ttl`'s `le`);
/// a last bucket takes every longer TTL.
pub const LEASE_TTL_BOUNDS_S: [u64; 8] = [1, 5, 15, 30, 60, 300, 900, 3600];

/// Live leases per TTL bucket: `counts()[i]` have a TTL of at most
/// `LEASE_TTL_BOUNDS_S[i]` seconds and more than the bound before; the last
/// entry counts the TTLs above every bound. Not cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseTtlCounts([u64; LEASE_TTL_BOUNDS_S.len() + 1]);

impl LeaseTtlCounts {
    fn bucket(ttl_ms: u64) -> usize {
        LEASE_TTL_BOUNDS_S.partition_point(|&bound| bound.saturating_mul(1000) < ttl_ms)
    }

    /// Counts a lease of `ttl_ms` in.
    pub(crate) fn add(&mut self, ttl_ms: u64) {
        let count = &mut self.0[Self::bucket(ttl_ms)];
        *count = count.saturating_add(1);
    }

    /// Counts a lease of `ttl_ms` out. Saturating: a miscount must not stop
    /// applying (the property tests compare with a count from scratch).
    pub(crate) fn remove(&mut self, ttl_ms: u64) {
        let count = &mut self.0[Self::bucket(ttl_ms)];
        *count = count.saturating_sub(1);
    }

    /// The counts from scratch.
    pub(crate) fn of(leases: &Leases) -> Self {
        let mut counts = LeaseTtlCounts::default();
        for lease in leases.values() {
            counts.add(lease.ttl_ms);
        }
        counts
    }

    /// Leases per bucket, in the order of [`LEASE_TTL_BOUNDS_S`] and then the
    /// bucket above them.
    pub fn counts(&self) -> &[u64; LEASE_TTL_BOUNDS_S.len() + 1] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_counts_in_the_first_bucket_whose_bound_it_does_not_exceed() {
        let mut counts = LeaseTtlCounts::default();
        for ttl_ms in [1, 1_000, 1_001, 5_000, 3_600_000, 3_600_001, u64::MAX] {
            counts.add(ttl_ms);
        }
        assert_eq!(counts.counts(), &[2, 2, 0, 0, 0, 0, 0, 1, 2]);
        counts.remove(1_001);
        counts.remove(u64::MAX);
        assert_eq!(counts.counts(), &[2, 1, 0, 0, 0, 0, 0, 1, 1]);
    }

    #[test]
    fn removing_from_an_empty_bucket_leaves_it_at_zero() {
        let mut counts = LeaseTtlCounts::default();
        counts.remove(10_000);
        assert_eq!(counts, LeaseTtlCounts::default());
    }
}
