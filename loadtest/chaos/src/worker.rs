//! Client workers: each runs lock, election and name sessions with short TTLs
//! against random nodes, writes to the fenced register while it believes it holds,
//! and records every operation in the history. Issue 17: also shared-lock sessions
//! (readers and writers of one lock; only writers write to the register) and
//! semaphore sessions (1 or 2 permits of a small semaphore).

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::client::{str_field, u64_field, BatonClient, Reply};
use crate::history::{Event, EventType, OpKind};
use crate::nemesis::NemesisLog;
use crate::recorder::Recorder;
use crate::register::{FencedRegister, WriteResult};

/// Settings shared by every worker.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Lease TTL of every session.
    pub ttl_ms: u64,
    /// Lock names.
    pub locks: Vec<String>,
    /// Election names.
    pub elections: Vec<String>,
    /// Registry names.
    pub names: Vec<String>,
    /// Locks taken shared (readers) or exclusive (writers), issue 17.
    pub rw_locks: Vec<String>,
    /// Semaphores, each of `semaphore_limit` permits.
    pub semaphores: Vec<String>,
    /// The semaphores' limit.
    pub semaphore_limit: u64,
    /// Negative control: write to the register even when the lease is believed lost.
    pub skip_fencing: bool,
    /// API URLs of every node.
    pub urls: Vec<String>,
    /// Run seed (each worker derives its own).
    pub seed: u64,
}

/// What a session holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lock,
    Election,
    Name,
    /// A lock of `rw_locks`, in the session's mode.
    RwLock,
    /// Permits of a semaphore.
    Semaphore,
}

struct Holding {
    kind: Kind,
    key: String,
    holder: String,
    lease: String,
    token: u64,
    /// When the last successful TTL refresh was sent (the client's safe bound).
    sent: Instant,
    /// What a grant asked for beyond the key.
    ask: Ask,
}

/// The mode of a lock acquire, or the permits of a semaphore acquire (issue 17).
#[derive(Debug, Clone, Copy, Default)]
struct Ask {
    /// `Some("shared" | "exclusive")` on `rw_locks`.
    mode: Option<&'static str>,
    /// Semaphores: (permits, limit).
    permits: Option<(u64, u64)>,
}

impl Ask {
    /// Whether the holder may write to the fenced register: exclusive holders
    /// only (readers share the lock, semaphore holders are several).
    fn writes(self) -> bool {
        self.mode != Some("shared") && self.permits.is_none()
    }

    fn record(self, e: &mut Event) {
        e.mode = self.mode.map(str::to_owned);
        if let Some((p, l)) = self.permits {
            e.permits = Some(p);
            e.limit = Some(l);
        }
    }
}

/// One worker (a Jepsen "process").
pub struct Worker {
    id: u32,
    cfg: Arc<WorkerConfig>,
    rng: StdRng,
    rec: Recorder,
    reg: FencedRegister,
    http: BatonClient,
    pauses: mpsc::UnboundedReceiver<Duration>,
    stop: watch::Receiver<bool>,
    nemesis: NemesisLog,
    sessions: u64,
}

/// Per-request timeout beyond the wait.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(2000);

