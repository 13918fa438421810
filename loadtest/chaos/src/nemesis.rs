//! The nemesis: a seeded, reproducible schedule of faults, and its execution
//! against the cluster and the workers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::cluster::Cluster;
use crate::proxy::LinkMode;
use crate::recorder::Recorder;

/// Fault families, as named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultFamily {
    /// kill -9 then restart.
    Kill,
    /// SIGSTOP/SIGCONT of the leader; pauses of client workers.
    Pause,
    /// Raft link partitions through the proxies.
    Partition,
    /// Clock jumps with libfaketime.
    Clock,
}

impl FaultFamily {
    /// Parses `kill,pause,partition,clock`.
    pub fn parse_list(s: &str) -> Result<Vec<Self>, String> {
        s.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|p| match p.trim() {
                "kill" => Ok(Self::Kill),
                "pause" => Ok(Self::Pause),
                "partition" => Ok(Self::Partition),
                "clock" => Ok(Self::Clock),
                other => Err(format!("unknown fault family {other:?}")),
            })
            .collect()
    }
}

/// One fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// kill -9 the current leader, restart after `down_ms`.
    KillLeader {
        /// Time down.
        down_ms: u64,
    },
    /// kill -9 a random minority, restart after `down_ms`.
    KillMinority {
        /// Time down.
        down_ms: u64,
    },
    /// kill -9 every node, restart after `down_ms`.
    KillAll {
        /// Time down.
        down_ms: u64,
    },
    /// SIGSTOP the leader for longer than the election timeout.
    PauseLeader {
        /// Time stopped.
        ms: u64,
    },
    /// Pause a client worker between its "I hold it" check and its write.
    PauseWorker {
        /// Worker id.
        worker: u32,
        /// Pause length (longer than the TTL).
        ms: u64,
    },
    /// Cut every link to and from the leader.
    IsolateLeader {
        /// Drop or blackhole.
        mode: LinkMode,
        /// How long.
        ms: u64,
    },
    /// Cut a random minority off from the majority.
    SplitMinority {
        /// Drop or blackhole.
        mode: LinkMode,
        /// How long.
        ms: u64,
    },
    /// Cut only one direction of the leader's links.
    OneWayLeader {
        /// True: the leader cannot reach others; false: others cannot reach it.
        outbound: bool,
        /// How long.
        ms: u64,
    },
    /// Jump the leader's clock (wall and monotonic) forward by `offset_s` (it is
    /// never put back: monotonic clocks do not go backwards).
    ClockJumpLeader {
        /// Seconds forward.
        offset_s: i64,
        /// How long the nemesis waits before its next fault.
        ms: u64,
    },
}

impl Fault {
    /// The short name used in counts.
    pub fn name(&self) -> &'static str {
        match self {
            Self::KillLeader { .. } => "kill-leader",
            Self::KillMinority { .. } => "kill-minority",
            Self::KillAll { .. } => "kill-all",
            Self::PauseLeader { .. } => "pause-leader",
            Self::PauseWorker { .. } => "pause-worker",
            Self::IsolateLeader { .. } => "isolate-leader",
            Self::SplitMinority { .. } => "split-minority",
            Self::OneWayLeader { .. } => "one-way-leader",
            Self::ClockJumpLeader { .. } => "clock-jump-leader",
        }
    }
}

/// Timing inputs of the schedule.
#[derive(Debug, Clone, Copy)]
pub struct ScheduleParams {
    /// Seed.
    pub seed: u64,
    /// Run length.
    pub duration_ms: u64,
    /// Client workers (ids 1..=workers).
    pub workers: u32,
    /// Lease TTL of the workers.
    pub ttl_ms: u64,
    /// Raft election timeout.
    pub election_timeout_ms: u64,
    /// How long a paused worker sleeps, in lease TTLs: `(from, to)` halves of
    /// a TTL, `to` excluded. Any pause over one TTL outlives the worker's lease;
    /// the skip-fencing control pauses longer so that another worker has time
    /// to take the key and write under it before the sleeper wakes
    /// ([`WorkerPauses::for_run`]).
    pub worker_pause: WorkerPauses,
}

/// How long paused workers sleep: `from..to` halves of the lease TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerPauses {
    /// Shortest pause, in halves of a TTL.
    pub from_half_ttls: u64,
    /// Longest pause (excluded), in halves of a TTL.
    pub to_half_ttls: u64,
}

