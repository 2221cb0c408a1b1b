//! The auditor (`outbox_testkit::auditor`) as the end-to-end tests call it: over an
//! outbox and the dev ledger, and with the reference treasury consumer's SQLite file
//! (its inbox and its balances) when the test has one.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use outbox_core::OutboxEvent;
use outbox_core::reconcile::completeness::CompletenessStore;
use outbox_ledger_dev::RunningDevLedger;
use outbox_store_sqlite::{SqliteConfig, SqliteStore};
use outbox_testkit::auditor::{AuditReport, ConsumerView, DiscrepancyKind, audit};

use super::client;

/// The name `common::consumer`, `outbox consume` and `outbox demo` give the reference
/// treasury consumer in its inbox.
pub const TREASURY: &str = "treasury";

/// The auditor over `store` and the ledger (Hop 1): every event posted exactly once or
/// refused, per account in sequence order, nothing orphaned.
pub async fn audit_ledger(store: &dyn CompletenessStore, ledger: &RunningDevLedger) -> AuditReport {
    let reader = client(ledger, Duration::from_secs(10));
    audit(store, &reader, &[]).await.unwrap()
}

/// The auditor over `store`, the ledger and the reference treasury consumer whose
/// SQLite file is `treasury_db`: on top of Hop 1, every event the ledger answered
/// applied once at its sequence, nothing held, and each treasury balance equal to
/// the ledger's.
pub async fn audit_with_treasury(
    store: &dyn CompletenessStore,
    ledger: &RunningDevLedger,
    treasury_db: &Path,
) -> AuditReport {
    let inbox = SqliteStore::open(SqliteConfig::new(treasury_db))
        .await
        .unwrap();
    let treasury = ConsumerView {
        name: TREASURY.to_owned(),
        inbox: &inbox,
        balances: Some(treasury_balances(treasury_db)),
    };
    let reader = client(ledger, Duration::from_secs(10));
    audit(store, &reader, &[treasury]).await.unwrap()
}

/// The reference treasury's balance per account in its SQLite file, for the auditor.
pub fn treasury_balances(treasury_db: &Path) -> BTreeMap<String, i128> {
    let conn = rusqlite::Connection::open(treasury_db).unwrap();
    let mut stmt = conn
        .prepare("SELECT account, balance FROM treasury_balances")
        .unwrap();
    stmt.query_map([], |r| {
        Ok((r.get::<_, String>(0)?, i128::from(r.get::<_, i64>(1)?)))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// The auditor over `store` and the ledger: every outbox event posted exactly once,
/// per account in sequence order, nothing orphaned — and `events` are all of them.
pub async fn assert_exactly_once_in_order(
    store: &dyn CompletenessStore,
    ledger: &RunningDevLedger,
    events: &[OutboxEvent],
) {
    let report = audit_ledger(store, ledger).await;
    report.assert_clean();
    assert_eq!(
        (report.events, report.posted, report.ledger_transactions),
        (events.len(), events.len(), events.len()),
        "{report}"
    );
}

/// The auditor over `store` and the ledger finds nothing, and its figures are
/// `events` events of which `refused` refused and the rest posted once, on a ledger
/// that also holds `others` transactions of the test's own (funding, say).
pub async fn assert_audited(
    store: &dyn CompletenessStore,
    ledger: &RunningDevLedger,
    events: usize,
    refused: usize,
    others: usize,
) -> AuditReport {
    let report = audit_ledger(store, ledger).await;
    report.assert_clean();
    let posted = events - refused;
    assert_eq!(
        (
            report.events,
            report.posted,
            report.refused,
            report.ledger_transactions
        ),
        (events, posted, refused, posted + others),
        "(events, posted, refused, ledger transactions): {report}"
    );
    report
}

/// One discrepancy as a test that stages it expects it: kind, account, sequence,
/// event id.
pub type Finding = (DiscrepancyKind, String, Option<u64>, Option<String>);

/// The auditor's findings, in the order it reports them.
pub fn findings(report: &AuditReport) -> Vec<Finding> {
    report
        .discrepancies
        .iter()
        .map(|d| (d.kind, d.account.clone(), d.sequence, d.event_id.clone()))
        .collect()
}

/// The finding `kind` for `event`.
pub fn finding(kind: DiscrepancyKind, event: &OutboxEvent) -> Finding {
    (
        kind,
        event.account.to_string(),
        Some(event.sequence),
        Some(event.event_id.to_string()),
    )
}
