//! How long the client API keeps a connection that sends nothing, in both
//! serving modes, and how long Baton's own clients of that API (the proxy, the
//! CLI) keep an idle pooled connection, which must be less.
//!
//! A client that hands a pooled connection to a request just as the server
//! closes it loses that request: a reset or an early close, which for a write
//! means "outcome unknown". And actix-http answers a connection whose first
//! request head has not arrived within [`REQUEST_HEAD_TIMEOUT`] with an unsolicited `408` (empty
//! body) before closing it, which the client then reads as the answer to the
//! request it just sent. A connection opened by a pool but never used (hyper's
//! pool races a new connection against a returning one, and keeps the loser) is
//! exactly that. `make test`'s overload run met it once in 26,252 acquires
//! (session 60). Dropping idle connections client-side first avoids both.

use std::time::Duration;

/// An idle keep-alive connection is closed after this (actix's default, set
/// explicitly so that [`POOL_IDLE_TIMEOUT`] is checked against it).
pub const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// A new connection's first request head must arrive within this; after it
/// actix-http writes `408 Request Timeout` and closes the connection.
pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// actix-http computes both deadlines from a clock it reads every 500 ms, so a
/// connection can be closed this much before either limit (more if the thread
/// that reads it is busy: the second of slack below is for that too).
pub const SERVER_CLOCK_GRANULARITY: Duration = Duration::from_millis(500);

/// How long Baton's own clients of a Baton API (`baton serve --proxy`, the
/// CLI) keep an unused pooled connection: well under both limits above, less
/// the server clock's granularity, so that the client always drops it first
/// (the server's timers start when it first polls the connection, after the
/// client's connect completed), with a second to spare for a client slow to
/// write once it picked a connection.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(3);

const _: () = assert!(
    POOL_IDLE_TIMEOUT.as_millis() + SERVER_CLOCK_GRANULARITY.as_millis() + 1000
        <= KEEP_ALIVE.as_millis()
);
const _: () = assert!(
    POOL_IDLE_TIMEOUT.as_millis() + SERVER_CLOCK_GRANULARITY.as_millis() + 1000
        <= REQUEST_HEAD_TIMEOUT.as_millis()
);
