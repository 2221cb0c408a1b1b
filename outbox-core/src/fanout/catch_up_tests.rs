//! Catch-up against in-memory fakes: a fan-out store that dedups like the real ones
//! (the real stores pass the testkit suite; the end-to-end proof is
//! `tests/tests/catch_up.rs`) and a scripted ledger log.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use tokio::sync::watch;

use super::*;
use crate::domain::Account;
use crate::error::{Error, ErrorKind, Result};
use crate::inbox::MessageKind;
use crate::relay::Wakeup;

/// Dedups on the delivery id and on each message's dedup key, atomically; can be
/// told to fail the append of one delivery.
#[derive(Default)]
struct DedupStore {
    messages: Mutex<Vec<StoredMessage>>,
    deliveries: Mutex<HashSet<String>>,
    cursors: Mutex<HashMap<String, u64>>,
    fail_delivery: Mutex<Option<String>>,
    appends: Mutex<Vec<String>>,
}

impl DedupStore {
    fn stored_keys(&self) -> Vec<String> {
        let messages = self.messages.lock().unwrap();
        messages.iter().map(|m| m.message.dedup_key()).collect()
    }

    fn cursor(&self, name: &str) -> u64 {
        self.cursors.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

#[async_trait]
impl FanoutStore for DedupStore {
    async fn append(&self, delivery_id: &str, messages: &[FanoutMessage]) -> Result<AppendOutcome> {
        self.appends.lock().unwrap().push(delivery_id.to_owned());
        if self.fail_delivery.lock().unwrap().as_deref() == Some(delivery_id) {
            return Err(Error::new(ErrorKind::Storage, "disk full").transient(None));
        }
        if !self
            .deliveries
            .lock()
            .unwrap()
            .insert(delivery_id.to_owned())
        {
            return Ok(AppendOutcome {
                delivery_seen: true,
                ..AppendOutcome::default()
            });
        }
        let mut stored = self.messages.lock().unwrap();
        let mut outcome = AppendOutcome::default();
        for message in messages {
            if stored
                .iter()
                .any(|m| m.message.dedup_key() == message.dedup_key())
            {
                outcome.duplicates += 1;
            } else {
                let position = stored.len() as u64 + 1;
                stored.push(StoredMessage {
                    position,
                    message: message.clone(),
                    received_at: Utc::now(),
                });
                outcome.stored += 1;
            }
        }
        Ok(outcome)
    }

    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<StoredMessage>> {
        let messages = self.messages.lock().unwrap();
        Ok(messages
            .iter()
            .filter(|m| m.position > after)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn load_cursor(&self, name: &str) -> Result<u64> {
        Ok(self.cursor(name))
    }

    async fn save_cursor(&self, name: &str, position: u64) -> Result<()> {
        let mut cursors = self.cursors.lock().unwrap();
        let cursor = cursors.entry(name.to_owned()).or_default();
        *cursor = (*cursor).max(position);
        Ok(())
    }

    // Catch-up never touches dead letters: this fake keeps none.
    async fn append_dead_letters(&self, letters: &[NewDeadLetter]) -> Result<Vec<u64>> {
        Ok((1..=letters.len() as u64).collect())
    }

    async fn read_dead_letters(&self, _query: &DeadLetterQuery<'_>) -> Result<Vec<DeadLetter>> {
        Ok(Vec::new())
    }

    async fn read_set_aside(
        &self,
        _destination: &str,
        _account: &Account,
        _after: u64,
        _limit: usize,
    ) -> Result<Vec<StoredMessage>> {
        Ok(Vec::new())
    }

    async fn request_replay(&self, destination: &str, account: &Account) -> Result<ReplayRequest> {
        Err(Error::new(
            ErrorKind::NotFound,
            format!("{destination}: no dead letter for {account}"),
        ))
    }

    async fn read_replay_requests(
        &self,
        _destination: &str,
        _after: u64,
    ) -> Result<Vec<ReplayRequest>> {
        Ok(Vec::new())
    }
}

/// A ledger log held in memory; records every `read_after` call.
#[derive(Default)]
struct ScriptedLog {
    entries: Mutex<Vec<LedgerLogEntry>>,
    reads: Mutex<Vec<(u64, usize)>>,
    /// Answer this page instead, once (to break the ordering contract).
    rogue_page: Mutex<Option<Vec<LedgerLogEntry>>>,
    fail_reads: Mutex<usize>,
}

impl ScriptedLog {
    /// An entry written an hour ago.
    fn push(&self, messages: Vec<FanoutMessage>) -> u64 {
        self.push_at(Utc::now() - chrono::Duration::hours(1), messages)
    }

    fn push_at(&self, date: chrono::DateTime<Utc>, messages: Vec<FanoutMessage>) -> u64 {
        let mut entries = self.entries.lock().unwrap();
        let id = entries.len() as u64 + 1;
        entries.push(LedgerLogEntry { id, date, messages });
        id
    }
}

#[async_trait]
impl LedgerLogSource for ScriptedLog {
    fn ledger(&self) -> &str {
        "payouts"
    }

    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerLogEntry>> {
        self.reads.lock().unwrap().push((after, limit));
        {
            let mut failures = self.fail_reads.lock().unwrap();
            if *failures > 0 {
                *failures -= 1;
                return Err(Error::new(ErrorKind::Transport, "connection refused").transient(None));
            }
        }
        if let Some(page) = self.rogue_page.lock().unwrap().take() {
            return Ok(page);
        }
        let entries = self.entries.lock().unwrap();
        Ok(entries
            .iter()
            .filter(|e| e.id > after)
            .take(limit)
            .cloned()
            .collect())
    }
}

fn committed(account: &str, sequence: u64, tx: u64) -> FanoutMessage {
    FanoutMessage {
        instruction_id: format!("{account}#{sequence}"),
        account: Account::parse(account).unwrap(),
        sequence,
        kind: MessageKind::Committed,
        ledger: "payouts".into(),
        ledger_tx_id: Some(tx),
        traceparent: None,
        tracestate: None,
        payload: format!(r#"{{"id":{tx}}}"#).into_bytes(),
    }
}

fn setup() -> (Arc<DedupStore>, Arc<ScriptedLog>, CatchUp) {
    let store = Arc::new(DedupStore::default());
    let log = Arc::new(ScriptedLog::default());
    let catch_up = CatchUp::new(store.clone(), log.clone()).with_page_size(2);
    (store, log, catch_up)
}

async fn run(catch_up: &CatchUp, since: Option<u64>) -> (CatchUpReport, Vec<(u64, String)>) {
    let mut seen = Vec::new();
    let report = catch_up
        .run_once(since, &mut |id, m| seen.push((id, m.dedup_key())))
        .await
        .unwrap();
    (report, seen)
}

#[tokio::test]
async fn fills_the_gap_the_webhooks_left_and_moves_the_checkpoint() {
    let (store, log, catch_up) = setup();
    let wakeup = Wakeup::new();
    let catch_up = catch_up.with_wakeup(wakeup.clone());
    // Log: tx 1 (its webhook arrived), a foreign entry, tx 2 (webhook lost), a
    // metadata entry without a message, tx 3 (webhook lost).
    log.push(vec![committed("merchants:1", 1, 1)]);
    log.push(Vec::new());
    log.push(vec![committed("merchants:1", 2, 2)]);
    log.push(Vec::new());
    log.push(vec![committed("merchants:2", 1, 3)]);
    store
        .append("webhook-1", &[committed("merchants:1", 1, 1)])
        .await
        .unwrap();

    let (report, seen) = run(&catch_up, None).await;
    assert_eq!(
        report,
        CatchUpReport {
            after: 0,
            through: 5,
            logs: 5,
            messages: 3,
            appended: 2,
            duplicates: 1,
            checkpoint: 5,
            settling: false,
        }
    );
    assert_eq!(
        seen,
        [
            (3, "payouts:tx:2:committed".to_owned()),
            (5, "payouts:tx:3:committed".to_owned())
        ]
    );
    assert_eq!(
        store.stored_keys(),
        [
            "payouts:tx:1:committed",
            "payouts:tx:2:committed",
            "payouts:tx:3:committed"
        ]
    );
    assert_eq!(store.cursor("ledger-log:payouts"), 5);
    assert_eq!(catch_up.checkpoint().await.unwrap(), 5);
    // One delivery per entry that implies messages, named after the log entry.
    assert_eq!(
        *store.appends.lock().unwrap(),
        [
            "webhook-1",
            "ledger-log:payouts:1",
            "ledger-log:payouts:3",
            "ledger-log:payouts:5"
        ]
    );
    // Pages of two, then the empty page that ends the log.
    assert_eq!(*log.reads.lock().unwrap(), [(0, 2), (2, 2), (4, 2), (5, 2)]);
    tokio::time::timeout(Duration::from_secs(1), wakeup.notified())
        .await
        .expect("the fan-out loops were woken");

    // A later webhook for a message catch-up stored is a duplicate in the store.
    let late = store
        .append("webhook-3", &[committed("merchants:2", 1, 3)])
        .await
        .unwrap();
    assert_eq!((late.stored, late.duplicates), (0, 1));

    // The next run starts at the checkpoint: nothing re-read, nothing appended.
    log.reads.lock().unwrap().clear();
    let (report, seen) = run(&catch_up, None).await;
    assert_eq!((report.after, report.logs, report.appended), (5, 0, 0));
    assert!(seen.is_empty());
    assert_eq!(*log.reads.lock().unwrap(), [(5, 2)]);
    // New entries are picked up from there.
    log.push(vec![committed("merchants:2", 2, 4)]);
    let (report, _) = run(&catch_up, None).await;
    assert_eq!((report.after, report.through, report.appended), (5, 6, 1));
}

#[tokio::test]
async fn after_normal_webhook_delivery_everything_is_a_duplicate() {
    let (store, log, catch_up) = setup();
    for tx in 1..=3 {
        let message = committed("merchants:1", tx, tx);
        store
            .append(&format!("webhook-{tx}"), std::slice::from_ref(&message))
            .await
            .unwrap();
        log.push(vec![message]);
    }
    let (report, seen) = run(&catch_up, None).await;
    assert_eq!(
        (report.messages, report.appended, report.duplicates),
        (3, 0, 3)
    );
    assert!(seen.is_empty());
    assert_eq!(store.stored_keys().len(), 3);
    assert_eq!(report.checkpoint, 3);
}

#[tokio::test]
async fn since_rescans_without_moving_the_checkpoint_backwards() {
    let (store, log, catch_up) = setup();
    for tx in 1..=4 {
        log.push(vec![committed("merchants:1", tx, tx)]);
    }
    run(&catch_up, None).await;
    assert_eq!(store.cursor("ledger-log:payouts"), 4);

    // From log 2, inclusive: re-read, nothing new, the checkpoint stays at 4.
    let (report, seen) = run(&catch_up, Some(2)).await;
    assert_eq!(
        (
            report.after,
            report.through,
            report.logs,
            report.appended,
            report.duplicates
        ),
        (1, 4, 3, 0, 3)
    );
    assert!(seen.is_empty());
    assert_eq!(
        (report.checkpoint, store.cursor("ledger-log:payouts")),
        (4, 4)
    );

    // A rescan that reads past the checkpoint moves it forward.
    log.push(vec![committed("merchants:1", 5, 5)]);
    let (report, _) = run(&catch_up, Some(3)).await;
    assert_eq!((report.appended, report.checkpoint), (1, 5));
    assert_eq!(store.cursor("ledger-log:payouts"), 5);
    // `since` past the end reads nothing and changes nothing.
    let (report, _) = run(&catch_up, Some(99)).await;
    assert_eq!((report.logs, report.checkpoint), (0, 5));
}

#[tokio::test]
async fn a_failed_append_keeps_the_checkpoint_before_it_and_the_next_run_resumes() {
    let (store, log, catch_up) = setup();
    for tx in 1..=5 {
        log.push(vec![committed("merchants:1", tx, tx)]);
    }
    *store.fail_delivery.lock().unwrap() = Some("ledger-log:payouts:4".into());
    let err = catch_up.run_once(None, &mut |_, _| {}).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert_eq!(err.context("log_id"), Some("4"), "{err}");
    // The page of logs 1–2 was saved; the page holding 3 and the failed 4 was not.
    assert_eq!(store.cursor("ledger-log:payouts"), 2);
    assert_eq!(store.stored_keys().len(), 3);

    *store.fail_delivery.lock().unwrap() = None;
    let (report, seen) = run(&catch_up, None).await;
    assert_eq!((report.after, report.checkpoint), (2, 5));
    // Log 3 was stored before the failure: its re-append is "already seen".
    assert_eq!((report.appended, report.duplicates), (2, 1));
    assert_eq!(seen.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [4, 5]);
    assert_eq!(store.stored_keys().len(), 5);
}

#[tokio::test]
async fn a_source_answering_out_of_order_is_an_error_and_moves_nothing() {
    let (store, log, catch_up) = setup();
    log.push(vec![committed("merchants:1", 1, 1)]);
    log.push(vec![committed("merchants:1", 2, 2)]);
    run(&catch_up, None).await;
    *log.rogue_page.lock().unwrap() = Some(vec![LedgerLogEntry {
        id: 1,
        date: Utc::now() - chrono::Duration::hours(1),
        messages: Vec::new(),
    }]);
    let err = catch_up.run_once(None, &mut |_, _| {}).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Internal, "{err}");
    assert!(err.to_string().contains("out of order"), "{err}");
    assert_eq!(store.cursor("ledger-log:payouts"), 2);
}

#[tokio::test]
async fn entries_younger_than_the_settle_time_are_left_to_their_webhooks() {
    let (store, log, catch_up) = setup();
    let catch_up = catch_up.with_settle(Duration::from_secs(60));
    log.push(vec![committed("merchants:1", 1, 1)]);
    log.push(vec![committed("merchants:1", 2, 2)]);
    log.push(Vec::new());
    log.push_at(Utc::now(), vec![committed("merchants:1", 3, 3)]);
    log.push_at(Utc::now(), vec![committed("merchants:1", 4, 4)]);
    let (report, seen) = run(&catch_up, None).await;
    assert_eq!(
        (
            report.through,
            report.appended,
            report.checkpoint,
            report.settling
        ),
        (3, 2, 3, true)
    );
    assert_eq!(seen.len(), 2);
    assert_eq!(store.cursor("ledger-log:payouts"), 3);
    // Its webhook came meanwhile; once settled, catch-up finds it already stored.
    store
        .append("webhook-3", &[committed("merchants:1", 3, 3)])
        .await
        .unwrap();
    let immediate = CatchUp::new(store.clone(), log.clone());
    let (report, seen) = run(&immediate, None).await;
    assert_eq!(
        (
            report.after,
            report.appended,
            report.duplicates,
            report.settling
        ),
        (3, 1, 1, false)
    );
    assert_eq!(seen, [(5, "payouts:tx:4:committed".to_owned())]);
}

#[tokio::test]
async fn the_periodic_run_survives_failures_and_stops_on_signal() {
    let (store, log, catch_up) = setup();
    log.push(vec![committed("merchants:1", 1, 1)]);
    *log.fail_reads.lock().unwrap() = 2;
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(catch_up.run_every(Duration::from_millis(20), stopped));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while store.stored_keys().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "catch-up never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        log.reads.lock().unwrap().len() >= 3,
        "two failed runs, then one that read"
    );
    log.push(vec![committed("merchants:1", 2, 2)]);
    while store.stored_keys().len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the next tick never ran"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("stopped on the signal")
        .unwrap();
}
