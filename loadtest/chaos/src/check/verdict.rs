//! A checker's verdict.

use serde::Serialize;

/// Pass, fail, or could not decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// No violation found.
    Pass,
    /// At least one violation (see the explanations).
    Fail,
    /// The checker could not decide (search budget exhausted); not a violation.
    Inconclusive,
}

/// One checker's verdict with explanations.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Checker name.
    pub checker: &'static str,
    /// Outcome.
    pub status: Status,
    /// How many items (ops, pairs, keys) it examined.
    pub checked: usize,
    /// How many violations it found.
    pub violations: usize,
    /// Violations set aside because a clock fault happened inside their time
    /// window (lease timing is outside the contract there).
    pub excused: usize,
    /// The first violations (or why it could not decide), readable.
    pub explanations: Vec<String>,
    /// Every violation with its time window, for excusing.
    #[serde(skip)]
    all: Vec<(String, Option<(u64, u64)>)>,
}

/// At most this many explanations are kept per checker.
const MAX_EXPLANATIONS: usize = 20;

impl Verdict {
    /// A passing verdict, to which violations are added.
    pub fn new(checker: &'static str) -> Self {
        Self {
            checker,
            status: Status::Pass,
            checked: 0,
            violations: 0,
            excused: 0,
            explanations: Vec::new(),
            all: Vec::new(),
        }
    }

    /// Records a violation.
    pub fn violation(&mut self, why: String) {
        self.push(why, None);
    }

    /// Records a violation that depends on what clocks did between `from_ns` and
    /// `to_ns` (run time).
    pub fn violation_in(&mut self, why: String, from_ns: u64, to_ns: u64) {
        self.push(why, Some((from_ns, to_ns)));
    }

    fn push(&mut self, why: String, window: Option<(u64, u64)>) {
        self.status = Status::Fail;
        self.violations += 1;
        if self.explanations.len() < MAX_EXPLANATIONS {
            self.explanations.push(why.clone());
        }
        self.all.push((why, window));
    }

    /// Records that something could not be decided (unless already failing).
    pub fn inconclusive(&mut self, why: String) {
        if self.status == Status::Pass {
            self.status = Status::Inconclusive;
        }
        if self.explanations.len() < MAX_EXPLANATIONS {
            self.explanations.push(why);
        }
    }

    /// Sets aside the violations whose window contains a clock jump (taking effect
    /// between `t` and `t + lag_ns` for a jump recorded at `t`).
    pub fn excuse_clock_jumps(&mut self, jumps_ns: &[u64], lag_ns: u64) {
        if jumps_ns.is_empty() || self.all.is_empty() {
            return;
        }
        let (excused, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.all)
            .into_iter()
            .partition(|(_, w)| {
                w.is_some_and(|(from, to)| {
                    jumps_ns
                        .iter()
                        .any(|t| t.saturating_add(lag_ns) >= from && *t <= to)
                })
            });
        self.excused += excused.len();
        self.violations = kept.len();
        let notes: Vec<String> = self
            .explanations
            .iter()
            .filter(|e| !self_is_violation(e, &excused, &kept))
            .cloned()
            .collect();
        self.explanations = notes;
        self.explanations
            .extend(kept.iter().take(MAX_EXPLANATIONS).map(|(w, _)| w.clone()));
        self.explanations.extend(
            excused
                .iter()
                .take(MAX_EXPLANATIONS.saturating_sub(self.explanations.len()))
                .map(|(w, _)| format!("[excused: clock jump inside] {w}")),
        );
        self.all = kept;
        if self.violations == 0 && self.status == Status::Fail {
            self.status = Status::Pass;
        }
    }

    /// Whether this verdict is a violation.
    pub fn failed(&self) -> bool {
        self.status == Status::Fail
    }
}

/// Whether an explanation line is one of the violations (rather than a note).
fn self_is_violation(
    e: &str,
    a: &[(String, Option<(u64, u64)>)],
    b: &[(String, Option<(u64, u64)>)],
) -> bool {
    a.iter().chain(b).any(|(w, _)| w == e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_jump_inside_the_window_excuses_only_that_violation() {
        let mut v = Verdict::new("x");
        v.violation_in("early expiry at 10s".into(), 9_000, 11_000);
        v.violation_in("early expiry at 50s".into(), 49_000, 51_000);
        v.violation("not timing".into());
        v.excuse_clock_jumps(&[10_500], 1_000);
        assert!(v.failed());
        assert_eq!((v.violations, v.excused), (2, 1));
        v.excuse_clock_jumps(&[48_500], 1_000);
        assert_eq!((v.violations, v.excused), (1, 2));
        assert!(v.failed(), "the violation without a window stays");
    }
}
