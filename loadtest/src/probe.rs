//! Server-side measurements taken around the measured phase: CPU time from
//! `/proc/<pid>/stat`, and fsync/fdatasync calls counted by `perf stat` on the
//! syscall tracepoints when perf is usable.

use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// CPU seconds (user + system) a process has used so far, from `/proc/<pid>/stat`.
/// `pid` may be `"self"`.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&stat).map(|ticks| ticks as f64 / clock_ticks_per_second())
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name
/// (field 2) may contain spaces and parentheses, so fields are counted after its
/// last `)`.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14 -> index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU use of a process between [`CpuProbe::start`] and [`CpuProbe::cores`].
pub struct CpuProbe {
    pid: String,
    cpu: f64,
    at: Instant,
}

impl CpuProbe {
    /// Starts measuring `pid` (or `"self"`); `None` when `/proc` cannot be read.
    pub fn start(pid: &str) -> Option<Self> {
        Some(Self {
            pid: pid.to_owned(),
            cpu: cpu_seconds(pid)?,
            at: Instant::now(),
        })
    }

    /// Average cores used since the start.
    pub fn cores(&self) -> Option<f64> {
        let used = cpu_seconds(&self.pid)? - self.cpu;
        Some(used / self.at.elapsed().as_secs_f64().max(1e-9))
    }
}

/// Counts a process's fsync and fdatasync calls with `perf stat` on the syscall
/// tracepoints (all its threads).
pub struct FsyncProbe {
    /// `perf stat`, until [`FsyncProbe::stop`] takes it.
    child: Option<Child>,
}

const FSYNC_EVENTS: &str = "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync";

impl FsyncProbe {
    /// Whether `perf stat` can count syscall tracepoints here (needs perf and tracefs).
    pub fn available() -> bool {
        Command::new("perf")
            .args(["stat", "-x,", "-e", FSYNC_EVENTS, "true"])
            .stdout(Stdio::null())
            .output()
            .map(|o| {
                let err = String::from_utf8_lossy(&o.stderr);
                o.status.success()
                    && err
                        .lines()
                        .any(|l| l.contains("sys_enter_fdatasync") && !l.contains("<not"))
            })
            .unwrap_or(false)
    }

    /// Starts counting for `pid`.
    pub fn start(pid: u32) -> Option<Self> {
        let child = Command::new("perf")
            .args(["stat", "-x,", "-e", FSYNC_EVENTS, "-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        Some(Self { child: Some(child) })
    }

    /// Stops counting (SIGINT, on which perf prints its counts) and returns the total.
    pub fn stop(mut self) -> Option<u64> {
        let child = self.child.take()?;
        let pid = child.id().to_string();
        Command::new("kill").args(["-INT", &pid]).status().ok()?;
        let output = child.wait_with_output().ok()?;
        parse_perf_counts(&String::from_utf8_lossy(&output.stderr))
    }
}

impl Drop for FsyncProbe {
    /// A probe dropped before [`FsyncProbe::stop`] (a run that failed or was
    /// stopped by a signal) stops its `perf`, which would otherwise count on.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sums the counts of `perf stat -x,` output lines (`count,unit,event,...`).
pub fn parse_perf_counts(text: &str) -> Option<u64> {
    let mut total = None;
    for line in text.lines() {
        let mut fields = line.split(',');
        let (Some(count), Some(_unit), Some(event)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if event.starts_with("syscalls:") {
            if let Ok(n) = count.trim().parse::<u64>() {
                *total.get_or_insert(0) += n;
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_dropped_unstopped_stops_its_perf() {
        // Only where perf can count the tracepoints (`make bench` then counts fsyncs).
        if !FsyncProbe::available() {
            return;
        }
        let probe = FsyncProbe::start(std::process::id()).expect("perf starts");
        let perf = probe.child.as_ref().expect("running").id();
        drop(probe);
        let state = std::fs::read_to_string(format!("/proc/{perf}/stat"));
        assert!(state.is_err(), "perf {perf} still there: {state:?}");
    }

    #[test]
    fn parses_proc_stat_with_odd_command_names() {
        let line = "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 8 0 100 1000 10";
        assert_eq!(parse_cpu_ticks(line), Some(325));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn reads_own_cpu() {
        assert!(cpu_seconds("self").is_some());
    }

    #[test]
    fn parses_perf_csv() {
        let text = "12,,syscalls:sys_enter_fsync,1000,100.00,,\n30,,syscalls:sys_enter_fdatasync,1000,100.00,,\n";
        assert_eq!(parse_perf_counts(text), Some(42));
        assert_eq!(
            parse_perf_counts("<not supported>,,syscalls:sys_enter_fsync"),
            None
        );
    }
}
