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
    /// The first violations (or why it could not decide), readable.
    pub explanations: Vec<String>,
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
            explanations: Vec::new(),
        }
    }

    /// Records a violation.
    pub fn violation(&mut self, why: String) {
        self.status = Status::Fail;
        self.violations += 1;
        if self.explanations.len() < MAX_EXPLANATIONS {
            self.explanations.push(why);
        }
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

    /// Whether this verdict is a violation.
    pub fn failed(&self) -> bool {
        self.status == Status::Fail
    }
}
