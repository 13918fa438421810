//! `baton lock`, `baton semaphore` and `baton elect`: hold a lock (exclusive
//! or shared), permits of a semaphore, or an election, and run a command only
//! while it is held.
//!
//! The rules that make this safe, and that `etcdctl lock` and `consul lock`
//! lack (README.md, "Running a command under a lock"):
//! - the holding is checked every ttl/3 (`:renew` for a lock or a semaphore,
//!   a keepalive and a leader check for an election), and it counts as lost when a check is
//!   refused, or when no check has succeeded by `send time + ttl - grace`, so
//!   the child is stopped before the server can expire the lease;
//! - on loss the child's process group gets SIGTERM, then SIGKILL after the
//!   grace (less when the loss is noticed late, e.g. after this process was
//!   stopped), and the lock is acquired with a lock delay longer than that
//!   grace, so a successor is not granted while the child may still run;
//! - the child gets its fencing token (`BATON_FENCING_TOKEN`) to pass to what
//!   it writes: the only protection that holds when everything else is late.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use baton_api::elections::{CampaignBody, ResignBody};
use baton_api::leases::CreateLeaseBody;
use baton_api::locks::{AcquireBody, HolderBody, Mode};
use baton_api::semaphores::SemaphoreAcquireBody;
use rustix::process::{Pid, Signal as Sig};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, watch};

use crate::client::{Client, ClientError};
use crate::client_cli::{exit_code, report, HoldArgs, Output};

/// The longest wait asked for in one request (the server's default
/// `--max-wait-ms`); a longer or endless wait asks again.
const WAIT_CHUNK_MS: u64 = 300_000;
/// The chunk used when a server is configured with a lower maximum.
const SMALL_WAIT_CHUNK_MS: u64 = 30_000;

/// What is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A lock (`baton lock`, `--shared` for a reader).
    Lock {
        /// Held shared rather than exclusive.
        shared: bool,
    },
    /// Permits of a counting semaphore (`baton semaphore`).
    Semaphore {
        /// The semaphore's limit.
        limit: u32,
        /// Permits to hold.
        permits: u32,
    },
    /// An election (`baton elect`).
    Election,
}

impl Target {
    fn noun(self) -> &'static str {
        match self {
            Target::Lock { .. } => "lock",
            Target::Semaphore { .. } => "permits of semaphore",
            Target::Election => "leadership of",
        }
    }
}

/// What a liveness check found.
#[derive(Debug)]
enum Liveness {
    /// A check sent at this instant succeeded.
    Alive(Instant),
    /// The server refused: the holding is gone.
    Refused(String),
}

/// How the supervised run ended.
enum Ending {
    /// The child exited on its own (or after a forwarded signal).
    Exited(std::process::ExitStatus),
    /// A signal ended a run without a child.
    Interrupted,
    /// The holding was lost.
    Lost(String),
}

/// The grant being held.
struct Holding {
    lease_id: String,
    token: u64,
}

/// Runs `baton lock` / `baton semaphore` / `baton elect`: returns the exit code.
pub async fn run(client: Client, target: Target, args: HoldArgs, output: Output) -> ExitCode {
    match Supervisor::new(client, target, args) {
        Ok(supervisor) => supervisor.run(output).await,
        Err(message) => {
            eprintln!("baton: {message}");
            ExitCode::from(2)
        }
    }
}

struct Supervisor {
    client: Client,
    target: Target,
    args: HoldArgs,
    ttl: Duration,
    grace: Duration,
    lock_delay: Duration,
    holder: String,
}

