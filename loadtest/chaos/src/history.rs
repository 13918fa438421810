//! The history model: every operation is an invoke event followed by a completion
//! event (`ok`, `fail`, or `info` when the outcome is unknown), as in Jepsen.
//! Times are monotonic nanoseconds since the start of the run.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// `POST /v1/locks/{key}:acquire` (a grant; creates the lease).
    Acquire,
    /// `POST /v1/locks/{key}:renew` (token-checked keepalive).
    Renew,
    /// `POST /v1/locks/{key}:release`.
    Release,
    /// `POST /v1/leases/{lease}:keepalive`.
    Keepalive,
    /// `POST /v1/elections/{key}:campaign` (a grant).
    Campaign,
    /// `POST /v1/elections/{key}:proclaim` (token-checked, like renew).
    Proclaim,
    /// `POST /v1/elections/{key}:resign` (like release).
    Resign,
    /// `PUT /v1/names/{key}` (a grant on first registration).
    Register,
    /// `DELETE /v1/names/{key}`.
    Unregister,
    /// A linearizable read of the key (`GET` lock, election or name).
    Read,
    /// A write to the harness's fenced register.
    Write,
    /// `POST /v1/semaphores/{key}:acquire` (a grant of `permits` of `limit`;
    /// creates the lease).
    AcquirePermits,
    /// `POST /v1/semaphores/{key}:renew` (token-checked keepalive).
    RenewPermits,
    /// `POST /v1/semaphores/{key}:release`.
    ReleasePermits,
}

impl OpKind {
    /// Whether a successful operation of this kind hands out a grant with a token.
    pub fn is_grant(self) -> bool {
        matches!(
            self,
            Self::Acquire | Self::Campaign | Self::Register | Self::AcquirePermits
        )
    }

    /// Whether this kind checks a token against the current holder (renew-like).
    pub fn is_token_checked(self) -> bool {
        matches!(
            self,
            Self::Renew
                | Self::Release
                | Self::Proclaim
                | Self::Resign
                | Self::RenewPermits
                | Self::ReleasePermits
        )
    }

    /// Whether a success of this kind proves the lease alive (restarts its TTL).
    pub fn refreshes_lease(self) -> bool {
        matches!(
            self,
            Self::Acquire
                | Self::Renew
                | Self::Keepalive
                | Self::Campaign
                | Self::Proclaim
                | Self::Register
                | Self::AcquirePermits
                | Self::RenewPermits
        )
    }

    /// Whether a success of this kind gives the holding up.
    pub fn gives_up(self) -> bool {
        matches!(
            self,
            Self::Release | Self::Resign | Self::Unregister | Self::ReleasePermits
        )
    }

    /// Whether this kind is about a semaphore.
    pub fn is_semaphore(self) -> bool {
        matches!(
            self,
            Self::AcquirePermits | Self::RenewPermits | Self::ReleasePermits
        )
    }
}

/// The type of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    /// The request is about to be sent.
    Invoke,
    /// The request succeeded.
    Ok,
    /// The request definitely did not take effect (a definite error answer).
    Fail,
    /// Unknown: timeout, connection error or 5xx; it may or may not take effect.
    Info,
}

/// One line of the JSON-lines history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Operation id (shared by the invoke and its completion).
    pub op: u64,
    /// The worker (process) that issued it.
    pub process: u32,
    /// Invoke or completion type.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// What the operation does.
    pub f: OpKind,
    /// Lock, election or name (or the register's key).
    pub key: String,
    /// Monotonic nanoseconds since the start of the run.
    pub time_ns: u64,
    /// Lease id (input for renew-like ops; output for grants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// Fencing token (input for token-checked ops and writes; output for grants and reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// Holder identity: unique per lease session, so reads can name the holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Lease TTL asked for or answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Error code of a failure (`lock_held`, `lease_not_found`, `timeout`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For reads: whether the key was held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<bool>,
    /// For register writes: the register's acceptance sequence number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The node (id) the request was sent to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u64>,
    /// Lock acquires of shared-lock keys: `shared` or `exclusive` (absent on the
    /// keys that are only ever locked exclusively, as before issue 17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Semaphore acquires: permits asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u64>,
    /// Semaphore acquires: the semaphore's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

