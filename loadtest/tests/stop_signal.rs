//! A stopped load tool stops the servers it started (`kill <pid>` of a bench used to
//! leave its etcd and Baton running), unless it was told to ignore the signal.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Long enough for a bench to time its 500 fsyncs and start both stand-ins on a
/// busy machine with a slow disk: a bound on a hang, not a speed.
const BOUND: Duration = Duration::from_secs(60);

/// A stand-in server: records its pid, then sleeps without ever becoming ready.
fn fake_server(dir: &Path, name: &str) -> PathBuf {
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

/// Running, as opposed to gone or a zombie (exited, not yet reaped by its parent).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < BOUND, "{what} within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(pid: u32, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// A bench of the load tool against two stand-ins, its scratch space in a temporary
/// directory; whatever is still running when it is dropped (a failed test) is killed.
struct Bench {
    dir: tempfile::TempDir,
    tool: Child,
}

impl Bench {
    /// Starts `baton-loadtest bench`, through `wrapper` if given (e.g. `nohup`), and
    /// waits until it has started both stand-ins.
    fn start(wrapper: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let etcd = fake_server(dir.path(), "etcd");
        let baton = fake_server(dir.path(), "baton");
        let tool_bin = env!("CARGO_BIN_EXE_baton-loadtest");
        let mut command = match wrapper {
            Some(wrapper) => {
                let mut command = Command::new(wrapper);
                command.arg(tool_bin);
                command
            }
            None => Command::new(tool_bin),
        };
        let tool = command
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
        let bench = Bench { dir, tool };
        wait_for("two stand-ins started", || bench.pids().len() == 2);
        assert!(bench.pids().iter().all(|pid| alive(pid)));
        assert_eq!(bench.scratch_dirs(), 1, "the bench's own directory");
        bench
    }

    fn pids(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("pids"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The bench's temporary directories (`baton-bench-*` under `--data-root`).
    fn scratch_dirs(&self) -> usize {
        std::fs::read_dir(self.dir.path())
            .unwrap()
            .filter(|entry| {
                let name = entry.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with("baton-bench-")
            })
            .count()
    }

    /// Waits for the tool to exit with `code`; its stderr.
    fn exited(&mut self, code: i32) -> String {
        let mut status = None;
        wait_for("the tool to exit", || {
            status = self.tool.try_wait().unwrap();
            status.is_some()
        });
        assert_eq!(status.unwrap().code(), Some(code), "128 + the signal");
        let mut stderr = String::new();
        std::io::Read::read_to_string(self.tool.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        stderr
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.tool.kill();
        let _ = self.tool.wait();
        for pid in self.pids() {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    }
}

#[test]
fn sigterm_stops_the_tool_and_the_servers_it_started() {
    let mut bench = Bench::start(None);
    signal(bench.tool.id(), "TERM");
    let stderr = bench.exited(143);
    for pid in bench.pids() {
        assert!(!alive(&pid), "server {pid} still runs");
    }
    assert_eq!(bench.scratch_dirs(), 0, "the bench's directory is left");
    assert!(stderr.contains("stopped by SIGTERM"), "{stderr}");
}

#[test]
fn a_hangup_it_was_told_to_ignore_is_ignored() {
    // nohup starts the tool with SIGHUP ignored: a hang-up must not stop the run.
    let mut bench = Bench::start(Some("nohup"));
    signal(bench.tool.id(), "HUP");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        bench.tool.try_wait().unwrap().is_none(),
        "stopped by SIGHUP"
    );
    assert!(bench.pids().iter().all(|pid| alive(pid)));
    signal(bench.tool.id(), "INT");
    let stderr = bench.exited(130);
    assert!(stderr.contains("stopped by SIGINT"), "{stderr}");
    for pid in bench.pids() {
        assert!(!alive(&pid), "server {pid} still runs");
    }
}

/// SIGKILL cannot be caught: the servers go because the kernel sends them the
/// parent-death signal that `setpriv --pdeathsig` set (where util-linux's setpriv
/// is installed; without it the tool starts them directly and this cannot hold).
#[test]
fn a_killed_tool_takes_the_servers_it_started_with_it() {
    let setpriv = Command::new("setpriv")
        .args(["--pdeathsig", "KILL", "--", "true"])
        .status()
        .is_ok_and(|status| status.success());
    if !setpriv {
        eprintln!("skipped: no working setpriv --pdeathsig here");
        return;
    }
    let mut bench = Bench::start(None);
    signal(bench.tool.id(), "KILL");
    let _ = bench.tool.wait();
    for pid in bench.pids() {
        wait_for("the server to be gone", || !alive(&pid));
    }
}