impl Supervisor {
    fn new(client: Client, target: Target, args: HoldArgs) -> Result<Supervisor, String> {
        let ttl = Duration::from_millis(args.ttl_ms);
        let grace = Duration::from_millis(args.kill_grace_ms);
        // The deadline is ttl - grace after a check's send time and checks go
        // out every ttl/3: with a grace over half the TTL, one slow answer
        // would already count as a loss.
        if grace * 2 > ttl {
            return Err(format!(
                "--kill-grace-ms ({}) must be at most half of --ttl-ms ({})",
                args.kill_grace_ms, args.ttl_ms
            ));
        }
        let lock_delay = Duration::from_millis(
            args.lock_delay_ms
                .unwrap_or(args.kill_grace_ms.saturating_add(1_000)),
        );
        if matches!(target, Target::Lock { .. }) && lock_delay < grace {
            return Err("--lock-delay-ms must be at least --kill-grace-ms".into());
        }
        let holder = args.holder.clone().unwrap_or_else(default_holder);
        Ok(Supervisor {
            client,
            target,
            args,
            ttl,
            grace,
            lock_delay,
            holder,
        })
    }

    async fn run(self, output: Output) -> ExitCode {
        let mut signals = match Signals::new() {
            Ok(signals) => signals,
            Err(error) => {
                eprintln!("baton: cannot listen for signals: {error}");
                return ExitCode::FAILURE;
            }
        };
        let sent = Instant::now();
        let lease = match self
            .client
            .create_lease(&CreateLeaseBody {
                ttl_ms: Some(self.args.ttl_ms),
                holder: Some(self.holder.clone()),
            })
            .await
        {
            Ok(lease) => lease,
            Err(error) => return report(&error),
        };
        let (token_tx, token_rx) = watch::channel(None);
        let (alive_tx, mut alive_rx) = mpsc::channel(16);
        let checker = tokio::spawn(check_loop(
            self.client.clone(),
            self.target,
            self.args.name.clone(),
            lease.lease_id.clone(),
            self.ttl / 3,
            token_rx,
            alive_tx,
        ));
        let mut last_alive = sent;
        let granted = tokio::select! {
            granted = self.obtain(&lease.lease_id) => granted,
            refused = wait_refused(&mut alive_rx, &mut last_alive) => Err(Obtain::Failed(format!("the lease was lost while waiting: {refused}"))),
            _ = signals.any() => Err(Obtain::Interrupted),
        };
        let (token, answer) = match granted {
            Ok(granted) => granted,
            Err(failure) => {
                checker.abort();
                self.revoke(&lease.lease_id).await;
                return match failure {
                    Obtain::NotAcquired(error) => {
                        eprintln!(
                            "baton: {} {} not obtained in time: {error}",
                            self.target.noun(),
                            self.args.name
                        );
                        ExitCode::from(exit_code::NOT_ACQUIRED)
                    }
                    Obtain::Error(error) => report(&error),
                    Obtain::Failed(message) => {
                        eprintln!("baton: {message}");
                        ExitCode::FAILURE
                    }
                    Obtain::Interrupted => ExitCode::from(130),
                };
            }
        };
        let _ = token_tx.send(Some(token));
        let holding = Holding {
            lease_id: lease.lease_id.clone(),
            token,
        };
        let mut child = None;
        if self.args.command.is_empty() {
            self.print_grant(&answer, output);
        } else {
            match self.spawn(&holding) {
                Ok(spawned) => child = Some(spawned),
                Err(error) => {
                    eprintln!("baton: cannot run {:?}: {error}", self.args.command[0]);
                    checker.abort();
                    self.give_up(&holding).await;
                    return ExitCode::from(127);
                }
            }
        }
        let ending = self
            .hold(child.as_mut(), &mut alive_rx, &mut signals, last_alive)
            .await;
        checker.abort();
        match ending {
            Ending::Exited(status) => {
                self.give_up(&holding).await;
                ExitCode::from(status_code(status))
            }
            Ending::Interrupted => {
                self.give_up(&holding).await;
                ExitCode::SUCCESS
            }
            Ending::Lost(why) => {
                eprintln!(
                    "baton: {} {} lost: {why}",
                    self.target.noun(),
                    self.args.name
                );
                // Best effort: the lease is most likely gone already.
                self.give_up(&holding).await;
                ExitCode::from(exit_code::LOST)
            }
        }
    }

