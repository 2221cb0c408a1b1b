//! Sequence continuity over a consumer's inbox (the consuming team's check).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::Account;
use crate::error::Result;
use crate::inbox::{HeldGap, MessageKind};

/// One processed marker of a consumer's inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMarker {
    /// The consumer whose inbox holds it.
    pub consumer: String,
    /// The account the instruction was applied on.
    pub account: Account,
    /// The sequence it was applied at.
    pub sequence: u64,
    /// The instruction (outbox event) id.
    pub instruction_id: String,
    /// Whether it was applied as committed, reverted or rejected.
    pub kind: MessageKind,
    /// When the consumer applied it.
    pub applied_at: DateTime<Utc>,
}

/// Where a page of markers ends: the next page starts after it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MarkerKey {
    /// The marker's consumer.
    pub consumer: String,
    /// The marker's account.
    pub account: String,
    /// The marker's sequence.
    pub sequence: u64,
    /// The marker's instruction id (two markers may share a sequence: the fault
    /// this check looks for).
    pub instruction_id: String,
}

impl MarkerKey {
    /// The key of `marker`.
    pub fn of(marker: &AppliedMarker) -> Self {
        Self {
            consumer: marker.consumer.clone(),
            account: marker.account.as_str().to_owned(),
            sequence: marker.sequence,
            instruction_id: marker.instruction_id.clone(),
        }
    }
}

/// A held gap of one consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGap {
    /// The consumer holding messages.
    pub consumer: String,
    /// The account, its high-water mark and its lowest held message.
    pub gap: HeldGap,
    /// How many messages of the account are held.
    pub held: u64,
}

/// What the sequence check reads from a consumer database. Read-only.
#[async_trait]
pub trait InboxSequences: Send + Sync {
    /// Up to `limit` processed markers after `after` (from the first when `None`), in
    /// (consumer, account, sequence, instruction id) order, every consumer of the
    /// database included.
    async fn markers_after(
        &self,
        after: Option<&MarkerKey>,
        limit: usize,
    ) -> Result<Vec<AppliedMarker>>;

    /// Every (consumer, account) with held messages.
    async fn held_gaps(&self) -> Result<Vec<ConsumerGap>>;

    /// Whether retention has removed processed markers from this database: an
    /// account's lowest remaining sequence may then be above 1 without a loss.
    async fn markers_pruned(&self) -> Result<bool>;
}

/// Who the sequence check raises its exceptions as, per consumer: the consumer's name
/// is part of the source, so two consumers of one database keep separate findings.
pub fn source(consumer: &str) -> String {
    format!("reconcile:sequences/{consumer}")
}

/// How the sequence check runs.
#[derive(Debug, Clone)]
pub struct SequenceCheck {
    /// Markers read per page; memory is bounded by it, not by the inbox.
    pub page_size: usize,
    /// A held gap older than this is an exception (younger ones are messages on their
    /// way and only reported).
    pub gap_alarm_after: std::time::Duration,
    /// The time ages are measured at.
    pub now: DateTime<Utc>,
}

/// A held gap as the report shows it, with its age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldGapReport {
    /// The consumer, account and sequences around the gap.
    pub gap: ConsumerGap,
    /// How long its lowest held message has waited.
    pub age: chrono::TimeDelta,
}

/// What one sequence check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SequenceReport {
    /// Markers read, findings and notes.
    pub check: super::CheckReport,
    /// (consumer, account) pairs walked.
    pub accounts: u64,
    /// Every held gap, with its age (the old ones are also findings).
    pub held: Vec<HeldGapReport>,
}

/// The account walk in progress: the last marker of the current (consumer, account).
struct Walk {
    consumer: String,
    account: Account,
    sequence: u64,
    instruction_id: String,
}

impl SequenceCheck {
    /// Walks every account's applied sequences and every held gap. It only reads: it
    /// never advances, skips or releases anything.
    ///
    /// Findings: [`MissingSequence`](crate::ExceptionKind::MissingSequence) for a run
    /// of numbers missing between two applied ones (or before the first, unless
    /// retention removed old markers) and for a held gap older than the alarm age (the
    /// sequence named is the first missing one);
    /// [`RepeatedSequence`](crate::ExceptionKind::RepeatedSequence) for every further
    /// instruction applied at an already-applied sequence.
    pub async fn run(&self, inbox: &dyn InboxSequences) -> Result<SequenceReport> {
        let mut report = SequenceReport::default();
        let pruned = inbox.markers_pruned().await?;
        if pruned {
            report.check.notes.push(
                "retention has removed old inbox markers: each account is checked from its lowest remaining sequence"
                    .to_owned(),
            );
        }
        let mut after: Option<MarkerKey> = None;
        let mut walk: Option<Walk> = None;
        loop {
            let page = inbox
                .markers_after(after.as_ref(), self.page_size.max(1))
                .await?;
            let Some(last) = page.last() else { break };
            after = Some(MarkerKey::of(last));
            let full = page.len() >= self.page_size.max(1);
            for marker in page {
                report.check.checked += 1;
                self.step(&mut walk, marker, pruned, &mut report);
            }
            if !full {
                break;
            }
        }
        for gap in inbox.held_gaps().await? {
            let age = self.now - gap.gap.held_at;
            let alarm =
                chrono::TimeDelta::from_std(self.gap_alarm_after).unwrap_or(chrono::TimeDelta::MAX);
            if age >= alarm {
                report.check.findings.push(held_gap_finding(&gap, age));
            }
            report.held.push(HeldGapReport { gap, age });
        }
        Ok(report)
    }

