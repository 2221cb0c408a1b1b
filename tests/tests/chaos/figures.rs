//! The figures each scenario prints (and `scripts/chaos.sh` shows): the auditor's
//! counts by kind, with what the scenario did to the system.

use std::time::Duration;

use outbox_testkit::auditor::{AuditReport, DiscrepancyKind};

/// What a scenario did, besides the events it sent.
#[derive(Debug, Default)]
pub struct Chaos {
    /// SIGKILLs, and of them those that hit the relay before everything was posted.
    pub kills: usize,
    pub kills_mid_drain: usize,
    /// Answers the dev ledger's fault injector replaced or delayed.
    pub faults: u64,
    /// Writes the ledger answered from an idempotency key (a crash or a lost answer
    /// made the relay send them again).
    pub replays: u64,
    /// Anything else worth a figure, already formatted.
    pub notes: Vec<String>,
}

/// Prints the scenario's figures on one line (`--nocapture` shows them), then fails
/// with every discrepancy unless the audit is clean.
pub fn report(
    scenario: &str,
    seed: u64,
    accounts: usize,
    chaos: &Chaos,
    audit: &AuditReport,
    took: Duration,
) {
    let count = |kinds: &[DiscrepancyKind]| {
        audit
            .discrepancies
            .iter()
            .filter(|d| kinds.contains(&d.kind))
            .count()
    };
    let missing = count(&[
        DiscrepancyKind::MissingOnLedger,
        DiscrepancyKind::Undelivered,
    ]);
    let doubled = count(&[
        DiscrepancyKind::DoubledOnLedger,
        DiscrepancyKind::RefusedButPosted,
    ]);
    let out_of_order = count(&[DiscrepancyKind::OutOfOrder]);
    let mut line = format!(
        "CHAOS {scenario}: seed={seed} events={} accounts={accounts} posted={} refused={} \
         crash_points={} (mid-drain {}) faults={} replays={} missing={missing} doubled={doubled} \
         out_of_order={out_of_order} discrepancies={} took={:.1}s",
        audit.events,
        audit.posted,
        audit.refused,
        chaos.kills,
        chaos.kills_mid_drain,
        chaos.faults,
        chaos.replays,
        audit.discrepancies.len(),
        took.as_secs_f64(),
    );
    for note in &chaos.notes {
        line.push(' ');
        line.push_str(note);
    }
    println!("{line}");
    assert!(audit.is_clean(), "{line}\n{audit}");
}