impl Worker {
    /// A worker with id `id` (>= 1; 0 is the harness's final read).
    pub fn new(
        id: u32,
        cfg: Arc<WorkerConfig>,
        rec: Recorder,
        reg: FencedRegister,
        pauses: mpsc::UnboundedReceiver<Duration>,
        stop: watch::Receiver<bool>,
        nemesis: NemesisLog,
    ) -> Self {
        let rng =
            StdRng::seed_from_u64(cfg.seed.wrapping_mul(1_000_003).wrapping_add(u64::from(id)));
        Self {
            id,
            cfg,
            rng,
            rec,
            reg,
            http: BatonClient::new(REQUEST_TIMEOUT),
            pauses,
            stop,
            nemesis,
            sessions: 0,
        }
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps, waking early on stop.
    async fn sleep(&mut self, d: Duration) {
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }

    /// A random node: (id, API URL).
    fn url(&mut self) -> (u64, String) {
        let i = self.rng.gen_range(0..self.cfg.urls.len());
        (i as u64 + 1, self.cfg.urls[i].clone())
    }

    fn pick(&mut self, keys: &[String]) -> String {
        keys[self.rng.gen_range(0..keys.len())].clone()
    }

    /// Runs until stopped.
    pub async fn run(mut self) {
        while !self.stopped() {
            let r = self.rng.gen_range(0..100);
            if r < 10 {
                let (kind, key) = match self.rng.gen_range(0..3) {
                    0 => (Kind::Lock, self.pick(&self.cfg.locks.clone())),
                    1 => (Kind::Election, self.pick(&self.cfg.elections.clone())),
                    _ => (Kind::Name, self.pick(&self.cfg.names.clone())),
                };
                self.read(kind, &key).await;
            } else if r < 35 {
                let key = self.pick(&self.cfg.locks.clone());
                self.session(Kind::Lock, key).await;
            } else if r < 50 && !self.cfg.rw_locks.is_empty() {
                let key = self.pick(&self.cfg.rw_locks.clone());
                self.session(Kind::RwLock, key).await;
            } else if r < 65 && !self.cfg.semaphores.is_empty() {
                let key = self.pick(&self.cfg.semaphores.clone());
                self.session(Kind::Semaphore, key).await;
            } else if r < 82 {
                let key = self.pick(&self.cfg.elections.clone());
                self.session(Kind::Election, key).await;
            } else {
                let key = self.pick(&self.cfg.names.clone());
                self.session(Kind::Name, key).await;
            }
            let d = Duration::from_millis(self.rng.gen_range(20..200));
            self.sleep(d).await;
        }
    }

    async fn session(&mut self, kind: Kind, key: String) {
        self.sessions += 1;
        let holder = format!("p{}-s{}", self.id, self.sessions);
        let ttl = self.cfg.ttl_ms;
        let wait_ms = if self.rng.gen_bool(0.5) {
            0
        } else {
            self.rng.gen_range(100..1000)
        };
        let ask = match kind {
            // One writer in four.
            Kind::RwLock => Ask {
                mode: Some(if self.rng.gen_bool(0.25) {
                    "exclusive"
                } else {
                    "shared"
                }),
                permits: None,
            },
            Kind::Semaphore => {
                let limit = self.cfg.semaphore_limit.max(1);
                Ask {
                    mode: None,
                    permits: Some((self.rng.gen_range(1..=limit.min(2)), limit)),
                }
            }
            _ => Ask::default(),
        };
        let sent = Instant::now();
        let Some((lease, token)) = self.grant(kind, &key, &holder, wait_ms, ask).await else {
            let d = Duration::from_millis(self.rng.gen_range(50..300));
            self.sleep(d).await;
            return;
        };
        let mut h = Holding {
            kind,
            key,
            holder,
            lease,
            token,
            sent,
            ask,
        };
        let rounds = self.rng.gen_range(1..=6);
        let mut lost = false;
        for _ in 0..rounds {
            let d = Duration::from_millis(ttl / 4 + self.rng.gen_range(0..ttl / 8));
            self.sleep(d).await;
            if self.stopped() {
                break;
            }
            let believe = h.sent.elapsed() < Duration::from_millis(ttl);
            if (believe || self.cfg.skip_fencing) && h.ask.writes() {
                self.pause_point(&h).await;
                self.write(&h).await;
            }
            if !self.refresh(&mut h).await {
                lost = true;
                break;
            }
        }
        if lost {
            return;
        }
        if self.stopped() {
            // Keep the holding alive right before the final read checks it.
            self.refresh(&mut h).await;
            return;
        }
        if self.rng.gen_bool(0.85) {
            self.give_up(&h).await;
        }
    }

    /// Where a client pause (GC, swap, a stopped VM) hurts most: after deciding it
    /// holds the lock, before acting on the resource.
    async fn pause_point(&mut self, h: &Holding) {
        if let Ok(d) = self.pauses.try_recv() {
            self.nemesis.record(
                "pause-worker",
                format!(
                    "p{} paused {} ms holding {} token {}",
                    self.id,
                    d.as_millis(),
                    h.key,
                    h.token
                ),
            );
            tokio::time::sleep(d).await;
        }
    }

    async fn write(&mut self, h: &Holding) {
        let p = self.rec.invoke(self.id, OpKind::Write, &h.key, |e| {
            e.token = Some(h.token);
            e.holder = Some(h.holder.clone());
            e.lease = Some(h.lease.clone());
        });
        match self.reg.write(&h.key, h.token, self.id) {
            WriteResult::Accepted(seq) => {
                p.complete(EventType::Ok, |e| {
                    e.seq = Some(seq);
                    e.token = Some(h.token);
                });
            }
            WriteResult::Stale { highest } => {
                p.complete(EventType::Fail, |e| {
                    e.error = Some(format!("stale_token(highest {highest})"))
                });
            }
        }
    }

    /// The grant; returns (lease, token) on success.
    async fn grant(
        &mut self,
        kind: Kind,
        key: &str,
        holder: &str,
        wait_ms: u64,
        ask: Ask,
    ) -> Option<(String, u64)> {
        let ttl = self.cfg.ttl_ms;
        let (node, url) = self.url();
        let timeout = REQUEST_TIMEOUT + Duration::from_millis(wait_ms);
        let (f, path, body) = match kind {
            Kind::Lock => (
                OpKind::Acquire,
                format!("/v1/locks/{key}:acquire"),
                json!({"ttl_ms": ttl, "holder": holder, "wait_ms": wait_ms}),
            ),
            Kind::RwLock => (
                OpKind::Acquire,
                format!("/v1/locks/{key}:acquire"),
                json!({"ttl_ms": ttl, "holder": holder, "wait_ms": wait_ms,
                       "mode": ask.mode.unwrap_or("exclusive")}),
            ),
            Kind::Semaphore => {
                let (permits, limit) = ask.permits.unwrap_or((1, 1));
                (
                    OpKind::AcquirePermits,
                    format!("/v1/semaphores/{key}:acquire"),
                    json!({"ttl_ms": ttl, "holder": holder, "wait_ms": wait_ms,
                           "limit": limit, "permits": permits}),
                )
            }
            Kind::Election => (
                OpKind::Campaign,
                format!("/v1/elections/{key}:campaign"),
                json!({"ttl_ms": ttl, "candidate": holder, "value": {"p": self.id}, "wait_ms": wait_ms}),
            ),
            Kind::Name => (
                OpKind::Register,
                format!("/v1/names/{key}"),
                json!({"ttl_ms": ttl, "holder": holder, "value": {"p": self.id}}),
            ),
        };
        let p = self.rec.invoke(self.id, f, key, |e| {
            e.holder = Some(holder.to_owned());
            e.ttl_ms = Some(ttl);
            e.node = Some(node);
            ask.record(e);
        });
        let reply = if kind == Kind::Name {
            self.http.put(&url, &path, &body, timeout).await
        } else {
            self.http.post(&url, &path, &body, timeout).await
        };
        let mut out = None;
        complete(p, &reply, |e, body| {
            e.lease = str_field(body, "lease_id");
            e.token = u64_field(body, "token");
            if let (Some(l), Some(t)) = (e.lease.clone(), e.token) {
                out = Some((l, t));
            }
        });
        out
    }

    /// Keeps the holding alive; false when it is definitely lost.
    async fn refresh(&mut self, h: &mut Holding) -> bool {
        let sent = Instant::now();
        let (node, url) = self.url();
        let (f, reply) = match h.kind {
            Kind::Semaphore => {
                let body = json!({"lease_id": h.lease, "token": h.token});
                let path = format!("/v1/semaphores/{}:renew", h.key);
                let p = self.invoke_on(OpKind::RenewPermits, h, true, node);
                let r = self.http.post(&url, &path, &body, REQUEST_TIMEOUT).await;
                complete(p, &r, |_, _| {});
                (OpKind::RenewPermits, r)
            }
            Kind::Lock | Kind::RwLock => {
                let body = json!({"lease_id": h.lease, "token": h.token});
                let path = format!("/v1/locks/{}:renew", h.key);
                let p = self.invoke_on(OpKind::Renew, h, true, node);
                let r = self.http.post(&url, &path, &body, REQUEST_TIMEOUT).await;
                complete(p, &r, |_, _| {});
                (OpKind::Renew, r)
            }
            Kind::Election | Kind::Name if self.rng.gen_bool(0.7) => {
                let path = format!("/v1/leases/{}:keepalive", h.lease);
                let p = self.invoke_on(OpKind::Keepalive, h, false, node);
                let r = self
                    .http
                    .post(&url, &path, &Value::Null, REQUEST_TIMEOUT)
                    .await;
                complete(p, &r, |_, _| {});
                (OpKind::Keepalive, r)
            }
            Kind::Election => {
                let body = json!({"lease_id": h.lease, "token": h.token, "value": {"p": self.id}});
                let path = format!("/v1/elections/{}:proclaim", h.key);
                let p = self.invoke_on(OpKind::Proclaim, h, true, node);
                let r = self.http.post(&url, &path, &body, REQUEST_TIMEOUT).await;
                complete(p, &r, |_, _| {});
                (OpKind::Proclaim, r)
            }
            Kind::Name => {
                // Re-registration by the owning lease: same token, value updated.
                let body =
                    json!({"lease_id": h.lease, "holder": h.holder, "value": {"p": self.id}});
                let path = format!("/v1/names/{}", h.key);
                let p = self.invoke_on(OpKind::Register, h, false, node);
                let r = self.http.put(&url, &path, &body, REQUEST_TIMEOUT).await;
                complete(p, &r, |e, b| e.token = u64_field(b, "token"));
                (OpKind::Register, r)
            }
        };
        match reply {
            Reply::Ok(_) => {
                if f.refreshes_lease() && f != OpKind::Proclaim {
                    h.sent = sent;
                }
                true
            }
            Reply::Fail { status: 0, .. } => true,
            Reply::Fail { .. } => false,
            Reply::Unknown(_) => true,
        }
    }

    async fn give_up(&mut self, h: &Holding) {
        let (node, url) = self.url();
        match h.kind {
            Kind::Semaphore => {
                let body = json!({"lease_id": h.lease, "token": h.token});
                let p = self.invoke_on(OpKind::ReleasePermits, h, true, node);
                let r = self
                    .http
                    .post(
                        &url,
                        &format!("/v1/semaphores/{}:release", h.key),
                        &body,
                        REQUEST_TIMEOUT,
                    )
                    .await;
                complete(p, &r, |_, _| {});
            }
            Kind::Lock | Kind::RwLock => {
                let body = json!({"lease_id": h.lease, "token": h.token});
                let p = self.invoke_on(OpKind::Release, h, true, node);
                let r = self
                    .http
                    .post(
                        &url,
                        &format!("/v1/locks/{}:release", h.key),
                        &body,
                        REQUEST_TIMEOUT,
                    )
                    .await;
                complete(p, &r, |_, _| {});
            }
            Kind::Election => {
                let body = json!({"lease_id": h.lease, "token": h.token});
                let p = self.invoke_on(OpKind::Resign, h, true, node);
                let r = self
                    .http
                    .post(
                        &url,
                        &format!("/v1/elections/{}:resign", h.key),
                        &body,
                        REQUEST_TIMEOUT,
                    )
                    .await;
                complete(p, &r, |_, _| {});
            }
            Kind::Name => {
                let body = json!({"lease_id": h.lease});
                let p = self.invoke_on(OpKind::Unregister, h, true, node);
                let r = self
                    .http
                    .delete(
                        &url,
                        &format!("/v1/names/{}", h.key),
                        &body,
                        REQUEST_TIMEOUT,
                    )
                    .await;
                complete(p, &r, |_, _| {});
            }
        }
    }

    fn invoke_on(
        &self,
        f: OpKind,
        h: &Holding,
        with_token: bool,
        node: u64,
    ) -> crate::recorder::Pending {
        let ttl = self.cfg.ttl_ms;
        self.rec.invoke(self.id, f, &h.key, |e| {
            e.node = Some(node);
            e.lease = Some(h.lease.clone());
            e.holder = Some(h.holder.clone());
            e.ttl_ms = Some(ttl);
            if with_token {
                e.token = Some(h.token);
            }
        })
    }

    async fn read(&mut self, kind: Kind, key: &str) {
        let (node, url) = self.url();
        read_key(
            &self.http,
            &self.rec,
            self.id,
            node,
            &url,
            kind_path(kind),
            key,
        )
        .await;
    }
}

fn kind_path(kind: Kind) -> &'static str {
    match kind {
        Kind::Lock | Kind::RwLock => "locks",
        Kind::Election => "elections",
        Kind::Name => "names",
        Kind::Semaphore => "semaphores",
    }
}

