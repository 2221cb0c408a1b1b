//! The balance check against a fake ledger that answers balances at a point in time.

use std::collections::HashMap;

use super::*;
use crate::ExceptionKind;
use crate::domain::Asset;
use crate::ledger::{BalanceDate, Balances};
use crate::reconcile::reading_ledger::ReadingLedger;
use crate::reconcile::statement::{Statement, StatementLine};

const PENDING: &str = "merchants:4471:payouts:pending";

struct History(Vec<PostedEvent>);

#[async_trait]
impl PostedHistory for History {
    async fn last_posted(
        &self,
        accounts: &[Account],
        _before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<PostedEvent>> {
        Ok(self
            .0
            .iter()
            .filter(|p| accounts.contains(&p.account))
            .take(limit)
            .cloned()
            .collect())
    }
}

fn usd() -> Asset {
    Asset::parse("USD/2").unwrap()
}

fn at() -> DateTime<Utc> {
    "2026-11-30T23:59:59Z".parse().unwrap()
}

fn line(account: &str, balance: i128) -> StatementLine {
    StatementLine {
        account: account.into(),
        asset: usd(),
        balance,
        as_of: at(),
        origin: "line 2".into(),
    }
}

fn ledger(entries: &[(&str, i128, i128)]) -> ReadingLedger {
    let mut balances = HashMap::new();
    for (account, effective, inserted) in entries {
        balances.insert(
            ((*account).to_owned(), BalanceDate::Effective),
            Balances::from([(usd(), *effective)]),
        );
        balances.insert(
            ((*account).to_owned(), BalanceDate::Insertion),
            Balances::from([(usd(), *inserted)]),
        );
    }
    ReadingLedger {
        balances,
        by_insertion: true,
        ..ReadingLedger::default()
    }
}

fn history() -> History {
    let account = Account::parse("merchants:4471").unwrap();
    History(
        [(12, 40), (11, 38)]
            .into_iter()
            .map(|(sequence, tx)| PostedEvent {
                account: account.clone(),
                sequence,
                event_id: EventId::new(),
                ledger_tx: Some(tx),
            })
            .collect(),
    )
}

fn statement(lines: Vec<StatementLine>) -> Statement {
    Statement { lines }
}

#[tokio::test]
async fn equal_balances_are_no_finding() {
    let ledger = ledger(&[
        (PENDING, 48_500_000, 48_500_000),
        ("merchants:9:available", -5, -5),
    ]);
    let lines = vec![line(PENDING, 48_500_000), line("merchants:9:available", -5)];
    let report = BalanceCheck::default()
        .run(&statement(lines), &ledger, &history())
        .await
        .unwrap();
    assert_eq!(report.check.findings, vec![]);
    assert_eq!(report.compared.len(), 2);
    assert_eq!(*ledger.asked_at.lock().unwrap(), vec![at(); 4]);
}

#[tokio::test]
async fn a_drift_either_way_names_account_asset_amounts_and_the_last_postings() {
    let ledger = ledger(&[(PENDING, 48_500_000, 48_500_000)]);
    for provider in [97_000_000, 0] {
        let report = BalanceCheck::default()
            .run(
                &statement(vec![line(PENDING, provider)]),
                &ledger,
                &history(),
            )
            .await
            .unwrap();
        assert_eq!(report.check.findings.len(), 1, "provider {provider}");
        let drift = &report.check.findings[0];
        assert_eq!(drift.kind, ExceptionKind::BalanceMismatch);
        assert_eq!(drift.account.as_str(), PENDING);
        assert_eq!(drift.asset.as_deref(), Some("USD/2"));
        assert_eq!(
            (drift.ledger_amount, drift.provider_amount),
            (Some(48_500_000), Some(provider))
        );
        assert_eq!((drift.sequence, drift.ledger_tx), (12, Some(40)));
        assert!(
            drift.detail.contains("merchants:4471 #11"),
            "{}",
            drift.detail
        );
        let sign = if provider > 48_500_000 {
            "+48500000"
        } else {
            "-48500000"
        };
        assert!(drift.detail.contains(sign), "{}", drift.detail);
    }
}

#[tokio::test]
async fn the_tolerance_is_an_integer_bound_inclusive() {
    let ledger = ledger(&[(PENDING, 1_000, 1_000)]);
    let check = BalanceCheck {
        tolerance: 2,
        ..BalanceCheck::default()
    };
    let run = |provider| {
        let check = check.clone();
        let ledger = &ledger;
        async move {
            check
                .run(
                    &statement(vec![line(PENDING, provider)]),
                    ledger,
                    &history(),
                )
                .await
                .unwrap()
                .check
                .findings
                .len()
        }
    };
    assert_eq!(
        (run(1_002).await, run(998).await, run(1_003).await),
        (0, 0, 1)
    );
}

#[tokio::test]
async fn a_backdated_transaction_shows_both_figures() {
    // The statement matched the ledger at its time; a transaction inserted later but
    // dated before it moved the effective-date answer.
    let ledger = ledger(&[(PENDING, 48_500_100, 48_500_000)]);
    let report = BalanceCheck::default()
        .run(
            &statement(vec![line(PENDING, 48_500_000)]),
            &ledger,
            &history(),
        )
        .await
        .unwrap();
    assert_eq!(report.check.findings.len(), 1);
    let drift = &report.check.findings[0];
    assert_eq!(drift.ledger_amount, Some(48_500_100));
    assert!(
        drift
            .detail
            .contains("by insertion date the ledger had 48500000"),
        "{}",
        drift.detail
    );
    assert!(
        drift.detail.contains("+100 from transactions dated before"),
        "{}",
        drift.detail
    );
}

#[tokio::test]
async fn an_empty_answer_is_unanswered_never_zero() {
    let ledger = ledger(&[]);
    let report = BalanceCheck::default()
        .run(&statement(vec![line(PENDING, 0)]), &ledger, &history())
        .await
        .unwrap();
    assert_eq!(report.check.findings, vec![]);
    assert_eq!(report.unanswered.len(), 1);
    assert!(report.unanswered[0].contains("not zero"));
}

#[tokio::test]
async fn without_insertion_dates_the_check_says_so_once() {
    let mut ledger = ledger(&[(PENDING, 5, 5), ("merchants:1:available", 7, 7)]);
    ledger.by_insertion = false;
    let lines = vec![line(PENDING, 5), line("merchants:1:available", 7)];
    let report = BalanceCheck::default()
        .run(&statement(lines), &ledger, &history())
        .await
        .unwrap();
    assert_eq!(report.check.findings, vec![]);
    assert_eq!(report.check.notes.len(), 1);
    assert_eq!(report.compared[0].ledger_by_insertion, None);
}

#[tokio::test]
async fn the_account_filter_and_the_time_override_apply() {
    let ledger = ledger(&[(PENDING, 5, 5)]);
    let other: DateTime<Utc> = "2026-11-15T00:00:00Z".parse().unwrap();
    let check = BalanceCheck {
        accounts: Some("merchants:*:payouts:**".into()),
        at: Some(other),
        ..BalanceCheck::default()
    };
    let lines = vec![line(PENDING, 5), line("banks:main", 1)];
    let report = check
        .run(&statement(lines), &ledger, &history())
        .await
        .unwrap();
    assert_eq!(report.check.checked, 1);
    assert_eq!(*ledger.asked_at.lock().unwrap(), vec![other, other]);
}

#[test]
fn patterns_match_by_segment() {
    assert!(account_matches("merchants:*:payouts:pending", PENDING));
    assert!(!account_matches("merchants:*:payouts", PENDING));
    assert!(account_matches("merchants:4471:**", PENDING));
    assert!(!account_matches("merchants:4472:**", PENDING));
    assert!(account_matches(PENDING, PENDING));
    assert_eq!(
        owning_accounts(PENDING)
            .iter()
            .map(Account::as_str)
            .collect::<Vec<_>>(),
        vec![
            PENDING,
            "merchants:4471:payouts",
            "merchants:4471",
            "merchants"
        ]
    );
}