    fn step(
        &self,
        walk: &mut Option<Walk>,
        marker: AppliedMarker,
        pruned: bool,
        report: &mut SequenceReport,
    ) {
        let same_account = walk
            .as_ref()
            .is_some_and(|w| w.consumer == marker.consumer && w.account == marker.account);
        let expected = match walk {
            Some(w) if same_account => {
                if marker.sequence == w.sequence {
                    report
                        .check
                        .findings
                        .push(repeated(&marker, &w.instruction_id));
                    return;
                }
                w.sequence + 1
            }
            _ => {
                report.accounts += 1;
                if pruned { marker.sequence } else { 1 }
            }
        };
        if marker.sequence > expected {
            report.check.findings.push(missing_run(&marker, expected));
        }
        *walk = Some(Walk {
            consumer: marker.consumer,
            account: marker.account,
            sequence: marker.sequence,
            instruction_id: marker.instruction_id,
        });
    }
}

fn repeated(marker: &AppliedMarker, first: &str) -> crate::NewException {
    crate::NewException::new(
        source(&marker.consumer),
        crate::ExceptionKind::RepeatedSequence,
        marker.account.clone(),
        marker.sequence,
        format!(
            "consumer {} applied sequence {} twice: instruction {} ({}) after {first}; the impact reached the consumer twice",
            marker.consumer,
            marker.sequence,
            marker.instruction_id,
            marker.kind.as_str()
        ),
    )
    .with_event_id(&marker.instruction_id)
}

fn missing_run(marker: &AppliedMarker, first_missing: u64) -> crate::NewException {
    let last_missing = marker.sequence - 1;
    let count = last_missing - first_missing + 1;
    let which = if count == 1 {
        format!("sequence {first_missing} is")
    } else {
        format!("sequences {first_missing}..={last_missing} ({count}) are")
    };
    crate::NewException::new(
        source(&marker.consumer),
        crate::ExceptionKind::MissingSequence,
        marker.account.clone(),
        first_missing,
        format!(
            "consumer {}: {which} missing before applied sequence {} (instruction {}): a dropped event",
            marker.consumer, marker.sequence, marker.instruction_id
        ),
    )
}

