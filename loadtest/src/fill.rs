//! Filling a server with held locks before a measurement: `scale`, `storm` and
//! `snapshot-cluster` all grant leases and acquire locks on each, many at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures_util::stream::{self, StreamExt, TryStreamExt};

use crate::target::{Lease, Target};

/// What to hold.
#[derive(Debug, Clone, Copy)]
pub struct Fill<'a> {
    /// Leases to grant (holders `{label}-{i}`).
    pub leases: usize,
    /// Locks acquired on each.
    pub locks_per_lease: usize,
    /// Their TTL.
    pub ttl_ms: u64,
    /// Leases filled at once.
    pub clients: usize,
    /// Names the holders and the progress lines.
    pub label: &'a str,
}

/// Grants `fill.leases` leases and acquires `lock(i, k)` for k in
/// `0..fill.locks_per_lease` on the i-th; prints progress every tenth of the
/// leases. Returns the leases, in no particular order.
pub async fn fill(
    target: &Target,
    fill: Fill<'_>,
    lock: impl Fn(usize, usize) -> String + Sync,
) -> anyhow::Result<Vec<Lease>> {
    let started = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let every = (fill.leases / 10).max(1);
    let lock = &lock;
    stream::iter(0..fill.leases)
        .map(|i| {
            let done = done.clone();
            async move {
                let lease = target
                    .grant(fill.ttl_ms, &format!("{}-{i}", fill.label))
                    .await?;
                for k in 0..fill.locks_per_lease {
                    target.acquire(&lock(i, k), &lease).await?;
                }
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(every) {
                    eprintln!(
                        "{}: {n} leases filled after {:.1} s",
                        fill.label,
                        started.elapsed().as_secs_f64()
                    );
                }
                anyhow::Ok(lease)
            }
        })
        .buffer_unordered(fill.clients.max(1))
        .try_collect()
        .await
}
