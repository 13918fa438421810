//! Free loopback ports for the `baton` (and etcd) processes a harness starts: the
//! chaos cluster here, the load tests (`baton-loadtest`) and the server's
//! multi-process integration tests all pick theirs through [`free_port`].
//!
//! A port the kernel picks for `bind(127.0.0.1:0)` is released before the server
//! binds it, so the next pick may be the same port (a smoke run once gave a Baton
//! the same client and peer port: "binding 127.0.0.1:36097: Address already in
//! use"), or an outgoing connection may take it meanwhile ("never became ready",
//! seen once in a full test run). Ports here are picked at random below the
//! kernel's ephemeral range, where no outgoing connection lands, checked by binding
//! them, and never handed out twice by one process: a cluster picks every port
//! before it starts a node, and restarts nodes on ports picked earlier, which a
//! bind check cannot see.

use std::collections::BTreeSet;
use std::io;
use std::net::TcpListener;
use std::sync::Mutex;

use rand::Rng;

/// The lowest port picked (above the well-known and registered services a
/// developer's machine tends to run).
const LOWEST: u16 = 20_000;

/// Ports this process handed out already.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A loopback port nothing listens on now, never returned before by this process.
pub fn free_port() -> io::Result<u16> {
    let highest = ephemeral_range_start();
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    if highest <= LOWEST + 1_000 {
        // No room below the ephemeral range: the kernel's choice, still never twice.
        loop {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            if handed_out.insert(port) {
                return Ok(port);
            }
        }
    }
    let mut rng = rand::thread_rng();
    for _ in 0..4 * u32::from(highest - LOWEST) {
        let pick = rng.gen_range(LOWEST..highest);
        if !handed_out.contains(&pick) && TcpListener::bind(("127.0.0.1", pick)).is_ok() {
            handed_out.insert(pick);
            return Ok(pick);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("no free loopback port between {LOWEST} and {highest}"),
    ))
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_range_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smoke run's failure: two picks in a row gave the same port. Thousands of
    /// picks from the kernel's range collide by the birthday bound; these must not.
    #[test]
    fn a_port_is_never_handed_out_twice() {
        let picks: Vec<u16> = (0..2_000)
            .map(|_| free_port().expect("a free port"))
            .collect();
        let distinct: BTreeSet<u16> = picks.iter().copied().collect();
        assert_eq!(distinct.len(), picks.len());
    }

    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_are_free() {
        let highest = ephemeral_range_start();
        for _ in 0..50 {
            let port = free_port().expect("a free port");
            if highest > LOWEST + 1_000 {
                assert!((LOWEST..highest).contains(&port), "{port}");
            }
            drop(TcpListener::bind(("127.0.0.1", port)).expect("the port is free"));
        }
    }
}
