//! `LogChain` and `FormanceLedger::verify_log_chain` against the dev ledger over real
//! HTTP: every log type the outbox writes (transactions with references, HTML
//! characters and account metadata, a revert, a rejection notice, metadata set and
//! deleted) recomputes to the hash the ledger serves across page boundaries, and a
//! hash or a payload corrupted by the dev ledger's fault plan breaks the chain at
//! exactly that log.

use outbox_core::{Account, EventId, Ledger, Metadata};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig, RunningDevLedger};
use outbox_ledger_formance::{ChainFault, FormanceConfig, FormanceLedger};

const LEDGER: &str = "chain";

async fn dev_ledger() -> RunningDevLedger {
    DevLedger::start(DevLedgerConfig {
        create_ledgers: vec![LEDGER.into()],
        ..DevLedgerConfig::default()
    })
    .await
    .expect("dev ledger starts")
}

fn client(dev: &RunningDevLedger) -> FormanceLedger {
    FormanceLedger::new(&FormanceConfig::new(dev.url(), LEDGER)).expect("valid config")
}

fn body(amount: u64, reference: Option<&str>) -> Vec<u8> {
    let reference = reference
        .map(|r| format!(r#","reference":"{r}""#))
        .unwrap_or_default();
    format!(
        r#"{{"postings":[{{"source":"world","destination":"merchants:4471:available","amount":{amount},"asset":"USD/2"}}],"metadata":{{"note":"<a&b>"}},"accountMetadata":{{"merchants:4471:available":{{"z":"1","a":"2"}}}}{reference}}}"#
    )
    .into_bytes()
}

/// 130 logs of every type, so the walk crosses page boundaries (100 per page).
async fn write_history(ledger: &FormanceLedger) -> u64 {
    let merchant = Account::parse("merchants:4471:available").unwrap();
    let first = ledger
        .post(
            EventId::new(),
            &body(48_500_000, Some("payout:settlement-2026-10-07:4471")),
        )
        .await
        .unwrap();
    let id = match first {
        outbox_core::PostOutcome::Accepted { transaction_id } => transaction_id,
        other => panic!("{other:?}"),
    };
    ledger
        .revert(
            EventId::new(),
            id,
            &Metadata::from([("why".to_owned(), "test".to_owned())]),
        )
        .await
        .unwrap();
    let notice = Metadata::from([(
        "outbox_rejected_code".to_owned(),
        "INSUFFICIENT_FUND".to_owned(),
    )]);
    ledger
        .save_account_metadata("notice-1", &merchant, &notice)
        .await
        .unwrap();
    for i in 0..127u64 {
        ledger
            .post(EventId::new(), &body(1 + i, None))
            .await
            .unwrap();
    }
    130
}

#[tokio::test]
async fn an_intact_chain_recomputes_from_the_first_log_across_pages() {
    let dev = dev_ledger().await;
    let ledger = client(&dev);
    let empty = ledger.verify_log_chain(|_| false).await.unwrap();
    assert_eq!((empty.checked, empty.through, empty.fault), (0, None, None));

    let logs = write_history(&ledger).await;
    let report = ledger.verify_log_chain(|_| false).await.unwrap();
    assert!(
        report.fault.is_none(),
        "{:?}",
        report.fault.map(|f| f.to_string())
    );
    assert_eq!((report.checked, report.through), (logs, Some(logs)));
    assert!(report.found.is_none());

    // The walk stops at the entry asked for, after checking it and all before it.
    let report = ledger.verify_log_chain(|log| log.id == 2).await.unwrap();
    let found = report.found.expect("log 2 found");
    assert_eq!((found.id, found.kind.as_str()), (2, "REVERTED_TRANSACTION"));
    assert_eq!((report.checked, report.through), (2, Some(2)));
}

#[tokio::test]
async fn a_corrupted_hash_or_payload_breaks_the_chain_at_that_log() {
    let dev = dev_ledger().await;
    let ledger = client(&dev);
    write_history(&ledger).await;

    dev.faults().corrupt_log_hash(105);
    let report = ledger.verify_log_chain(|_| false).await.unwrap();
    let fault = report.fault.expect("a broken chain");
    assert!(
        matches!(fault, ChainFault::Broken { log_id: 105, .. }),
        "{fault}"
    );
    assert!(
        fault.to_string().starts_with("chain BROKEN at log 105:"),
        "{fault}"
    );
    assert_eq!((report.checked, report.through), (104, Some(104)));

    dev.faults().clear();
    dev.faults().corrupt_log_data(3);
    let report = ledger.verify_log_chain(|_| false).await.unwrap();
    assert_eq!(report.fault.map(|f| f.log_id()), Some(3));
    assert_eq!(report.through, Some(2));

    // The entry searched for lies after the break: it is not reported as found.
    let report = ledger.verify_log_chain(|log| log.id == 50).await.unwrap();
    assert!(report.found.is_none());
    assert_eq!(report.fault.map(|f| f.log_id()), Some(3));
}
