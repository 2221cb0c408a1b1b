//! The completeness check against in-memory fakes of its store and of a ledger that
//! lists (the real stores and ledger are exercised in the `tests` crate).

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::Utc;

use super::*;
use crate::domain::{
    Account, Amount, Asset, LedgerCommand, Metadata, NewEvent, OUTBOX_EVENT_ID_KEY, PostBody,
    PostCommand, Posting,
};
use crate::exception::ExceptionKind;
use crate::reconcile::reading_ledger::ReadingLedger;
use crate::store::{DeliveryOutcome, DeliveryRecord, DeliveryState};
use crate::testing::MemoryStore;

#[derive(Default)]
struct Recon {
    checkpoint: Option<CompletenessCheckpoint>,
    seen: Vec<SeenTransaction>,
    deliveries: HashMap<EventId, DeliveryState>,
}

struct FakeStore {
    outbox: MemoryStore,
    recon: Mutex<Recon>,
}

impl FakeStore {
    fn new() -> Self {
        Self {
            outbox: MemoryStore::default(),
            recon: Mutex::default(),
        }
    }
    fn state(&self, id: EventId) -> DeliveryState {
        self.recon
            .lock()
            .unwrap()
            .deliveries
            .get(&id)
            .cloned()
            .unwrap_or_default()
    }
    fn record(&self, id: EventId, outcome: DeliveryOutcome, tx: Option<u64>) {
        let record = DeliveryRecord {
            event_id: id,
            attempt: 1,
            outcome,
            ledger_tx_id: tx,
            error_code: (outcome == DeliveryOutcome::Rejected).then(|| "INSUFFICIENT_FUND".into()),
            detail: None,
            at: Utc::now(),
        };
        self.recon
            .lock()
            .unwrap()
            .deliveries
            .insert(id, DeliveryState::from_records(&[record]));
    }
}

#[async_trait]
impl CompletenessStore for FakeStore {
    async fn completeness_checkpoint(&self, _name: &str) -> Result<Option<CompletenessCheckpoint>> {
        Ok(self.recon.lock().unwrap().checkpoint.clone())
    }
    async fn save_completeness_checkpoint(
        &self,
        _name: &str,
        checkpoint: &CompletenessCheckpoint,
    ) -> Result<()> {
        self.recon.lock().unwrap().checkpoint = Some(checkpoint.clone());
        Ok(())
    }
    async fn events_by_ids(
        &self,
        ids: &[EventId],
    ) -> Result<HashMap<EventId, (OutboxEvent, DeliveryState)>> {
        let events = self.outbox.0.lock().unwrap().events.clone();
        Ok(events
            .into_iter()
            .filter(|e| ids.contains(&e.event_id))
            .map(|e| (e.event_id, (e.clone(), self.state(e.event_id))))
            .collect())
    }
    async fn seen_matching(
        &self,
        _name: &str,
        event_ids: &[String],
        references: &[String],
    ) -> Result<Vec<SeenTransaction>> {
        Ok(self
            .recon
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|s| {
                event_ids.contains(&s.event_id)
                    || s.reference.as_ref().is_some_and(|r| references.contains(r))
            })
            .cloned()
            .collect())
    }
    async fn record_seen(&self, _name: &str, seen: &[SeenTransaction]) -> Result<()> {
        let mut recon = self.recon.lock().unwrap();
        for s in seen {
            if !recon.seen.iter().any(|r| r.ledger_tx == s.ledger_tx) {
                recon.seen.push(s.clone());
            }
        }
        Ok(())
    }
    async fn events_to_check(
        &self,
        _name: &str,
        after: Option<Position>,
        limit: usize,
    ) -> Result<Vec<EventCheck>> {
        let events = self.outbox.0.lock().unwrap().events.clone();
        let seen = self.recon.lock().unwrap().seen.clone();
        Ok(events
            .into_iter()
            .filter(|e| after.as_ref().is_none_or(|a| e.position > *a))
            .take(limit)
            .map(|event| EventCheck {
                delivery: self.state(event.event_id),
                seen: seen
                    .iter()
                    .filter(|s| s.event_id == event.event_id.to_string())
                    .map(|s| s.ledger_tx)
                    .collect(),
                event,
            })
            .collect())
    }
}

