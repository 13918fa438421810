//! A stopped load tool stops the servers it started (`kill <pid>` of a bench used to
//! leave its etcd and Baton running).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A stand-in server: records its pid, then sleeps without ever becoming ready.
fn fake_server(dir: &Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    let pids = dir.join("pids");
    std::fs::write(
        &path,
        format!("#!/bin/sh\necho $$ >> {}\nexec sleep 600\n", pids.display()),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    path
}

fn alive(pid: &str) -> bool {
    // A zombie is dead for this purpose; the tool reaps what it kills.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|s| !s.trim_start().starts_with('Z'))
    })
}

fn wait_for(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < bound, "{what} within {bound:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_stops_the_tool_and_the_servers_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = fake_server(dir.path(), "etcd");
    let baton = fake_server(dir.path(), "baton");
    let mut tool = Command::new(env!("CARGO_BIN_EXE_baton-loadtest"))
        .args(["bench", "--baton-bin"])
        .arg(&baton)
        .arg("--etcd-bin")
        .arg(&etcd)
        .arg("--data-root")
        .arg(dir.path())
        .arg("--results-dir")
        .arg(dir.path().join("results"))
        .arg("--out")
        .arg(dir.path().join("B.md"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both stand-ins started (the tool now waits for them to be ready).
    let pids_file = dir.path().join("pids");
    let pids = || std::fs::read_to_string(&pids_file).unwrap_or_default();
    wait_for("two servers started", Duration::from_secs(20), || {
        pids().lines().count() == 2
    });
    let pids: Vec<String> = pids().lines().map(str::to_owned).collect();
    assert!(pids.iter().all(|pid| alive(pid)), "{pids:?}");

    Command::new("kill")
        .args(["-TERM", &tool.id().to_string()])
        .status()
        .unwrap();
    let mut status = None;
    wait_for("the tool to exit", Duration::from_secs(20), || {
        status = tool.try_wait().unwrap();
        status.is_some()
    });
    assert!(!status.unwrap().success());
    for pid in &pids {
        assert!(!alive(pid), "server {pid} still runs");
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(tool.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("stopped by SIGTERM"), "{stderr}");
}
