//! # baton-core
//!
//! Baton's replicated state machine: leases, exclusive locks with FIFO queues and
//! fencing tokens, elections and a cluster-unique name registry.
//!
//! Pure and deterministic by design: no I/O, no clock reads, no async runtime.
//! Every replica applies the same [`Batch`]es in the same order through
//! [`StateMachine::apply_batch`] and reaches the same state; time enters only as the
//! leader-stamped [`Batch::now_ms`], and ids (lease ids, waiter ids) are chosen by
//! the proposer and carried in the command.
//!
//! Each applied request yields an [`Outcome`]: the reply for its proposer and the
//! [`Event`]s (grants, releases, expiries, elections, registrations, each with its
//! own revision) that the server uses to wake waiting requests and feed watches.
//!
//! Memory: a held lock with its own lease costs about 480 bytes of resident memory
//! (measured: 477 bytes per lock with 100,000 held locks, each on its own lease,
//! allocator overhead included; `tests/memory.rs` prints it and fails above 1 KiB),
//! and about 110 bytes of snapshot. Applying runs at 2 to 4 million simple commands
//! per second on one core (the `apply` benchmark). See the crate's README.

mod command;
mod elections;
mod error;
mod force_release;
mod idempotency;
mod ids;
mod lease;
mod leases;
mod limits;
mod locks;
mod machine;
mod name;
mod names;
mod outcome;
mod quota;
mod slot;
mod snapshot;
mod usage;
mod views;

pub use command::{Batch, Command, IdempotencyKey, LeaseRef, Request};
pub use error::CoreError;
pub use force_release::HoldingKind;
pub use idempotency::IDEMPOTENCY_RETENTION_MS;
pub use ids::{LeaseId, MalformedLeaseId, WaiterId};
pub use limits::Limits;
pub use machine::{ApplyContext, StateMachine};
pub use name::{validate_name, MAX_NAME_BYTES};
pub use outcome::{EndReason, Event, EventKind, Grant, Outcome, Released, Reply};
pub use quota::Quota;
pub use snapshot::{SnapshotError, SNAPSHOT_FORMAT};
pub use usage::Usage;
pub use views::{Counts, ElectionView, LeaderView, LeaseView, LockView, NameView};