impl WorkerPauses {
    /// 1.5-3 TTLs, or 3-5 for the skip-fencing control. A stale write shows in
    /// the fenced register only if someone wrote with a newer token first:
    /// after the sleeper's lease ends (one TTL) another worker must notice,
    /// take the key and sleep a quarter TTL before its first write. With 1.5-3
    /// TTLs that race was lost by 70 ms in a CI run (the control went
    /// uncaught); with 3-5 the newer holder has at least a TTL and a half.
    pub fn for_run(skip_fencing: bool) -> WorkerPauses {
        if skip_fencing {
            WorkerPauses {
                from_half_ttls: 6,
                to_half_ttls: 10,
            }
        } else {
            WorkerPauses {
                from_half_ttls: 3,
                to_half_ttls: 6,
            }
        }
    }

    /// The range of pause lengths in ms for leases of `ttl_ms`.
    pub fn range_ms(self, ttl_ms: u64) -> std::ops::Range<u64> {
        ttl_ms * self.from_half_ttls / 2..ttl_ms * self.to_half_ttls / 2
    }
}

/// The schedule: `(gap before the fault in ms, fault)`. Same seed, same schedule;
/// which node is "the leader" is decided when the fault runs.
pub fn schedule(p: &ScheduleParams, families: &[FaultFamily]) -> Vec<(u64, Fault)> {
    let mut rng = StdRng::seed_from_u64(p.seed);
    let mut out = Vec::new();
    if families.is_empty() {
        return out;
    }
    let mut t = 2_000;
    while t < p.duration_ms {
        let gap = rng.gen_range(500..2_500);
        let fam = families[rng.gen_range(0..families.len())];
        let et = p.election_timeout_ms;
        let fault = match fam {
            FaultFamily::Kill => match rng.gen_range(0..10) {
                0..=4 => Fault::KillLeader {
                    down_ms: rng.gen_range(300..3_000),
                },
                5..=7 => Fault::KillMinority {
                    down_ms: rng.gen_range(300..3_000),
                },
                _ => Fault::KillAll {
                    down_ms: rng.gen_range(200..1_500),
                },
            },
            FaultFamily::Pause => {
                if rng.gen_bool(0.4) {
                    Fault::PauseLeader {
                        ms: rng.gen_range(2 * et..4 * et),
                    }
                } else {
                    Fault::PauseWorker {
                        worker: rng.gen_range(1..=p.workers.max(1)),
                        ms: rng.gen_range(p.worker_pause.range_ms(p.ttl_ms)),
                    }
                }
            }
            FaultFamily::Partition => {
                let mode = if rng.gen_bool(0.5) {
                    LinkMode::Drop
                } else {
                    LinkMode::Blackhole
                };
                let ms = rng.gen_range(1_500..5_000);
                match rng.gen_range(0..3) {
                    0 => Fault::IsolateLeader { mode, ms },
                    1 => Fault::SplitMinority { mode, ms },
                    _ => Fault::OneWayLeader {
                        outbound: rng.gen_bool(0.5),
                        ms,
                    },
                }
            }
            FaultFamily::Clock => Fault::ClockJumpLeader {
                offset_s: rng.gen_range(1..20),
                ms: rng.gen_range(1_500..4_000),
            },
        };
        let length = match &fault {
            Fault::KillLeader { down_ms }
            | Fault::KillMinority { down_ms }
            | Fault::KillAll { down_ms } => *down_ms,
            Fault::PauseLeader { ms }
            | Fault::PauseWorker { ms, .. }
            | Fault::IsolateLeader { ms, .. }
            | Fault::SplitMinority { ms, .. }
            | Fault::OneWayLeader { ms, .. }
            | Fault::ClockJumpLeader { ms, .. } => *ms,
        };
        out.push((gap, fault));
        t += gap + length;
    }
    out
}

/// A nemesis event for the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NemesisEvent {
    /// Same clock as the history.
    pub time_ns: u64,
    /// Fault name, or `heal`.
    pub what: String,
    /// Details (targets).
    pub detail: String,
}

/// Shared log of what the nemesis did.
#[derive(Clone)]
pub struct NemesisLog {
    rec: Recorder,
    events: Arc<Mutex<Vec<NemesisEvent>>>,
}

impl NemesisLog {
    /// A log on the history's clock.
    pub fn new(rec: Recorder) -> Self {
        Self {
            rec,
            events: Arc::default(),
        }
    }

    /// Appends an event.
    pub fn record(&self, what: &str, detail: String) {
        let e = NemesisEvent {
            time_ns: self.rec.now_ns(),
            what: what.into(),
            detail,
        };
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e);
    }

    /// Every event.
    pub fn events(&self) -> Vec<NemesisEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Count of events per name (heals excluded).
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for e in self.events() {
            if e.what != "heal" {
                *m.entry(e.what).or_default() += 1;
            }
        }
        m
    }
}