    /// Acquires (or campaigns), waiting as asked: the fencing token and the
    /// server's answer.
    async fn obtain(&self, lease_id: &str) -> Result<(u64, serde_json::Value), Obtain> {
        let deadline = self.args.wait_budget().map(|wait| Instant::now() + wait);
        let mut chunk = WAIT_CHUNK_MS;
        loop {
            let remaining = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => Duration::from_millis(chunk),
            };
            let wait_ms = (remaining.as_millis() as u64).min(chunk);
            let asked = Instant::now();
            let answer = match self.target {
                Target::Lock { shared } => self
                    .client
                    .acquire(
                        &self.args.name,
                        &AcquireBody {
                            lease_id: Some(lease_id.to_owned()),
                            ttl_ms: None,
                            holder: Some(self.holder.clone()),
                            wait_ms: Some(wait_ms),
                            lock_delay_ms: Some(self.lock_delay.as_millis() as u64),
                            mode: shared.then_some(Mode::Shared),
                        },
                    )
                    .await
                    .map(|grant| (grant.token, serde_json::to_value(grant).unwrap_or_default())),
                Target::Semaphore { limit, permits } => self
                    .client
                    .acquire_permits(
                        &self.args.name,
                        &SemaphoreAcquireBody {
                            limit,
                            permits: Some(permits),
                            lease_id: Some(lease_id.to_owned()),
                            ttl_ms: None,
                            holder: Some(self.holder.clone()),
                            wait_ms: Some(wait_ms),
                        },
                    )
                    .await
                    .map(|grant| (grant.token, serde_json::to_value(grant).unwrap_or_default())),
                Target::Election => self
                    .client
                    .campaign(
                        &self.args.name,
                        &CampaignBody {
                            lease_id: Some(lease_id.to_owned()),
                            ttl_ms: None,
                            candidate: self.holder.clone(),
                            value: self.args.value.clone().unwrap_or(serde_json::Value::Null),
                            wait_ms: Some(wait_ms),
                        },
                    )
                    .await
                    .map(|elected| {
                        (
                            elected.token,
                            serde_json::to_value(elected).unwrap_or_default(),
                        )
                    }),
            };
            match answer {
                Ok(granted) => return Ok(granted),
                Err(error)
                    if matches!(
                        error.code(),
                        Some("lock_held" | "not_elected" | "semaphore_full")
                    ) =>
                {
                    let out_of_time = deadline.is_some_and(|d| Instant::now() >= d);
                    if out_of_time {
                        return Err(Obtain::NotAcquired(error));
                    }
                    // Refused long before the wait asked for ended: never spin.
                    if asked.elapsed() < Duration::from_millis(wait_ms.min(100)) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                // A server with a lower --max-wait-ms: wait in smaller pieces.
                Err(error)
                    if error.code() == Some("invalid_wait") && chunk > SMALL_WAIT_CHUNK_MS =>
                {
                    chunk = SMALL_WAIT_CHUNK_MS;
                }
                Err(error) => return Err(Obtain::Error(error)),
            }
        }
    }

    /// Holds until the child exits, a signal ends a child-less run, or the
    /// holding is lost.
    async fn hold(
        &self,
        mut child: Option<&mut Running>,
        alive_rx: &mut mpsc::Receiver<Liveness>,
        signals: &mut Signals,
        mut last_alive: Instant,
    ) -> Ending {
        let limit = self.ttl - self.grace;
        loop {
            let deadline = last_alive + limit;
            let step = tokio::select! {
                status = wait_child(child.as_deref_mut()) => Step::Exited(status),
                liveness = alive_rx.recv() => Step::Checked(liveness),
                () = tokio::time::sleep_until(deadline.into()) => Step::Deadline,
                signal = signals.any() => Step::Signal(signal),
            };
            let lost = match step {
                Step::Exited(Ok(status)) => return Ending::Exited(status),
                Step::Exited(Err(error)) => format!("cannot wait for the command: {error}"),
                // A check sent after the deadline proves nothing about the gap
                // before it (this process may have been stopped).
                Step::Checked(Some(Liveness::Alive(sent))) if sent >= deadline => {
                    "no check succeeded in time".to_owned()
                }
                Step::Checked(Some(Liveness::Alive(sent))) => {
                    last_alive = last_alive.max(sent);
                    continue;
                }
                Step::Checked(Some(Liveness::Refused(why))) => why,
                Step::Checked(None) => "the checker stopped".to_owned(),
                Step::Deadline => format!("no check succeeded within {} ms", limit.as_millis()),
                Step::Signal(signal) => match child.as_deref() {
                    Some(child) => {
                        child.signal(signal);
                        continue;
                    }
                    None => return Ending::Interrupted,
                },
            };
            if let Some(child) = child {
                self.stop(child, last_alive).await;
            }
            return Ending::Lost(lost);
        }
    }

