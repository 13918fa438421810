//! What the benchmark ran on: CPU, kernel, memory, how idle CPUs wait, the data
//! directory's filesystem and how long one synced write takes there.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::cpu_idle::CpuIdle;

/// The machine description written into BENCHMARKS.md.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// `nproc`.
    pub nproc: String,
    /// `lscpu` model name.
    pub cpu_model: String,
    /// `uname -sr`.
    pub kernel: String,
    /// Total memory from /proc/meminfo.
    pub memory: String,
    /// How idle CPUs wait (a guest that never polls before halting makes every
    /// wake-up of a lone request's waits go through the host).
    pub cpu_idle: CpuIdle,
    /// `df -T` of the data directory: device and filesystem type.
    pub filesystem: String,
    /// Synced 4 KiB write latency in the data directory.
    pub fsync: FsyncLatency,
    /// `/proc/loadavg` when the description was taken (other work on the machine).
    pub loadavg: String,
}

/// One 4 KiB `write` + `fdatasync`, repeated.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FsyncLatency {
    /// Samples.
    pub samples: u64,
    /// Median, µs.
    pub p50_us: u64,
    /// Mean, µs.
    pub mean_us: f64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// Slowest, µs.
    pub max_us: u64,
}

impl FsyncLatency {
    /// Back-to-back synced writes per second one writer can do (1 / mean).
    pub fn limit_per_s(&self) -> f64 {
        if self.mean_us > 0.0 {
            1e6 / self.mean_us
        } else {
            0.0
        }
    }
}

fn sh(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Describes this machine; the fsync loop runs `samples` times in `dir`.
pub fn describe(dir: &Path, samples: u64) -> Machine {
    let cpu_model = sh("lscpu", &[])
        .lines()
        .find_map(|l| l.strip_prefix("Model name:").map(|m| m.trim().to_owned()))
        .unwrap_or_else(|| "unknown".into());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    let dir_text = dir.display().to_string();
    let filesystem = sh("df", &["-T", &dir_text])
        .lines()
        .nth(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            format!(
                "{} ({})",
                f.first().unwrap_or(&"?"),
                f.get(1).unwrap_or(&"?")
            )
        })
        .unwrap_or_else(|| "unknown".into());
    Machine {
        nproc: sh("nproc", &[]),
        cpu_model,
        kernel: sh("uname", &["-sr"]),
        memory,
        cpu_idle: CpuIdle::read(Path::new("/sys")),
        filesystem,
        fsync: fsync_latency(dir, samples).unwrap_or_default(),
        loadavg: loadavg(),
    }
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Times `samples` appends of 4 KiB each followed by `fdatasync` (what a WAL does).
pub fn fsync_latency(dir: &Path, samples: u64) -> std::io::Result<FsyncLatency> {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path)?;
    let block = vec![0x5au8; 4096];
    let mut h =
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(std::io::Error::other)?;
    for _ in 0..samples {
        let t = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        h.saturating_record((t.elapsed().as_micros() as u64).max(1));
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(FsyncLatency {
        samples,
        p50_us: h.value_at_quantile(0.5),
        mean_us: h.mean(),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_loop_measures_something() {
        let dir = tempfile::tempdir().expect("temp dir");
        let l = fsync_latency(dir.path(), 5).expect("fsync loop");
        assert_eq!(l.samples, 5);
        assert!(l.p50_us >= 1 && l.p99_us >= l.p50_us);
        // A histogram that clamps samples would report a max below the mean.
        assert!(l.max_us as f64 >= l.mean_us, "{l:?}");
        assert!(l.limit_per_s() > 0.0);
        assert!(!dir.path().join("fsync-probe").exists());
    }
}