fn payout(merchant: u32, amount: u64, reference: Option<&str>) -> NewEvent {
    NewEvent::new(
        Account::parse(&format!("merchants:{merchant}")).unwrap(),
        LedgerCommand::Post(PostCommand {
            body: PostBody::Postings(vec![Posting {
                source: Account::parse("world").unwrap(),
                destination: Account::parse(&format!("merchants:{merchant}:available")).unwrap(),
                amount: Amount::new(amount),
                asset: Asset::parse("USD/2").unwrap(),
            }]),
            reference: reference.map(str::to_owned),
            metadata: Metadata::new(),
        }),
    )
}

fn check(page_size: usize, settle_secs: u64) -> CompletenessCheck {
    CompletenessCheck {
        name: "ledger".into(),
        page_size,
        settle: std::time::Duration::from_secs(settle_secs),
        now: Utc::now(),
    }
}

/// `n` events over three merchants, each committed and recorded as accepted.
fn delivered(store: &FakeStore, ledger: &ReadingLedger, n: u32) -> Vec<OutboxEvent> {
    (0..n)
        .map(|i| {
            let event = store.outbox.add(&payout(i % 3, 100 + u64::from(i), None));
            let tx = ledger.commit(&event);
            store.record(event.event_id, DeliveryOutcome::Accepted, Some(tx));
            event
        })
        .collect()
}

fn kinds(report: &CompletenessReport) -> Vec<(ExceptionKind, u64)> {
    report
        .check
        .findings
        .iter()
        .map(|f| (f.kind, f.sequence))
        .collect()
}

#[tokio::test]
async fn a_complete_history_has_no_finding_at_any_page_size() {
    for page in [1, 2, 5, 50] {
        let (store, ledger) = (FakeStore::new(), ReadingLedger::default());
        delivered(&store, &ledger, 10);
        ledger.push(vec![], None, Metadata::new()); // not the outbox's: ignored
        let report = check(page, 0).run(&store, &ledger).await.unwrap();
        assert_eq!(kinds(&report), vec![], "page size {page}");
        assert_eq!(
            (
                report.transactions,
                report.outbox_transactions,
                report.events
            ),
            (11, 10, 10)
        );
        assert_eq!(
            *ledger.lookups.lock().unwrap(),
            0,
            "no per-event lookup when complete"
        );
    }
}

#[tokio::test]
async fn a_second_run_starts_at_the_checkpoint() {
    let (store, ledger) = (FakeStore::new(), ReadingLedger::default());
    delivered(&store, &ledger, 6);
    let first = check(4, 0).run(&store, &ledger).await.unwrap();
    assert_eq!((first.transactions, first.events), (6, 6));
    delivered(&store, &ledger, 2);
    let second = check(4, 0).run(&store, &ledger).await.unwrap();
    assert_eq!((second.transactions, second.events), (2, 2));
    assert_eq!(kinds(&second), vec![]);
}

#[tokio::test]
async fn an_event_never_posted_is_missing_once_settled_and_a_young_one_waits() {
    let (store, ledger) = (FakeStore::new(), ReadingLedger::default());
    delivered(&store, &ledger, 3);
    let lost = store.outbox.add(&payout(7, 500, None));
    let young = check(10, 3600).run(&store, &ledger).await.unwrap();
    assert_eq!(kinds(&young), vec![]);
    assert_eq!((young.events, young.unsettled), (3, 1));
    let settled = check(10, 0).run(&store, &ledger).await.unwrap();
    assert_eq!(
        kinds(&settled),
        vec![(ExceptionKind::MissingTransaction, 1)]
    );
    let finding = &settled.check.findings[0];
    assert_eq!(finding.account.as_str(), "merchants:7");
    assert_eq!(finding.event_id, Some(lost.event_id.to_string()));
    assert!(
        finding.detail.contains("no recorded outcome"),
        "{}",
        finding.detail
    );
}

#[tokio::test]
async fn an_event_recorded_as_accepted_without_a_transaction_is_missing_at_once() {
    let (store, ledger) = (FakeStore::new(), ReadingLedger::default());
    let event = store.outbox.add(&payout(1, 500, None));
    store.record(event.event_id, DeliveryOutcome::Accepted, Some(99));
    let report = check(10, 3600).run(&store, &ledger).await.unwrap();
    assert_eq!(kinds(&report), vec![(ExceptionKind::MissingTransaction, 1)]);
    assert_eq!(report.check.findings[0].ledger_tx, Some(99));
}

