//! The open-file limit a server starts with.
//!
//! Every connection and watch stream is one descriptor. Many systems start
//! services with a soft limit of 1,024 and a hard limit hundreds of times
//! higher (systemd: 1,024 / 524,288): the soft limit is only there for
//! programs that still use `select(2)`, which Baton does not, so it raises the
//! soft limit to the hard one, as Go programs do since Go 1.19.

use rustix::process::{getrlimit, setrlimit, Resource};

/// Below this many open files, the server warns: a few hundred clients with a
/// watch stream each would exhaust it.
const FEW_FILES: u64 = 4_096;

/// The soft open-file limit before and after [`raise_to_hard_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The soft limit the process was started with (`None`: unlimited).
    pub before: Option<u64>,
    /// The soft limit now in force (`None`: unlimited).
    pub now: Option<u64>,
}

/// Raises this process's soft open-file limit to its hard limit and says what
/// it was and is. A refusal (a sandbox that forbids `setrlimit`) leaves the
/// limit as it was.
pub fn raise_to_hard_limit() -> OpenFileLimit {
    let mut limit = getrlimit(Resource::Nofile);
    let before = limit.current;
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            return OpenFileLimit {
                before,
                now: before,
            };
        }
    }
    OpenFileLimit {
        before,
        now: getrlimit(Resource::Nofile).current,
    }
}

/// Raises the limit and logs the outcome: at info when it was raised, a
/// warning when what is left is small.
pub fn raise_and_report() {
    let limit = raise_to_hard_limit();
    if limit.now != limit.before {
        tracing::info!(
            before = ?limit.before,
            now = ?limit.now,
            "raised the open-file limit to its hard limit"
        );
    }
    if let Some(now) = limit.now.filter(|&now| now < FEW_FILES) {
        tracing::warn!(
            limit = now,
            "the open-file limit is low: every connection and watch stream takes one; raise the hard limit (ulimit -Hn, LimitNOFILE=)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // nextest runs each test in a process of its own, so lowering this
    // process's limit touches no other test.
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let mut limit = getrlimit(Resource::Nofile);
        let hard = limit.maximum;
        limit.current = Some(hard.unwrap_or(u64::MAX).min(512));
        setrlimit(Resource::Nofile, limit).expect("lowering the soft limit");

        let raised = raise_to_hard_limit();
        assert_eq!(raised.before, limit.current);
        assert_eq!(raised.now, hard);
        assert_eq!(getrlimit(Resource::Nofile).current, hard);
        assert_eq!(
            raise_to_hard_limit(),
            OpenFileLimit {
                before: hard,
                now: hard
            }
        );
    }
}
