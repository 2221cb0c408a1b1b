//! `FormanceLedger::logs_after`: the ledger's log read after a log id, oldest first,
//! in bounded pages, over real HTTP — against `outbox-ledger-dev` (which lists newest
//! first, like Formance) and, for answers a real ledger should never give, a scripted
//! axum server on loopback.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use outbox_core::{Account, ErrorKind, EventId, Ledger, Metadata};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig, RunningDevLedger};
use outbox_ledger_formance::{FormanceConfig, FormanceLedger, LedgerLog};

const LEDGER: &str = "main";

async fn dev_ledger() -> RunningDevLedger {
    DevLedger::start(DevLedgerConfig {
        create_ledgers: vec![LEDGER.into()],
        ..DevLedgerConfig::default()
    })
    .await
    .expect("dev ledger starts")
}

fn client(base_url: &str, ledger: &str) -> FormanceLedger {
    let mut config = FormanceConfig::new(base_url, ledger);
    config.request_timeout_ms = 5_000;
    FormanceLedger::new(&config).expect("valid config")
}

fn transfer(amount: u64) -> Vec<u8> {
    format!(r#"{{"postings":[{{"source":"world","destination":"merchants:1:available","amount":{amount},"asset":"USD/2"}}],"metadata":{{}}}}"#).into_bytes()
}

/// Writes `count` logs: transactions, with an account metadata write every tenth.
async fn write_logs(ledger: &FormanceLedger, count: u64) {
    for i in 1..=count {
        if i % 10 == 0 {
            let metadata = Metadata::from([("n".to_owned(), i.to_string())]);
            ledger
                .save_account_metadata(
                    &format!("md-{i}"),
                    &Account::parse("merchants:1:available").unwrap(),
                    &metadata,
                )
                .await
                .unwrap();
        } else {
            ledger.post(EventId::new(), &transfer(i)).await.unwrap();
        }
    }
}

/// Reads the whole log after `after`, page by page, checking each page's bound.
async fn read_all(ledger: &FormanceLedger, after: u64, limit: usize) -> (Vec<LedgerLog>, usize) {
    let mut logs = Vec::new();
    let mut pages = 0;
    let mut from = after;
    loop {
        let page = ledger.logs_after(from, limit).await.unwrap();
        assert!(page.len() <= limit, "a page of {} > {limit}", page.len());
        let Some(last) = page.last() else {
            return (logs, pages);
        };
        from = last.id;
        pages += 1;
        logs.extend(page);
        assert!(pages < 1_000, "the log never ended");
    }
}

#[tokio::test]
async fn reads_the_whole_log_oldest_first_in_bounded_pages() {
    let dev = dev_ledger().await;
    let ledger = client(&dev.url(), LEDGER);
    assert!(ledger.logs_after(0, 10).await.unwrap().is_empty());

    write_logs(&ledger, 250).await;
    let (logs, pages) = read_all(&ledger, 0, 40).await;
    let ids: Vec<u64> = logs.iter().map(|l| l.id).collect();
    assert_eq!(ids, (1..=250).collect::<Vec<_>>());
    assert_eq!(pages, 7, "250 logs in pages of 40");

    let first = &logs[0];
    assert_eq!(first.kind, "NEW_TRANSACTION");
    let data: serde_json::Value = serde_json::from_str(first.data.get()).unwrap();
    assert_eq!(data["transaction"]["postings"][0]["amount"], 1);
    assert!(
        first
            .idempotency_key
            .as_deref()
            .is_some_and(|k| !k.is_empty()),
        "{first:?}"
    );
    assert!(
        first.hash.as_deref().is_some_and(|h| h.len() == 44),
        "{first:?}"
    );
    let tenth = &logs[9];
    assert_eq!(tenth.kind, "SET_METADATA");
    assert_eq!(tenth.idempotency_key.as_deref(), Some("md-10"));
    let data: serde_json::Value = serde_json::from_str(tenth.data.get()).unwrap();
    assert_eq!(data["metadata"]["n"], "10");
    assert!(logs.windows(2).all(|w| w[0].date <= w[1].date));

    // From the middle, to the end, past the end; limits are clamped to 1..=100.
    let middle = ledger.logs_after(100, 10).await.unwrap();
    assert_eq!(
        middle.iter().map(|l| l.id).collect::<Vec<_>>(),
        (101..=110).collect::<Vec<_>>()
    );
    assert_eq!(ledger.logs_after(249, 10).await.unwrap().len(), 1);
    assert!(ledger.logs_after(250, 10).await.unwrap().is_empty());
    assert!(ledger.logs_after(10_000, 10).await.unwrap().is_empty());
    assert_eq!(ledger.logs_after(0, 0).await.unwrap().len(), 1);
    assert_eq!(ledger.logs_after(0, 5_000).await.unwrap().len(), 100);

    // New logs written between two reads are found by the next one.
    write_logs(&ledger, 3).await;
    let tail = ledger.logs_after(250, 10).await.unwrap();
    assert_eq!(
        tail.iter().map(|l| l.id).collect::<Vec<_>>(),
        [251, 252, 253]
    );
    dev.shutdown().await;
}

#[tokio::test]
async fn errors_are_mapped_like_every_other_call() {
    let dev = dev_ledger().await;
    let missing = client(&dev.url(), "nope");
    let err = missing.logs_after(0, 10).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::NotFound, "{err}");
    assert_eq!(err.context("error_code"), Some("LEDGER_NOT_FOUND"), "{err}");
    assert_eq!(err.context("endpoint"), Some("/v2/nope/logs"), "{err}");
    assert!(!err.is_transient());

    let url = dev.url();
    dev.shutdown().await;
    let gone = client(&url, LEDGER);
    let err = gone.logs_after(0, 10).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Transport, "{err}");
    assert!(err.is_transient(), "{err}");
}

/// A server that answers every `/logs` request with the same newest-first page,
/// whatever the filter: what a ledger that ignored the id window would do.
async fn ignoring_filters(body: &'static str) -> String {
    let app = Router::new().route(
        "/v2/main/logs",
        get(move || async move { ([("content-type", "application/json")], body) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn log_json(id: u64) -> String {
    format!(
        r#"{{"type":"SET_METADATA","data":{{"targetType":"ACCOUNT","targetId":"a","metadata":{{}}}},"date":"2025-01-15T10:00:00Z","idempotencyKey":"","idempotencyHash":"","id":{id},"hash":"x"}}"#
    )
}

#[tokio::test]
async fn a_page_outside_the_requested_window_is_refused() {
    let logs: Vec<String> = (1..=5).rev().map(log_json).collect();
    let body = format!(
        r#"{{"cursor":{{"pageSize":15,"hasMore":false,"data":[{}]}}}}"#,
        logs.join(",")
    );
    let url = ignoring_filters(Box::leak(body.into_boxed_str())).await;
    let ledger = client(&url, LEDGER);
    let err = tokio::time::timeout(Duration::from_secs(10), ledger.logs_after(2, 2))
        .await
        .expect("answers in time")
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Ledger, "{err}");
    assert!(!err.is_transient());
    assert!(err.to_string().contains("outside"), "{err}");
    assert_eq!(err.context("endpoint"), Some("/v2/main/logs"), "{err}");

    let unreadable = ignoring_filters(r#"{"cursor":{"data":[{"id":"one"}]}}"#).await;
    let err = client(&unreadable, LEDGER)
        .logs_after(0, 2)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Ledger, "{err}");
    assert!(err.to_string().contains("log"), "{err}");
}