#[tokio::test]
async fn a_post_that_lands_after_the_ledger_side_is_not_missing() {
    let (store, ledger) = (FakeStore::new(), ReadingLedger::default());
    let event = store.outbox.add(&payout(1, 500, None));
    // Committed, but the ledger side of this run was read before (simulated by a
    // checkpoint already past the new transaction).
    let tx = ledger.commit(&event);
    store.recon.lock().unwrap().checkpoint = Some(CompletenessCheckpoint {
        ledger_tx: Some(tx),
        position: None,
    });
    let report = check(10, 0).run(&store, &ledger).await.unwrap();
    assert_eq!(kinds(&report), vec![]);
    assert_eq!(*ledger.lookups.lock().unwrap(), 1);
}

#[tokio::test]
async fn a_recorded_refusal_is_complete_and_a_committed_refusal_conflicts() {
    let (store, ledger) = (FakeStore::new(), ReadingLedger::default());
    let refused = store.outbox.add(&payout(1, 500, None));
    store.record(refused.event_id, DeliveryOutcome::Rejected, None);
    assert_eq!(
        kinds(&check(10, 0).run(&store, &ledger).await.unwrap()),
        vec![]
    );
    let tx = ledger.commit(&refused);
    let report = check(10, 0).run(&store, &ledger).await.unwrap();
    assert_eq!(
        kinds(&report),
        vec![(ExceptionKind::ConflictingTransaction, 1)]
    );
    assert_eq!(report.check.findings[0].ledger_tx, Some(tx));
    assert!(
        report.check.findings[0]
            .detail
            .contains("INSUFFICIENT_FUND")
    );
}

#[tokio::test]
async fn orphans_duplicates_and_conflicts_are_named() {
    let (store, ledger) = (FakeStore::new(), ReadingLedger::default());
    let events = delivered(&store, &ledger, 3);
    // Out of band, with outbox metadata the outbox never wrote.
    let stranger = EventId::new();
    let orphan = ledger.push(
        vec![],
        None,
        Metadata::from([
            (OUTBOX_EVENT_ID_KEY.into(), stranger.to_string()),
            ("outbox_account".into(), "merchants:4471".into()),
            ("outbox_sequence".into(), "9".into()),
        ]),
    );
    // The second event posted twice (say, by a second relay without idempotency).
    let twice = ledger.commit(&events[1]);
    // Other postings under the third event's id.
    let LedgerCommand::Post(post) = events[2].payload.command().unwrap() else {
        panic!()
    };
    let mut other = payout(2, 1, None);
    let LedgerCommand::Post(other_post) = &mut other.command else {
        panic!()
    };
    let PostBody::Postings(wrong) = other_post.body.clone() else {
        panic!()
    };
    {
        // Replace the third event's transaction by one with the wrong amount.
        let mut txs = ledger.txs.lock().unwrap();
        txs[2].postings = wrong;
        txs[2].metadata = post.metadata.clone();
    }
    for page in [1, 2, 100] {
        store.recon.lock().unwrap().checkpoint = None;
        store.recon.lock().unwrap().seen.clear();
        let report = check(page, 0).run(&store, &ledger).await.unwrap();
        let mut got: Vec<_> = report
            .check
            .findings
            .iter()
            .map(|f| {
                (
                    f.kind.as_str(),
                    f.account.as_str().to_owned(),
                    f.sequence,
                    f.ledger_tx,
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (
                    "conflicting_transaction",
                    events[2].account.as_str().to_owned(),
                    1,
                    Some(3)
                ),
                (
                    "duplicate_transaction",
                    events[1].account.as_str().to_owned(),
                    1,
                    Some(twice)
                ),
                (
                    "orphan_transaction",
                    "merchants:4471".to_owned(),
                    9,
                    Some(orphan)
                ),
            ],
            "page size {page}"
        );
    }
}

#[tokio::test]
async fn one_reference_on_two_transactions_is_a_duplicate() {
    let (store, ledger) = (FakeStore::new(), ReadingLedger::default());
    let a = store.outbox.add(&payout(1, 500, Some("payout:1")));
    let b = store.outbox.add(&payout(2, 500, Some("payout:1")));
    for event in [&a, &b] {
        let tx = ledger.commit(event);
        store.record(event.event_id, DeliveryOutcome::Accepted, Some(tx));
    }
    let report = check(1, 0).run(&store, &ledger).await.unwrap();
    assert_eq!(
        kinds(&report),
        vec![(ExceptionKind::DuplicateTransaction, 1)]
    );
    assert_eq!(
        report.check.findings[0].event_id,
        Some(b.event_id.to_string())
    );
    assert!(report.check.findings[0].detail.contains("payout:1"));
}
