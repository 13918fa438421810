//! A userspace TCP proxy for one DIRECTED raft link (node i dialing node j):
//! `tc netem` is not available here, so partitions are made by these proxies.

use std::net::SocketAddr;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the link does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkMode {
    /// Forwards both ways.
    Pass,
    /// Closes every connection and refuses new ones (connection reset).
    Drop,
    /// Accepts and keeps connections but forwards nothing (requests time out); on
    /// healing, what was held is delivered late.
    Blackhole,
}

/// A running proxy for one directed link.
pub struct LinkProxy {
    /// Where node i dials (the proxy's listener).
    pub listen: SocketAddr,
    mode: watch::Sender<LinkMode>,
    task: JoinHandle<()>,
}

impl LinkProxy {
    /// Starts a proxy on `listener` forwarding to `target`.
    pub fn start(listener: TcpListener, target: SocketAddr) -> std::io::Result<Self> {
        let listen = listener.local_addr()?;
        let (mode, rx) = watch::channel(LinkMode::Pass);
        let task = tokio::spawn(accept_loop(listener, target, rx));
        Ok(Self { listen, mode, task })
    }

    /// Changes the link's mode; existing connections follow at once.
    pub fn set(&self, mode: LinkMode) {
        self.mode.send_replace(mode);
    }

    /// The current mode.
    pub fn mode(&self) -> LinkMode {
        *self.mode.borrow()
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, mode: watch::Receiver<LinkMode>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        if *mode.borrow() == LinkMode::Drop {
            drop(inbound);
            continue;
        }
        let mode = mode.clone();
        tokio::spawn(async move {
            let Ok(outbound) = TcpStream::connect(target).await else {
                return;
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let (ri, wi) = inbound.into_split();
            let (ro, wo) = outbound.into_split();
            tokio::select! {
                _ = pump(ri, wo, mode.clone()) => {}
                _ = pump(ro, wi, mode) => {}
            }
        });
    }
}

/// Copies one direction, obeying the mode: stops forwarding while blackholed,
/// returns (closing the connection) on drop.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<LinkMode>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let m = *mode.borrow_and_update();
        match m {
            LinkMode::Drop => return,
            LinkMode::Blackhole => {
                if mode.changed().await.is_err() {
                    return;
                }
            }
            LinkMode::Pass => {
                tokio::select! {
                    r = from.read(&mut buf) => match r {
                        Ok(0) | Err(_) => { let _ = to.shutdown().await; return; }
                        Ok(n) => if to.write_all(&buf[..n]).await.is_err() { return; },
                    },
                    changed = mode.changed() => if changed.is_err() { return; },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(addr: SocketAddr) -> Option<Vec<u8>> {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        let r = tokio::time::timeout(
            std::time::Duration::from_millis(500),
            s.read_exact(&mut buf),
        )
        .await;
        match r {
            Ok(Ok(_)) => Some(buf.to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn passes_drops_blackholes_and_heals() {
        let target = echo_server().await;
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let p = LinkProxy::start(l, target).expect("proxy");
        assert_eq!(roundtrip(p.listen).await.as_deref(), Some(&b"ping"[..]));
        p.set(LinkMode::Drop);
        assert_eq!(roundtrip(p.listen).await, None);
        p.set(LinkMode::Blackhole);
        assert_eq!(roundtrip(p.listen).await, None);
        p.set(LinkMode::Pass);
        assert_eq!(roundtrip(p.listen).await.as_deref(), Some(&b"ping"[..]));
        assert_eq!(p.mode(), LinkMode::Pass);
    }
}
