//! What the probe found, per payload and step, as text for people and JSON for
//! pipelines (the same facts in both).

use std::fmt::Write as _;

use serde::Serialize;

use super::ledger::Answer;

/// The verdict of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// The ledger (or the relay path) did what the control needs.
    Pass,
    /// It did not: the report says what happened instead.
    Fail,
    /// The ledger refused the payload itself (its code is in the detail): nothing to
    /// probe, and a payout batch holding it would be refused the same way.
    Refused,
    /// The step does not apply (no reference, a revert of something not probed).
    NotApplicable,
    /// Not run because an earlier step refused or failed the payload.
    Skipped,
    /// Run, but the situation it tests could not be produced (see the detail).
    NotReached,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::Refused => "REFUSED",
            Self::NotApplicable => "N/A",
            Self::Skipped => "SKIPPED",
            Self::NotReached => "NOT REACHED",
        }
    }

    /// Whether a payout batch should be held for it.
    pub fn fails(self) -> bool {
        matches!(self, Self::Fail | Self::Refused)
    }
}

/// One step on one payload.
#[derive(Debug, Clone, Serialize)]
pub struct StepResult {
    pub step: u8,
    pub name: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    /// The ledger's answers, in the order they came.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<Answer>,
    /// Ids of the transactions carrying the event, after the step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactions: Option<Vec<u64>>,
}

/// Step names, by number.
pub const STEP_NAMES: [&str; 6] = [
    "fresh key: a new transaction",
    "same request again: Idempotency-Hit, same transaction",
    "two at once, another fresh key: one transaction",
    "same key, body changed: idempotency mismatch",
    "relay SIGKILLed after the accept, restarted: replay",
    "reference reused, new key: conflict",
];

impl StepResult {
    pub fn new(step: u8, verdict: Verdict, detail: impl Into<String>) -> Self {
        Self {
            step,
            name: STEP_NAMES[usize::from(step) - 1],
            verdict,
            detail: detail.into(),
            answers: Vec::new(),
            transactions: None,
        }
    }

    #[must_use]
    pub fn answers(mut self, answers: Vec<Answer>) -> Self {
        self.answers = answers;
        self
    }

    #[must_use]
    pub fn transactions(mut self, ids: Vec<u64>) -> Self {
        self.transactions = Some(ids);
        self
    }
}

/// Every step run on one payload.
#[derive(Debug, Clone, Serialize)]
pub struct PayloadReport {
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub account: String,
    pub event_id: String,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// For a revert: the event id of the payout it reverts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverts: Option<String>,
    pub steps: Vec<StepResult>,
}

/// A line of the file that is not a payload enqueue would take.
#[derive(Debug, Clone, Serialize)]
pub struct BadLine {
    pub line: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub error: String,
}

/// Counts over every step.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Summary {
    pub payloads: usize,
    pub bad_lines: usize,
    pub pass: usize,
    pub fail: usize,
    pub refused: usize,
    pub not_applicable: usize,
    pub skipped: usize,
    pub not_reached: usize,
    /// True when nothing failed, no payload was refused and no line was bad.
    pub ok: bool,
}

/// The whole probe.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    /// The ledger probed: the embedded dev ledger or the URL.
    pub target: String,
    /// The probe's own ledgers: steps 1, 2, 4, 6; step 3; step 5.
    pub ledgers: Vec<String>,
    /// `@world` credits made before probing, per ledger.
    pub funded: Vec<String>,
    /// How step 5 puts the kill between the ledger's accept and the relay's record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_window: Option<String>,
    pub notes: Vec<String>,
    pub bad_lines: Vec<BadLine>,
    pub payloads: Vec<PayloadReport>,
    pub summary: Summary,
}

impl ProbeReport {
    /// Fills in the summary from the payloads and bad lines.
    pub fn summarise(&mut self) {
        let mut s = Summary {
            payloads: self.payloads.len(),
            bad_lines: self.bad_lines.len(),
            ..Summary::default()
        };
        for step in self.payloads.iter().flat_map(|p| &p.steps) {
            let counter = match step.verdict {
                Verdict::Pass => &mut s.pass,
                Verdict::Fail => &mut s.fail,
                Verdict::Refused => &mut s.refused,
                Verdict::NotApplicable => &mut s.not_applicable,
                Verdict::Skipped => &mut s.skipped,
                Verdict::NotReached => &mut s.not_reached,
            };
            *counter += 1;
        }
        s.ok = s.fail == 0 && s.refused == 0 && s.bad_lines == 0;
        self.summary = s;
    }

    /// The readable report.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "outbox probe against {}", self.target);
        let _ = writeln!(out, "probe ledgers: {}", self.ledgers.join(", "));
        if !self.funded.is_empty() {
            let _ = writeln!(out, "funded from @world: {}", self.funded.join("; "));
        }
        if let Some(window) = &self.crash_window {
            let _ = writeln!(out, "step 5: {window}");
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        for bad in &self.bad_lines {
            let _ = writeln!(out, "\nline {}: BAD LINE  {}", bad.line, bad.error);
        }
        for payload in &self.payloads {
            let _ = writeln!(
                out,
                "\n{}  {}  {}  {}  event {}",
                payload.label,
                payload.account,
                payload.kind,
                match (&payload.reference, &payload.reverts) {
                    (_, Some(target)) => format!("reverts {target}"),
                    (Some(r), None) => format!("reference {r}"),
                    (None, None) => "no reference".into(),
                },
                payload.event_id
            );
            for step in &payload.steps {
                let _ = writeln!(
                    out,
                    "  {} {:<12} {}",
                    step.step,
                    step.verdict.as_str(),
                    step.detail
                );
            }
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "\n{}: {} payloads, {} bad lines; steps: {} PASS, {} FAIL, {} REFUSED, {} N/A, {} SKIPPED, {} NOT REACHED",
            if s.ok { "PASS" } else { "FAIL" },
            s.payloads,
            s.bad_lines,
            s.pass,
            s.fail,
            s.refused,
            s.not_applicable,
            s.skipped,
            s.not_reached
        );
        out
    }
}