/// Records a completion from a reply; `ok` fills fields from a success body.
fn complete(p: crate::recorder::Pending, reply: &Reply, ok: impl FnOnce(&mut Event, &Value)) {
    match reply {
        Reply::Ok(body) => {
            p.complete(EventType::Ok, |e| ok(e, body));
        }
        Reply::Fail { code, .. } => {
            p.complete(EventType::Fail, |e| e.error = Some(code.clone()));
        }
        Reply::Unknown(why) => {
            p.complete(EventType::Info, |e| e.error = Some(why.clone()));
        }
    }
}

/// A linearizable read of a lock (`locks`), election (`elections`) or name
/// (`names`), recorded as a `read` op showing the holder and token. Returns
/// whether it got a definite answer.
pub async fn read_key(
    http: &BatonClient,
    rec: &Recorder,
    process: u32,
    node: u64,
    url: &str,
    collection: &str,
    key: &str,
) -> bool {
    let p = rec.invoke(process, OpKind::Read, key, |e| e.node = Some(node));
    let reply = http
        .get(url, &format!("/v1/{collection}/{key}"), REQUEST_TIMEOUT)
        .await;
    let absent = matches!(&reply, Reply::Fail { status: 404, code, .. } if code == "not_found" || code == "no_leader");
    if absent {
        p.complete(EventType::Ok, |e| e.held = Some(false));
        return true;
    }
    let definite = matches!(reply, Reply::Ok(_));
    complete(p, &reply, |e, b| match collection {
        "locks" => {
            e.held = b.get("held").and_then(Value::as_bool);
            if e.held == Some(true) {
                e.holder = str_field(b, "holder");
                e.token = u64_field(b, "token");
            }
        }
        "elections" => {
            let leader = b.get("leader").cloned().unwrap_or(Value::Null);
            e.held = Some(!leader.is_null());
            e.holder = str_field(&leader, "candidate");
            e.token = u64_field(&leader, "token");
        }
        _ => {
            e.held = Some(true);
            e.holder = str_field(b, "holder");
            e.token = u64_field(b, "token");
        }
    });
    definite
}