fn held_gap_finding(gap: &ConsumerGap, age: chrono::TimeDelta) -> crate::NewException {
    let first_missing = gap.gap.last_applied + 1;
    crate::NewException::new(
        source(&gap.consumer),
        crate::ExceptionKind::MissingSequence,
        gap.gap.account.clone(),
        first_missing,
        format!(
            "consumer {}: sequence {first_missing} never arrived; {} later message(s) from sequence {} held for {}s (since {})",
            gap.consumer,
            gap.held,
            gap.gap.lowest_held,
            age.num_seconds(),
            gap.gap.held_at.to_rfc3339()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ExceptionKind;

    struct FakeInbox {
        markers: Vec<AppliedMarker>,
        held: Vec<ConsumerGap>,
        pruned: bool,
    }

    #[async_trait]
    impl InboxSequences for FakeInbox {
        async fn markers_after(
            &self,
            after: Option<&MarkerKey>,
            limit: usize,
        ) -> Result<Vec<AppliedMarker>> {
            let mut all = self.markers.clone();
            all.sort_by_key(MarkerKey::of);
            Ok(all
                .into_iter()
                .filter(|m| after.is_none_or(|a| MarkerKey::of(m) > *a))
                .take(limit)
                .collect())
        }
        async fn held_gaps(&self) -> Result<Vec<ConsumerGap>> {
            Ok(self.held.clone())
        }
        async fn markers_pruned(&self) -> Result<bool> {
            Ok(self.pruned)
        }
    }

    fn now() -> DateTime<Utc> {
        "2026-12-01T12:00:00Z".parse().unwrap()
    }

    fn marker(consumer: &str, account: &str, sequence: u64, id: &str) -> AppliedMarker {
        AppliedMarker {
            consumer: consumer.into(),
            account: Account::parse(account).unwrap(),
            sequence,
            instruction_id: id.into(),
            kind: MessageKind::Committed,
            applied_at: now(),
        }
    }

    fn inbox(markers: Vec<AppliedMarker>) -> FakeInbox {
        FakeInbox {
            markers,
            held: Vec::new(),
            pruned: false,
        }
    }

    fn check(page_size: usize) -> SequenceCheck {
        SequenceCheck {
            page_size,
            gap_alarm_after: std::time::Duration::from_secs(300),
            now: now(),
        }
    }

    fn found(report: &SequenceReport) -> Vec<(ExceptionKind, String, u64)> {
        report
            .check
            .findings
            .iter()
            .map(|f| (f.kind, f.account.as_str().to_owned(), f.sequence))
            .collect()
    }

    #[tokio::test]
    async fn a_continuous_history_has_no_finding_at_any_page_size() {
        let mut markers = Vec::new();
        for account in ["merchants:1", "merchants:2"] {
            for s in 1..=7 {
                markers.push(marker("treasury", account, s, &format!("{account}-{s}")));
            }
        }
        for page in [1, 2, 3, 7, 100] {
            let report = check(page).run(&inbox(markers.clone())).await.unwrap();
            assert_eq!(found(&report), vec![], "page size {page}");
            assert_eq!((report.check.checked, report.accounts), (14, 2));
        }
    }

    #[tokio::test]
    async fn holes_and_repeats_are_found_across_page_boundaries() {
        let markers = vec![
            marker("treasury", "merchants:1", 1, "a1"),
            marker("treasury", "merchants:1", 2, "a2"),
            marker("treasury", "merchants:1", 2, "a2-again"),
            marker("treasury", "merchants:1", 5, "a5"),
            marker("treasury", "merchants:2", 2, "b2"),
            marker("ops", "merchants:1", 1, "a1"),
        ];
        for page in [1, 2, 4, 10] {
            let report = check(page).run(&inbox(markers.clone())).await.unwrap();
            let mut got = found(&report);
            got.sort_by_key(|(k, a, s)| (k.as_str(), a.clone(), *s));
            assert_eq!(
                got,
                vec![
                    (ExceptionKind::MissingSequence, "merchants:1".into(), 3),
                    (ExceptionKind::MissingSequence, "merchants:2".into(), 1),
                    (ExceptionKind::RepeatedSequence, "merchants:1".into(), 2),
                ],
                "page size {page}"
            );
            let repeat = report
                .check
                .findings
                .iter()
                .find(|f| f.kind == ExceptionKind::RepeatedSequence)
                .unwrap();
            assert_eq!(repeat.event_id.as_deref(), Some("a2-again"));
            assert!(repeat.detail.contains("after a2"), "{}", repeat.detail);
            let run = report
                .check
                .findings
                .iter()
                .find(|f| f.sequence == 3)
                .unwrap();
            assert!(run.detail.contains("3..=4 (2)"), "{}", run.detail);
            assert_eq!(run.source, "reconcile:sequences/treasury");
        }
    }

    #[tokio::test]
    async fn after_retention_an_account_starts_at_its_lowest_remaining_sequence() {
        let mut fake = inbox(vec![
            marker("treasury", "merchants:1", 40, "x40"),
            marker("treasury", "merchants:1", 41, "x41"),
        ]);
        assert_eq!(found(&check(10).run(&fake).await.unwrap()).len(), 1);
        fake.pruned = true;
        let report = check(10).run(&fake).await.unwrap();
        assert_eq!(found(&report), vec![]);
        assert_eq!(report.check.notes.len(), 1);
    }

    #[tokio::test]
    async fn only_held_gaps_older_than_the_alarm_are_findings_all_are_reported() {
        let gap = |account: &str, minutes: i64| ConsumerGap {
            consumer: "treasury".into(),
            gap: HeldGap {
                account: Account::parse(account).unwrap(),
                last_applied: 3,
                lowest_held: 5,
                held_at: now() - chrono::TimeDelta::minutes(minutes),
            },
            held: 2,
        };
        let mut fake = inbox(vec![]);
        fake.held = vec![gap("merchants:1", 10), gap("merchants:2", 1)];
        let report = check(10).run(&fake).await.unwrap();
        assert_eq!(
            found(&report),
            vec![(ExceptionKind::MissingSequence, "merchants:1".into(), 4)]
        );
        assert_eq!(report.held.len(), 2);
        assert_eq!(report.held[0].age, chrono::TimeDelta::minutes(10));
        assert!(report.check.findings[0].detail.contains("held for 600s"));
    }
}