    /// SIGTERM to the child's group, SIGKILL after the grace, or sooner when
    /// the loss was noticed late: the server's expiry plus the lock delay is
    /// when a successor may be granted.
    async fn stop(&self, child: &mut Running, last_alive: Instant) {
        let successor_at = last_alive + self.ttl + self.successor_delay();
        let budget = successor_at
            .saturating_duration_since(Instant::now())
            .saturating_sub(Duration::from_millis(100))
            .min(self.grace);
        child.signal(Sig::TERM);
        if tokio::time::timeout(budget, child.child.wait())
            .await
            .is_err()
        {
            child.signal(Sig::KILL);
            let _ = child.child.wait().await;
        }
        // What the command started in its group goes with it.
        child.signal(Sig::KILL);
    }

    fn successor_delay(&self) -> Duration {
        match self.target {
            Target::Lock { .. } => self.lock_delay,
            // Neither has a lock delay: a successor may come at the expiry.
            Target::Semaphore { .. } | Target::Election => Duration::ZERO,
        }
    }

    fn spawn(&self, holding: &Holding) -> std::io::Result<Running> {
        let mut command = Command::new(&self.args.command[0]);
        command
            .args(&self.args.command[1..])
            .process_group(0)
            .env("BATON_ENDPOINT", self.client.endpoint())
            .env("BATON_FENCING_TOKEN", holding.token.to_string())
            .env_remove("BATON_LEASE_ID");
        match self.target {
            Target::Lock { .. } => command.env("BATON_LOCK_NAME", &self.args.name),
            Target::Semaphore { .. } => command.env("BATON_SEMAPHORE_NAME", &self.args.name),
            Target::Election => command.env("BATON_ELECTION_NAME", &self.args.name),
        };
        if self.args.export_lease_id {
            command.env("BATON_LEASE_ID", &holding.lease_id);
        }
        let child = command.spawn()?;
        // The group's id is the child's pid, kept: after the child is reaped
        // its id is gone, and its own children may still be in the group.
        let group = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(Pid::from_raw);
        Ok(Running { child, group })
    }