/// Runs a schedule until it ends or `stop` is set, then heals everything.
pub struct Nemesis {
    /// The cluster (shared with the final phase).
    pub cluster: Arc<tokio::sync::Mutex<Cluster>>,
    /// Pause requests, one sender per worker (index = worker id - 1).
    pub worker_pauses: Vec<mpsc::UnboundedSender<Duration>>,
    /// The log.
    pub log: NemesisLog,
    /// Seed for target choices.
    pub seed: u64,
    /// Negative control: a kill-all also wipes every node's data directory.
    pub wipe_on_kill_all: bool,
}

impl Nemesis {
    /// Executes `plan` (stops early on `stop`), then heals.
    pub async fn run(self, plan: Vec<(u64, Fault)>, mut stop: watch::Receiver<bool>) {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x9e37_79b9_7f4a_7c15);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(2_000)) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
        for (gap, fault) in plan {
            if *stop.borrow() {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(gap)) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            self.apply(&fault, &mut rng, &mut stop).await;
        }
        let mut c = self.cluster.lock().await;
        if let Err(e) = c.heal_all().await {
            self.log.record("heal", format!("heal failed: {e}"));
        } else {
            self.log.record("heal", "final heal".into());
        }
    }

    async fn hold(&self, ms: u64, stop: &mut watch::Receiver<bool>) {
        // A fault is always held for its length, even at the end of the run, so
        // that the schedule's faults happen as planned.
        let _ = stop;
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    async fn leader_or_random(&self, rng: &mut StdRng) -> u64 {
        let c = self.cluster.lock().await;
        match c.leader().await {
            Some(l) => l,
            None => {
                let ids = c.ids();
                ids[rng.gen_range(0..ids.len())]
            }
        }
    }

    async fn apply(&self, fault: &Fault, rng: &mut StdRng, stop: &mut watch::Receiver<bool>) {
        let name = fault.name();
        match fault {
            Fault::KillLeader { down_ms } => {
                let l = self.leader_or_random(rng).await;
                self.log
                    .record(name, format!("kill -9 node {l}, down {down_ms} ms"));
                self.cluster.lock().await.kill(l).await;
                self.hold(*down_ms, stop).await;
                self.restart(&[l]).await;
            }
            Fault::KillMinority { down_ms } => {
                let mut ids = self.cluster.lock().await.ids();
                ids.shuffle(rng);
                let k = rng.gen_range(1..=(ids.len() - 1) / 2);
                let victims: Vec<u64> = ids[..k].to_vec();
                self.log.record(
                    name,
                    format!("kill -9 nodes {victims:?}, down {down_ms} ms"),
                );
                for v in &victims {
                    self.cluster.lock().await.kill(*v).await;
                }
                self.hold(*down_ms, stop).await;
                self.restart(&victims).await;
            }
            Fault::KillAll { down_ms } => {
                let ids = self.cluster.lock().await.ids();
                self.log
                    .record(name, format!("kill -9 all nodes, down {down_ms} ms"));
                for v in &ids {
                    self.cluster.lock().await.kill(*v).await;
                }
                if self.wipe_on_kill_all {
                    let mut c = self.cluster.lock().await;
                    for v in &ids {
                        let _ = c.wipe_data(*v);
                    }
                    self.log
                        .record("wipe-data", format!("data directories of {ids:?} wiped"));
                }
                self.hold(*down_ms, stop).await;
                self.restart(&ids).await;
            }
            Fault::PauseLeader { ms } => {
                let l = self.leader_or_random(rng).await;
                self.log
                    .record(name, format!("SIGSTOP node {l} for {ms} ms"));
                self.cluster.lock().await.signal_pause(l, true).await;
                self.hold(*ms, stop).await;
                self.cluster.lock().await.signal_pause(l, false).await;
                self.log.record("heal", format!("SIGCONT node {l}"));
            }
            Fault::PauseWorker { worker, ms } => {
                // Recorded by the worker when it actually pauses.
                if let Some(tx) = self.worker_pauses.get((*worker as usize).saturating_sub(1)) {
                    let _ = tx.send(Duration::from_millis(*ms));
                }
            }
            Fault::IsolateLeader { mode, ms } => {
                let l = self.leader_or_random(rng).await;
                self.log
                    .record(name, format!("{mode:?} all links of node {l} for {ms} ms"));
                {
                    let c = self.cluster.lock().await;
                    for o in c.ids().into_iter().filter(|o| *o != l) {
                        c.set_link(l, o, *mode);
                        c.set_link(o, l, *mode);
                    }
                }
                self.hold(*ms, stop).await;
                self.heal_links().await;
            }
            Fault::SplitMinority { mode, ms } => {
                let mut ids = self.cluster.lock().await.ids();
                ids.shuffle(rng);
                let k = rng.gen_range(1..=(ids.len() - 1) / 2);
                let (minority, majority) = ids.split_at(k);
                self.log.record(
                    name,
                    format!("{mode:?} between {minority:?} and {majority:?} for {ms} ms"),
                );
                {
                    let c = self.cluster.lock().await;
                    for a in minority {
                        for b in majority {
                            c.set_link(*a, *b, *mode);
                            c.set_link(*b, *a, *mode);
                        }
                    }
                }
                self.hold(*ms, stop).await;
                self.heal_links().await;
            }
            Fault::OneWayLeader { outbound, ms } => {
                let l = self.leader_or_random(rng).await;
                let dir = if *outbound { "from" } else { "to" };
                self.log
                    .record(name, format!("drop links {dir} node {l} only, for {ms} ms"));
                {
                    let c = self.cluster.lock().await;
                    for o in c.ids().into_iter().filter(|o| *o != l) {
                        if *outbound {
                            c.set_link(l, o, LinkMode::Drop);
                        } else {
                            c.set_link(o, l, LinkMode::Drop);
                        }
                    }
                }
                self.hold(*ms, stop).await;
                self.heal_links().await;
            }
            Fault::ClockJumpLeader { offset_s, ms } => {
                let l = self.leader_or_random(rng).await;
                let total = {
                    let mut c = self.cluster.lock().await;
                    let _ = c.advance_clock(l, *offset_s);
                    c.clock_offset(l)
                };
                self.log.record(
                    name,
                    format!("clock of node {l} jumps {offset_s:+} s (now {total:+} s)"),
                );
                self.hold(*ms, stop).await;
            }
        }
    }

    async fn restart(&self, ids: &[u64]) {
        let mut c = self.cluster.lock().await;
        for id in ids {
            if let Err(e) = c.start(*id) {
                self.log
                    .record("heal", format!("restart of node {id} failed: {e}"));
            }
        }
        self.log.record("heal", format!("restarted nodes {ids:?}"));
    }

    async fn heal_links(&self) {
        self.cluster.lock().await.heal_links();
        self.log.record("heal", "links healed".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(seed: u64) -> ScheduleParams {
        ScheduleParams {
            seed,
            duration_ms: 60_000,
            workers: 6,
            ttl_ms: 1_500,
            election_timeout_ms: 500,
            worker_pause: WorkerPauses::for_run(false),
        }
    }

    #[test]
    fn the_schedule_is_reproducible_from_the_seed() {
        let all = [
            FaultFamily::Kill,
            FaultFamily::Pause,
            FaultFamily::Partition,
            FaultFamily::Clock,
        ];
        let a = schedule(&params(7), &all);
        assert!(a.len() > 5);
        assert_eq!(a, schedule(&params(7), &all));
        assert_ne!(a, schedule(&params(8), &all));
    }

    #[test]
    fn the_skip_fencing_control_pauses_workers_for_three_to_five_ttls() {
        let worker_pauses = |skip_fencing| {
            let p = ScheduleParams {
                worker_pause: WorkerPauses::for_run(skip_fencing),
                ..params(3)
            };
            schedule(&p, &[FaultFamily::Pause])
                .into_iter()
                .filter_map(|(_, f)| match f {
                    Fault::PauseWorker { ms, .. } => Some(ms),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let (usual, control) = (worker_pauses(false), worker_pauses(true));
        assert!(
            usual.len() > 3 && control.len() > 3,
            "{usual:?} {control:?}"
        );
        assert!(
            usual.iter().all(|ms| (2_250..4_500).contains(ms)),
            "{usual:?}"
        );
        assert!(
            control.iter().all(|ms| (4_500..7_500).contains(ms)),
            "{control:?}"
        );
    }

    #[test]
    fn only_the_chosen_families_are_scheduled() {
        let s = schedule(&params(1), &[FaultFamily::Partition]);
        assert!(s.iter().all(|(_, f)| matches!(
            f,
            Fault::IsolateLeader { .. } | Fault::SplitMinority { .. } | Fault::OneWayLeader { .. }
        )));
        assert_eq!(
            FaultFamily::parse_list("kill,clock"),
            Ok(vec![FaultFamily::Kill, FaultFamily::Clock])
        );
        assert!(FaultFamily::parse_list("kill,bogus").is_err());
    }
}
