//! How this machine's idle CPUs wait: what decides whether a lone request's every
//! wait ends with a cheap wake-up or with one through a hypervisor.

use std::fmt;
use std::path::Path;

use serde::Serialize;

/// The cpuidle driver and governor and, under the `haltpoll` governor (KVM and
/// Firecracker guests), how long an idle vCPU polls before it halts.
///
/// A guest that never polls (`guest_halt_poll_ns` = 0) halts an idle vCPU at once,
/// and every wake-up then goes through the host: a lone client's lock cycle paid
/// about 0.2 ms for it on the benchmark machine (BENCHMARKS.md, "The lone client
/// and the guest's halt polling").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CpuIdle {
    /// `cpuidle/current_driver`, when the kernel has one.
    pub driver: Option<String>,
    /// `cpuidle/current_governor` (or `current_governor_ro`).
    pub governor: Option<String>,
    /// `guest_halt_poll_ns` of the `haltpoll` governor, only while that governor is
    /// the one in use: the parameter exists whenever the governor is built in.
    pub guest_halt_poll_ns: Option<u64>,
}

impl CpuIdle {
    /// Reads the settings under `sysfs` (normally `/sys`); what is missing stays `None`.
    pub fn read(sysfs: &Path) -> Self {
        let read = |path: &str| {
            std::fs::read_to_string(sysfs.join(path))
                .map(|text| text.trim().to_owned())
                .ok()
                .filter(|text| !text.is_empty())
        };
        let driver = read("devices/system/cpu/cpuidle/current_driver");
        let governor = read("devices/system/cpu/cpuidle/current_governor")
            .or_else(|| read("devices/system/cpu/cpuidle/current_governor_ro"));
        let guest_halt_poll_ns = if governor.as_deref() == Some("haltpoll") {
            read("module/haltpoll/parameters/guest_halt_poll_ns").and_then(|ns| ns.parse().ok())
        } else {
            None
        };
        CpuIdle {
            driver,
            governor,
            guest_halt_poll_ns,
        }
    }

    /// An idle vCPU halts without polling first.
    pub fn never_polls(&self) -> bool {
        self.guest_halt_poll_ns == Some(0)
    }
}

impl fmt::Display for CpuIdle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(driver) = &self.driver {
            parts.push(format!("cpuidle driver `{driver}`"));
        }
        if let Some(governor) = &self.governor {
            parts.push(format!("governor `{governor}`"));
        }
        match self.guest_halt_poll_ns {
            Some(0) => parts.push("guest halt polling off (`guest_halt_poll_ns` = 0)".into()),
            Some(ns) => parts.push(format!(
                "guest halt polling for up to {} µs (`guest_halt_poll_ns` = {ns})",
                ns as f64 / 1000.0
            )),
            None => {}
        }
        if parts.is_empty() {
            f.write_str("unknown")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake sysfs holding `files` (path under the root, contents).
    fn sysfs(files: &[(&str, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("temp dir");
        for (path, text) in files {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
            std::fs::write(path, text).expect("write");
        }
        root
    }

    const DRIVER: &str = "devices/system/cpu/cpuidle/current_driver";
    const GOVERNOR: &str = "devices/system/cpu/cpuidle/current_governor";
    const GOVERNOR_RO: &str = "devices/system/cpu/cpuidle/current_governor_ro";
    const POLL_NS: &str = "module/haltpoll/parameters/guest_halt_poll_ns";

    #[test]
    fn a_guest_that_never_polls_before_it_halts_says_so() {
        let root = sysfs(&[
            (DRIVER, "haltpoll\n"),
            (GOVERNOR_RO, "haltpoll\n"),
            (POLL_NS, "0\n"),
        ]);
        let idle = CpuIdle::read(root.path());
        assert!(idle.never_polls());
        assert_eq!(
            idle.to_string(),
            "cpuidle driver `haltpoll`, governor `haltpoll`, guest halt polling off (`guest_halt_poll_ns` = 0)"
        );
    }

    #[test]
    fn a_polling_guest_gives_its_window() {
        let root = sysfs(&[
            (DRIVER, "haltpoll\n"),
            (GOVERNOR, "haltpoll\n"),
            (POLL_NS, "200000\n"),
        ]);
        let idle = CpuIdle::read(root.path());
        assert!(!idle.never_polls());
        assert_eq!(
            idle.to_string(),
            "cpuidle driver `haltpoll`, governor `haltpoll`, guest halt polling for up to 200 µs (`guest_halt_poll_ns` = 200000)"
        );
    }

    #[test]
    fn a_window_under_a_microsecond_is_not_rounded_to_nothing() {
        let root = sysfs(&[(GOVERNOR, "haltpoll\n"), (POLL_NS, "500\n")]);
        assert_eq!(
            CpuIdle::read(root.path()).to_string(),
            "governor `haltpoll`, guest halt polling for up to 0.5 µs (`guest_halt_poll_ns` = 500)"
        );
    }

    #[test]
    fn the_writable_governor_file_wins_over_the_read_only_one() {
        let root = sysfs(&[(GOVERNOR, "menu\n"), (GOVERNOR_RO, "haltpoll\n")]);
        assert_eq!(CpuIdle::read(root.path()).governor.as_deref(), Some("menu"));
    }

    #[test]
    fn the_poll_window_of_a_governor_not_in_use_is_left_out() {
        // The parameter exists whenever the haltpoll governor is built in.
        let root = sysfs(&[
            (DRIVER, "intel_idle\n"),
            (GOVERNOR, "menu\n"),
            (POLL_NS, "0\n"),
        ]);
        let idle = CpuIdle::read(root.path());
        assert!(!idle.never_polls());
        assert_eq!(
            idle.to_string(),
            "cpuidle driver `intel_idle`, governor `menu`"
        );
    }

    #[test]
    fn a_poll_window_that_does_not_parse_is_left_out() {
        let root = sysfs(&[(GOVERNOR, "haltpoll\n"), (POLL_NS, "lots\n")]);
        let idle = CpuIdle::read(root.path());
        assert_eq!(idle.guest_halt_poll_ns, None);
        assert!(!idle.never_polls());
    }

    #[test]
    fn a_machine_without_cpuidle_is_unknown() {
        let root = sysfs(&[]);
        assert_eq!(CpuIdle::read(root.path()), CpuIdle::default());
        assert_eq!(CpuIdle::default().to_string(), "unknown");
    }
}
