//! A small driver for the state machine, shared by the integration tests.
#![allow(dead_code)]

use baton_core::{
    ApplyContext, Command, CoreError, EventKind, Grant, IdempotencyKey, LeaseId, LeaseRef, Limits,
    Outcome, Reply, Request, StateMachine, WaiterId,
};

pub struct Driver {
    pub sm: StateMachine,
    pub now_ms: u64,
    pub limits: Limits,
    pub next_waiter: u64,
}

impl Default for Driver {
    fn default() -> Self {
        Driver {
            sm: StateMachine::new(),
            now_ms: 1_000_000,
            limits: Limits::default(),
            next_waiter: 1,
        }
    }
}

pub fn lease(n: u128) -> LeaseId {
    LeaseId(n)
}

impl Driver {
    pub fn apply(&mut self, command: Command) -> Outcome {
        self.apply_request(Request::plain(command))
    }

    pub fn apply_request(&mut self, request: Request) -> Outcome {
        let ctx = ApplyContext {
            now_ms: self.now_ms,
            limits: self.limits,
            term: 1,
        };
        self.sm.apply(&ctx, &request)
    }

    pub fn keyed(&mut self, key: &str, fingerprint: u64, command: Command) -> Outcome {
        self.apply_request(Request {
            idempotency: Some(IdempotencyKey {
                principal: String::new(),
                key: key.to_owned(),
                fingerprint,
            }),
            command,
        })
    }

    pub fn create_lease(&mut self, n: u128) -> LeaseId {
        let id = lease(n);
        let out = self.apply(Command::CreateLease {
            lease_id: id,
            ttl_ms: 10_000,
            holder: format!("holder-{n}"),
        });
        assert!(out.result.is_ok(), "{out:?}");
        id
    }

    pub fn new_waiter(&mut self) -> WaiterId {
        self.next_waiter += 1;
        WaiterId(self.next_waiter)
    }

    pub fn acquire(&mut self, name: &str, id: LeaseId) -> Result<Reply, CoreError> {
        self.apply(Command::Acquire {
            name: name.to_owned(),
            lease: LeaseRef::Existing(id),
            holder: None,
            waiter: None,
            lock_delay_ms: 0,
        })
        .result
    }

    pub fn grant(&mut self, name: &str, id: LeaseId) -> Grant {
        match self.acquire(name, id) {
            Ok(Reply::LockGranted(grant)) => grant,
            other => panic!("expected a grant of {name}, got {other:?}"),
        }
    }

    /// Queues (or is granted at once); returns the waiter id when queued.
    pub fn wait(&mut self, name: &str, id: LeaseId) -> WaiterId {
        let waiter = self.new_waiter();
        let out = self.apply(Command::Acquire {
            name: name.to_owned(),
            lease: LeaseRef::Existing(id),
            holder: None,
            waiter: Some(waiter),
            lock_delay_ms: 0,
        });
        match out.result {
            Ok(Reply::LockQueued { waiter, .. }) => waiter,
            other => panic!("expected {name} to queue, got {other:?}"),
        }
    }

    pub fn release(&mut self, name: &str, id: LeaseId, token: u64) -> Outcome {
        self.apply(Command::Release {
            name: name.to_owned(),
            lease_id: id,
            token,
        })
    }

    pub fn holder_token(&self, name: &str) -> Option<u64> {
        self.sm.lock(name).token
    }
}

/// The grants in an outcome's events: (name, lease, token, waiter).
pub fn grants(out: &Outcome) -> Vec<(String, LeaseId, u64, Option<WaiterId>)> {
    out.events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::LockAcquired { grant, waiter, .. } => {
                Some((grant.name.clone(), grant.lease_id, grant.token, *waiter))
            }
            _ => None,
        })
        .collect()
}
