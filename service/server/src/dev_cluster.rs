//! `baton dev cluster`: a local cluster for people, one command.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::Context;

use crate::cli::DevClusterArgs;

/// Child processes, stopped (SIGTERM, then SIGKILL) when dropped.
struct Nodes(Vec<Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in &self.0 {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for child in &mut self.0 {
            for _ in 0..50 {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts the nodes, prints their addresses, waits for Ctrl-C, stops them and
/// removes their data.
pub async fn run(args: DevClusterArgs) -> anyhow::Result<()> {
    let n = args.nodes.clamp(1, 9);
    let exe = std::env::current_exe().context("locating the baton binary")?;
    let dir: PathBuf =
        std::env::temp_dir().join(format!("baton-dev-cluster-{}", std::process::id()));
    let port = |i: u64, offset: u16| args.base_port + 10 * (i as u16 - 1) + offset;
    let peers = (1..=n)
        .map(|i| format!("{i}=http://127.0.0.1:{}", port(i, 1)))
        .collect::<Vec<_>>()
        .join(",");
    let secret = format!("{:032x}", baton_raft::Node::new_lease_id().0);
    let mut nodes = Nodes(Vec::new());
    for i in 1..=n {
        let child = Command::new(&exe)
            .arg("serve")
            .args(["--node-id", &i.to_string()])
            .args(["--listen", &format!("127.0.0.1:{}", port(i, 0))])
            .args(["--raft-listen", &format!("127.0.0.1:{}", port(i, 1))])
            .arg("--data-dir")
            .arg(dir.join(format!("node-{i}")))
            .args(["--peers", &peers])
            // Loopback only: nothing crosses a network.
            .arg("--insecure-plaintext-peers")
            .env("BATON_CLUSTER_SECRET", &secret)
            .spawn()
            .with_context(|| format!("starting node {i}"))?;
        nodes.0.push(child);
    }
    println!("baton dev cluster: {n} nodes, data in {}", dir.display());
    for i in 1..=n {
        println!(
            "  node {i}: api http://127.0.0.1:{}  raft http://127.0.0.1:{}",
            port(i, 0),
            port(i, 1)
        );
    }
    println!("cluster secret (admin calls): {secret}");
    println!("try: curl -s http://127.0.0.1:{}/v1/cluster", port(1, 0));
    println!("Ctrl-C stops the cluster.");
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    println!("stopping");
    drop(nodes);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
