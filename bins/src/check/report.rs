//! The five checks' verdicts: readable text and JSON with the same facts.

use std::fmt::Write as _;

use serde::Serialize;

/// The verdict of a check or of one of its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Pass,
    /// Could not be checked (a database not given, nothing to sample); says why.
    NotChecked,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::NotChecked => "NOT CHECKED",
            Self::Fail => "FAIL",
        }
    }
}

/// One control a check looks at.
#[derive(Debug, Clone, Serialize)]
pub struct Part {
    /// The control, in a few words (`append-only outbox_events`).
    pub control: String,
    pub status: Status,
    /// What was seen: the evidence for a PASS, what is wrong for a FAIL, why not for
    /// NOT CHECKED.
    pub detail: String,
    /// For a FAIL: what to do before the batch leaves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
}

impl Part {
    pub fn pass(control: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            control: control.into(),
            status: Status::Pass,
            detail: detail.into(),
            remedy: None,
        }
    }

    pub fn fail(
        control: impl Into<String>,
        detail: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Self {
        Self {
            control: control.into(),
            status: Status::Fail,
            detail: detail.into(),
            remedy: Some(remedy.into()),
        }
    }

    pub fn not_checked(control: impl Into<String>, why: impl Into<String>) -> Self {
        Self {
            control: control.into(),
            status: Status::NotChecked,
            detail: why.into(),
            remedy: None,
        }
    }
}

/// One of the five checks, its status the worst of its parts'.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub number: u8,
    pub name: &'static str,
    pub status: Status,
    pub parts: Vec<Part>,
}

impl Check {
    pub fn new(number: u8, name: &'static str, parts: Vec<Part>) -> Self {
        let status = parts
            .iter()
            .map(|p| p.status)
            .max()
            .unwrap_or(Status::NotChecked);
        Self {
            number,
            name,
            status,
            parts,
        }
    }
}

/// All five checks, in the order the money moves.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub database: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_database: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fanout_database: Option<String>,
    pub checks: Vec<Check>,
    /// True when no check failed.
    pub ok: bool,
}

impl CheckReport {
    pub fn new(
        database: String,
        consumer_database: Option<String>,
        fanout_database: Option<String>,
        checks: Vec<Check>,
    ) -> Self {
        let ok = checks.iter().all(|c| c.status != Status::Fail);
        Self {
            database,
            consumer_database,
            fanout_database,
            checks,
            ok,
        }
    }

    pub fn failed(&self) -> Vec<&Check> {
        self.checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .collect()
    }

    /// The readable report.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "outbox check {}", self.database);
        if let Some(db) = &self.consumer_database {
            let _ = writeln!(out, "  consumer {db}");
        }
        if let Some(db) = &self.fanout_database {
            let _ = writeln!(out, "  fan-out  {db}");
        }
        for check in &self.checks {
            let _ = writeln!(
                out,
                "\n{}. {:<7} {}",
                check.number,
                check.name,
                check.status.as_str()
            );
            for part in &check.parts {
                let _ = writeln!(
                    out,
                    "   {:<11} {}: {}",
                    part.status.as_str(),
                    part.control,
                    part.detail
                );
                if let Some(remedy) = &part.remedy {
                    let _ = writeln!(out, "               → {remedy}");
                }
            }
        }
        let failed: Vec<String> = self
            .failed()
            .iter()
            .map(|c| format!("{}. {}", c.number, c.name))
            .collect();
        if failed.is_empty() {
            let _ = writeln!(
                out,
                "\nno check FAILED: nothing here holds the batch (NOT CHECKED parts say what was not looked at)"
            );
        } else {
            let _ = writeln!(
                out,
                "\nFAILED: {}. Hold the payout batch until the control is in place; a retry loop is not a control.",
                failed.join(", ")
            );
        }
        out
    }
}