impl Event {
    /// A bare event; fill the optional fields with struct update syntax.
    pub fn new(op: u64, process: u32, kind: EventType, f: OpKind, key: &str, time_ns: u64) -> Self {
        Self {
            op,
            process,
            kind,
            f,
            key: key.to_owned(),
            time_ns,
            lease: None,
            token: None,
            holder: None,
            ttl_ms: None,
            error: None,
            held: None,
            seq: None,
            node: None,
            mode: None,
            permits: None,
            limit: None,
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Succeeded.
    Ok,
    /// Definitely did not take effect.
    Fail,
    /// May or may not have taken effect, at any time after its invoke.
    Unknown,
}

/// An operation: an invoke paired with its completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Operation id.
    pub id: u64,
    /// Worker id.
    pub process: u32,
    /// What it does.
    pub f: OpKind,
    /// The key.
    pub key: String,
    /// Invoke time.
    pub invoke_ns: u64,
    /// Completion time (for unknown outcomes: when the client gave up).
    pub complete_ns: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// Lease (from the invoke, or the grant's answer).
    pub lease: Option<String>,
    /// Token (sent, or answered).
    pub token: Option<u64>,
    /// Holder identity.
    pub holder: Option<String>,
    /// TTL asked for.
    pub ttl_ms: Option<u64>,
    /// Error code.
    pub error: Option<String>,
    /// For reads: held or not.
    pub held: Option<bool>,
    /// For register writes: the acceptance sequence number.
    pub seq: Option<u64>,
    /// The node the request went to.
    pub node: Option<u64>,
    /// Lock mode asked for (`shared` / `exclusive`), if any.
    #[serde(default)]
    pub mode: Option<String>,
    /// Semaphore permits asked for.
    #[serde(default)]
    pub permits: Option<u64>,
    /// Semaphore limit.
    #[serde(default)]
    pub limit: Option<u64>,
}

impl Op {
    /// Whether this holding excludes every other holder (a lock acquired without
    /// `shared`, an election, a name).
    pub fn is_exclusive(&self) -> bool {
        self.mode.as_deref() != Some("shared")
    }

    /// Whether it succeeded.
    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// One line for explanations.
    pub fn describe(&self) -> String {
        let mut extra = String::new();
        if let Some(m) = &self.mode {
            extra.push_str(&format!(" mode={m}"));
        }
        if let (Some(p), Some(l)) = (self.permits, self.limit) {
            extra.push_str(&format!(" permits={p}/{l}"));
        }
        let line = format!(
            "op {} p{} {:?} {} [{:.3}s..{:.3}s] {:?} lease={} token={} holder={} err={} node={}",
            self.id,
            self.process,
            self.f,
            self.key,
            self.invoke_ns as f64 / 1e9,
            self.complete_ns as f64 / 1e9,
            self.outcome,
            self.lease.as_deref().map(short).unwrap_or("-"),
            self.token
                .map(|t| t.to_string())
                .unwrap_or_else(|| "-".into()),
            self.holder.as_deref().unwrap_or("-"),
            self.error.as_deref().unwrap_or("-"),
            self.node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into()),
        );
        line + &extra
    }
}

fn short(lease: &str) -> &str {
    lease.get(..8).unwrap_or(lease)
}

/// Errors reading a history.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file could not be read or written.
    #[error("history i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A line is not an event.
    #[error("history line {line}: {source}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What serde said.
        source: serde_json::Error,
    },
}

/// Pairs invokes with completions. An invoke without completion (the run ended
/// first) becomes an unknown outcome completing at `end_ns`.
pub fn pair(events: &[Event], end_ns: u64) -> Vec<Op> {
    let mut open: BTreeMap<u64, Op> = BTreeMap::new();
    let mut done = Vec::new();
    for e in events {
        match e.kind {
            EventType::Invoke => {
                open.insert(
                    e.op,
                    Op {
                        id: e.op,
                        process: e.process,
                        f: e.f,
                        key: e.key.clone(),
                        invoke_ns: e.time_ns,
                        complete_ns: end_ns,
                        outcome: Outcome::Unknown,
                        lease: e.lease.clone(),
                        token: e.token,
                        holder: e.holder.clone(),
                        ttl_ms: e.ttl_ms,
                        error: None,
                        held: None,
                        seq: None,
                        node: e.node,
                        mode: e.mode.clone(),
                        permits: e.permits,
                        limit: e.limit,
                    },
                );
            }
            EventType::Ok | EventType::Fail | EventType::Info => {
                let Some(mut op) = open.remove(&e.op) else {
                    continue;
                };
                op.complete_ns = e.time_ns;
                op.outcome = match e.kind {
                    EventType::Ok => Outcome::Ok,
                    EventType::Fail => Outcome::Fail,
                    _ => Outcome::Unknown,
                };
                if e.lease.is_some() {
                    op.lease = e.lease.clone();
                }
                if e.token.is_some() {
                    op.token = e.token;
                }
                if e.holder.is_some() {
                    op.holder = e.holder.clone();
                }
                if e.ttl_ms.is_some() {
                    op.ttl_ms = e.ttl_ms;
                }
                op.error = e.error.clone();
                op.held = e.held;
                op.seq = e.seq;
                done.push(op);
            }
        }
    }
    done.extend(open.into_values());
    done.sort_by_key(|o| (o.invoke_ns, o.id));
    done
}

/// Writes events as JSON lines.
pub fn write_jsonl(path: &Path, events: &[Event]) -> Result<(), HistoryError> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for e in events {
        serde_json::to_writer(&mut out, e).map_err(std::io::Error::other)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// Reads a JSON-lines history.
pub fn read_jsonl(path: &Path) -> Result<Vec<Event>, HistoryError> {
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut events = Vec::new();
    for (i, line) in file.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        events.push(
            serde_json::from_str(&line).map_err(|source| HistoryError::Parse {
                line: i + 1,
                source,
            })?,
        );
    }
    Ok(events)
}