    /// Prints the server's answer to the acquire (or campaign).
    fn print_grant(&self, answer: &serde_json::Value, output: Output) {
        use std::io::Write;
        let text = |key: &str| match &answer[key] {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        match (output, self.target) {
            (Output::Json, _) => println!("{answer}"),
            (Output::Table, Target::Lock { .. }) => {
                let mut table = crate::table::Table::new(&[
                    "NAME", "MODE", "TOKEN", "LEASE", "HOLDER", "REVISION",
                ]);
                table.row(
                    ["name", "mode", "token", "lease_id", "holder", "revision"]
                        .map(text)
                        .to_vec(),
                );
                print!("{table}");
            }
            (Output::Table, Target::Semaphore { .. }) => {
                let mut table = crate::table::Table::new(&[
                    "NAME", "PERMITS", "LIMIT", "TOKEN", "LEASE", "HOLDER", "REVISION",
                ]);
                table.row(
                    [
                        "name", "permits", "limit", "token", "lease_id", "holder", "revision",
                    ]
                    .map(text)
                    .to_vec(),
                );
                print!("{table}");
            }
            (Output::Table, Target::Election) => {
                let mut table = crate::table::Table::new(&["NAME", "TOKEN", "LEASE", "VALUE"]);
                table.row(["name", "token", "lease_id", "value"].map(text).to_vec());
                print!("{table}");
            }
        }
        let _ = std::io::stdout().flush();
    }

    /// Releases (or resigns) and revokes the lease; failures are reported,
    /// not fatal: the lease's expiry releases everything anyway.
    async fn give_up(&self, holding: &Holding) {
        let body = HolderBody {
            lease_id: holding.lease_id.clone(),
            token: holding.token,
        };
        let released = match self.target {
            Target::Lock { .. } => self.client.release(&self.args.name, &body).await.map(drop),
            Target::Semaphore { .. } => self
                .client
                .release_permits(&self.args.name, &body)
                .await
                .map(drop),
            Target::Election => self
                .client
                .resign(
                    &self.args.name,
                    &ResignBody {
                        lease_id: body.lease_id.clone(),
                        token: body.token,
                    },
                )
                .await
                .map(drop),
        };
        if let Err(error) = released {
            if !matches!(
                error.code(),
                Some("lock_lost" | "permits_lost" | "not_leader" | "lease_not_found")
            ) {
                eprintln!("baton: releasing {}: {error}", self.args.name);
            }
        }
        self.revoke(&holding.lease_id).await;
    }

    async fn revoke(&self, lease_id: &str) {
        if let Err(error) = self.client.revoke_lease(lease_id).await {
            if error.code() != Some("lease_not_found") {
                eprintln!("baton: revoking the lease: {error}");
            }
        }
    }
}

/// Why no grant came.
enum Obtain {
    /// The wait ran out.
    NotAcquired(ClientError),
    /// The server refused otherwise.
    Error(ClientError),
    /// Something else failed.
    Failed(String),
    /// SIGINT or SIGTERM before the grant.
    Interrupted,
}

/// Checks the holding every `period` and reports each outcome. Before the
/// grant (no token yet) it keeps the lease alive; after it, a lock is renewed
/// (which checks the token still holds it and restarts the lease's TTL) and
/// an election's lease is kept alive and its leader checked.
async fn check_loop(
    client: Client,
    target: Target,
    name: String,
    lease_id: String,
    period: Duration,
    granted: watch::Receiver<Option<u64>>,
    report: mpsc::Sender<Liveness>,
) {
    loop {
        let sent = Instant::now();
        let token = *granted.borrow();
        let checked = check(&client, target, &name, &lease_id, token, period).await;
        let liveness = match checked {
            Ok(()) => Liveness::Alive(sent),
            Err(Check::Refused(why)) => Liveness::Refused(why),
            // Unknown: try again soon; the deadline decides.
            Err(Check::Unknown) => {
                tokio::time::sleep(period / 4).await;
                continue;
            }
        };
        let refused = matches!(liveness, Liveness::Refused(_));
        if report.send(liveness).await.is_err() || refused {
            return;
        }
        tokio::time::sleep_until((sent + period).into()).await;
    }
}

enum Check {
    Refused(String),
    Unknown,
}

async fn check(
    client: &Client,
    target: Target,
    name: &str,
    lease_id: &str,
    token: Option<u64>,
    timeout: Duration,
) -> Result<(), Check> {
    match (target, token) {
        (Target::Lock { .. }, Some(token)) => {
            let body = HolderBody {
                lease_id: lease_id.to_owned(),
                token,
            };
            client
                .renew(name, &body, timeout)
                .await
                .map(drop)
                .map_err(classify)
        }
        (Target::Semaphore { .. }, Some(token)) => {
            let body = HolderBody {
                lease_id: lease_id.to_owned(),
                token,
            };
            client
                .renew_permits(name, &body, timeout)
                .await
                .map(drop)
                .map_err(classify)
        }
        (Target::Election, Some(token)) => {
            client
                .keepalive(lease_id, timeout)
                .await
                .map_err(classify)?;
            let election = client.get_election(name).await.map_err(classify)?;
            if election.leader.token == token {
                Ok(())
            } else {
                Err(Check::Refused(format!(
                    "{} leads now (token {})",
                    election.leader.candidate, election.leader.token
                )))
            }
        }
        (_, None) => client
            .keepalive(lease_id, timeout)
            .await
            .map(drop)
            .map_err(classify),
    }
}

/// A refusal (4xx other than 429) means the holding is gone; anything else
/// (503, a timeout, a refused connection) says nothing yet.
fn classify(error: ClientError) -> Check {
    match &error {
        ClientError::Problem(problem)
            if (400..500).contains(&problem.status) && problem.status != 429 =>
        {
            Check::Refused(error.to_string())
        }
        _ => Check::Unknown,
    }
}

async fn wait_refused(alive_rx: &mut mpsc::Receiver<Liveness>, last_alive: &mut Instant) -> String {
    loop {
        match alive_rx.recv().await {
            Some(Liveness::Alive(sent)) => *last_alive = (*last_alive).max(sent),
            Some(Liveness::Refused(why)) => return why,
            None => return "the checker stopped".into(),
        }
    }
}

async fn wait_child(child: Option<&mut Running>) -> std::io::Result<std::process::ExitStatus> {
    match child {
        Some(running) => running.child.wait().await,
        None => std::future::pending().await,
    }
}

/// One step of the holding loop.
enum Step {
    Exited(std::io::Result<std::process::ExitStatus>),
    Checked(Option<Liveness>),
    Deadline,
    Signal(Sig),
}

/// The supervised command, leader of its own process group.
struct Running {
    child: Child,
    group: Option<Pid>,
}

impl Running {
    /// Signals the whole group; a group that is already gone is not an error.
    fn signal(&self, signal: Sig) {
        if let Some(group) = self.group {
            let _ = rustix::process::kill_process_group(group, signal);
        }
    }
}

/// The signals forwarded to the child (or that end a run without one).
pub(crate) struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    pub(crate) fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    pub(crate) async fn any(&mut self) -> Sig {
        tokio::select! {
            _ = self.interrupt.recv() => Sig::INT,
            _ = self.terminate.recv() => Sig::TERM,
            _ = self.hangup.recv() => Sig::HUP,
        }
    }
}

/// The exit code that reports the child's status: its own code, or 128 + the
/// signal that killed it (as shells do).
fn status_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(1),
        (None, None) => 1,
    }
}

fn default_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}:{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn the_child_status_passes_through_and_signals_become_128_plus_n() {
        assert_eq!(status_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(status_code(std::process::ExitStatus::from_raw(0)), 0);
        assert_eq!(status_code(std::process::ExitStatus::from_raw(9)), 137);
        assert_eq!(status_code(std::process::ExitStatus::from_raw(15)), 143);
    }

    fn problem(status: u16, code: &str) -> ClientError {
        ClientError::Problem(Box::new(baton_api::error::Problem {
            status,
            code: code.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn only_a_refusal_ends_a_holding_and_outages_leave_it_to_the_deadline() {
        for refused in [
            problem(409, "lock_lost"),
            problem(404, "lease_not_found"),
            problem(403, "forbidden"),
        ] {
            assert!(matches!(classify(refused), Check::Refused(_)));
        }
        for unknown in [
            problem(503, "unavailable"),
            problem(429, "quota_exceeded"),
            ClientError::Transport {
                endpoint: "http://127.0.0.1:1".into(),
                reason: "connection refused".into(),
            },
        ] {
            assert!(matches!(classify(unknown), Check::Unknown));
        }
    }

    #[test]
    fn a_grace_over_half_the_ttl_is_refused() {
        let client = Client::new("http://127.0.0.1:1", None, None).expect("client");
        let args = |ttl_ms, kill_grace_ms| HoldArgs {
            name: "a".into(),
            ttl_ms,
            wait_ms: None,
            no_wait: false,
            holder: None,
            kill_grace_ms,
            lock_delay_ms: None,
            export_lease_id: false,
            value: None,
            command: vec![],
        };
        assert!(Supervisor::new(
            client.clone(),
            Target::Lock { shared: false },
            args(2_000, 1_001)
        )
        .is_err());
        let supervisor = Supervisor::new(client, Target::Lock { shared: false }, args(2_000, 500))
            .expect("valid");
        assert_eq!(supervisor.lock_delay, Duration::from_millis(1_500));
    }
}
