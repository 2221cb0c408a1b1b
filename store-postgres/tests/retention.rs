//! Retention on PostgreSQL: one stored policy per database, never shorter than the
//! ledger's; the outbox leaves by daily partitions, the fan-out log, the inbox's
//! markers and the exception queue by whole expired days through a retention permit;
//! any other DELETE is refused by the database. Old rows are written straight into
//! the tables with old timestamps (the store stamps its own rows with `now()`).

mod common;

use chrono::{DateTime, Days, NaiveDate, Utc};
use outbox_core::{
    DeliveryOutcome, DeliveryRecord, ErrorKind, EventId, ExceptionKind, Keep, NewException,
    OutboxEvent, PeriodOutcome, RetentionFamily, RetentionPolicy, RetentionReport, Store,
};
use outbox_store_postgres::{
    RetentionOptions, apply_retention, enqueue, load_retention_policy, map_error,
    save_retention_policy,
};
use outbox_testkit::fixtures::payout;
use sqlx::{AssertSqlSafe, PgPool};

use common::{TestDb, open_store};

fn keep(text: &str) -> Keep {
    Keep::parse_field("keep", text).unwrap()
}

fn policy(ours: &str, ledger: &str) -> RetentionPolicy {
    RetentionPolicy::new(keep(ours), keep(ledger)).unwrap()
}

/// A 30-day policy: every day from 31 days ago back is past retention.
async fn with_policy(db: &TestDb) {
    save_retention_policy(db.pool(), &policy("30d", "30d"), "ops@test")
        .await
        .unwrap();
}

fn run() -> RetentionOptions<'static> {
    RetentionOptions {
        granted_by: "job",
        outbox_older_than: None,
    }
}

fn day(days_ago: u64) -> NaiveDate {
    Utc::now().date_naive() - Days::new(days_ago)
}

fn noon(days_ago: u64) -> DateTime<Utc> {
    day(days_ago).and_hms_opt(12, 0, 0).unwrap().and_utc()
}

async fn execute(pool: &PgPool, sql: &str) -> outbox_core::Result<u64> {
    sqlx::query(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .map(|done| done.rows_affected())
        .map_err(map_error)
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn message(pool: &PgPool, account: &str, sequence: i64, at: DateTime<Utc>) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO fanout_messages (dedup_key, instruction_id, account, sequence, kind, ledger,
             payload, received_at)
         VALUES ($1, $1, $2, $3, 'committed', 'payouts', '\\x7b7d', $4) RETURNING position",
    )
    .bind(EventId::new().to_string())
    .bind(account)
    .bind(sequence)
    .bind(at)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn cursor(pool: &PgPool, name: &str, position: i64) {
    sqlx::query(
        "INSERT INTO fanout_cursors (transport, position) VALUES ($1, $2)
         ON CONFLICT (transport) DO UPDATE SET position = excluded.position",
    )
    .bind(name)
    .bind(position)
    .execute(pool)
    .await
    .unwrap();
}

async fn dead_letter(
    pool: &PgPool,
    destination: &str,
    position: i64,
    account: &str,
    reason: &str,
    at: DateTime<Utc>,
) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO fanout_dead_letters (destination, position, account, sequence, instruction_id,
             reason, error, dead_lettered_at)
         VALUES ($1, $2, $3, 1, 'i', $4, '422 refused', $5) RETURNING id",
    )
    .bind(destination)
    .bind(position)
    .bind(account)
    .bind(reason)
    .bind(at)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn replay_request(pool: &PgPool, destination: &str, account: &str, refusal: i64) {
    sqlx::query(
        "INSERT INTO fanout_replay_requests (destination, account, refusal_id, requested_at)
         VALUES ($1, $2, $3, $4)",
    )
    .bind(destination)
    .bind(account)
    .bind(refusal)
    .bind(noon(40))
    .execute(pool)
    .await
    .unwrap();
}

async fn marker(pool: &PgPool, consumer: &str, account: &str, sequence: i64, at: DateTime<Utc>) {
    sqlx::query(
        "WITH m AS (
             INSERT INTO inbox_messages (consumer, instruction_id, account, sequence, kind, applied_at)
             VALUES ($1, $2, $3, $4, 'committed', $5))
         INSERT INTO inbox_accounts (consumer, account, last_applied) VALUES ($1, $3, $4)
         ON CONFLICT (consumer, account) DO UPDATE SET last_applied = excluded.last_applied",
    )
    .bind(consumer)
    .bind(EventId::new().to_string())
    .bind(account)
    .bind(sequence)
    .bind(at)
    .execute(pool)
    .await
    .unwrap();
}

/// An open exception detected at `at`; returns its id.
async fn exception(pool: &PgPool, account: &str, sequence: i64, at: DateTime<Utc>) -> i64 {
    let identity = NewException::new(
        "relay",
        ExceptionKind::Rejected,
        outbox_core::Account::parse(account).unwrap(),
        sequence as u64,
        "INSUFFICIENT_FUND",
    )
    .identity();
    sqlx::query_scalar(
        "INSERT INTO exceptions (source, kind, severity, account, sequence, detail, detected_at,
             identity, recurrence)
         VALUES ('relay', 'rejected', 'info', $1, $2, 'INSUFFICIENT_FUND', $3, $4, 0)
         RETURNING id",
    )
    .bind(account)
    .bind(sequence)
    .bind(at)
    .bind(identity)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn resolve(pool: &PgPool, exception_id: i64) {
    sqlx::query(
        "INSERT INTO exception_resolutions (exception_id, resolved_by, note)
         VALUES ($1, 'alice', 'refund sent')",
    )
    .bind(exception_id)
    .execute(pool)
    .await
    .unwrap();
}

async fn resolved_exception(pool: &PgPool, account: &str, sequence: i64, at: DateTime<Utc>) {
    let id = exception(pool, account, sequence, at).await;
    resolve(pool, id).await;
}

/// A UUID v7 minted at noon UTC of `day` plus `n` ms: it lands in that day's partition.
fn id_on(day: NaiveDate, n: u64) -> EventId {
    let ms = day
        .and_hms_opt(12, 0, 0)
        .unwrap()
        .and_utc()
        .timestamp_millis() as u64
        + n;
    let random = *uuid::Uuid::now_v7().as_bytes();
    let mut tail = [0u8; 10];
    tail.copy_from_slice(&random[6..]);
    EventId::from_uuid(uuid::Builder::from_unix_timestamp_millis(ms, &tail).into_uuid()).unwrap()
}

async fn enqueue_on(db: &TestDb, account: &str, day: NaiveDate, n: u64) -> OutboxEvent {
    let mut tx = db.pool().begin().await.unwrap();
    let stored = enqueue(&mut tx, &payout(account, 100).with_event_id(id_on(day, n)))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    stored
}

async fn deliver(db: &TestDb, event: &OutboxEvent, outcome: DeliveryOutcome) {
    db.store
        .append_deliveries(&[DeliveryRecord {
            event_id: event.event_id,
            attempt: 1,
            outcome,
            ledger_tx_id: Some(1),
            error_code: None,
            detail: None,
            at: Utc::now(),
        }])
        .await
        .unwrap();
}

fn verdict(report: &RetentionReport, family: RetentionFamily, day: NaiveDate) -> PeriodOutcome {
    let found: Vec<_> = report
        .periods
        .iter()
        .filter(|p| p.family == family && p.day == day)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one verdict on {} {day} expected in {report:#?}",
        family.as_str()
    );
    found[0].outcome.clone()
}

fn kept_reason(report: &RetentionReport, family: RetentionFamily, day: NaiveDate) -> String {
    match verdict(report, family, day) {
        PeriodOutcome::Kept { reason } => reason,
        other => panic!("{} {day} was not kept: {other:?}", family.as_str()),
    }
}

fn dropped_rows(report: &RetentionReport, family: RetentionFamily, day: NaiveDate) -> u64 {
    match verdict(report, family, day) {
        PeriodOutcome::Dropped { rows } => rows,
        other => panic!("{} {day} was not dropped: {other:?}", family.as_str()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_shorter_than_the_ledgers_is_refused_by_the_database_too() {
    let Some(db) = open_store().await else { return };
    // Finite under a ledger that keeps forever, or 90 days under a ledger's 400.
    for values in ["7776000, 34560000", "1, NULL"] {
        let sql = format!(
            "INSERT INTO outbox_retention_policies (keep_seconds, ledger_keeps_seconds, set_by)
             VALUES ({values}, 'ops')"
        );
        assert!(execute(db.pool(), &sql).await.is_err(), "{sql} was stored");
    }
    assert_eq!(load_retention_policy(db.pool()).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_policy_wins_and_records_who_and_when() {
    let Some(db) = open_store().await else { return };
    assert_eq!(db.store.load_retention_policy().await.unwrap(), None);
    let before = Utc::now() - chrono::Duration::seconds(5);
    let first = db
        .store
        .save_retention_policy(&policy("400d", "400d"), "alice")
        .await
        .unwrap();
    let second = db
        .store
        .save_retention_policy(&policy("forever", "forever"), "bob")
        .await
        .unwrap();
    assert!(second.id > first.id);
    let loaded = load_retention_policy(db.pool()).await.unwrap().unwrap();
    assert_eq!(loaded, second);
    assert_eq!(loaded.policy.keep(), Keep::Forever);
    assert_eq!(loaded.set_by, "bob");
    assert!(loaded.set_at >= before && loaded.set_at <= Utc::now());
    for sql in [
        "UPDATE outbox_retention_policies SET keep_seconds = 1",
        "DELETE FROM outbox_retention_policies",
        "TRUNCATE outbox_retention_policies",
    ] {
        let err = execute(db.pool(), sql).await.expect_err(sql);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
    }
    let err = save_retention_policy(db.pool(), &policy("1d", "1d"), " ")
        .await
        .unwrap_err();
    assert_eq!(err.field(), Some("set_by"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_without_a_stored_policy_is_refused_naming_the_policy() {
    let Some(db) = open_store().await else { return };
    let err = apply_retention(db.pool(), &run()).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::NotFound, "{err}");
    assert_eq!(err.context("field"), Some("policy"), "{err}");
    assert!(err.message().contains("outbox retention set"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_partitions_follow_the_policy_and_an_override_may_not_undercut_the_ledger() {
    let Some(db) = open_store().await else { return };
    save_retention_policy(db.pool(), &policy("5d", "5d"), "ops")
        .await
        .unwrap();
    db.store.ensure_partitions(day(10), 3).await.unwrap();
    let delivered = enqueue_on(&db, "r1", day(10), 0).await;
    deliver(&db, &delivered, DeliveryOutcome::Accepted).await;
    let rejected = enqueue_on(&db, "r1", day(10), 1).await;
    deliver(&db, &rejected, DeliveryOutcome::Rejected).await;
    let pending = enqueue_on(&db, "r2", day(9), 0).await;
    deliver(&db, &pending, DeliveryOutcome::Failed).await;

    let err = apply_retention(
        db.pool(),
        &RetentionOptions {
            granted_by: "job",
            outbox_older_than: Some(std::time::Duration::from_secs(2 * 86_400)),
        },
    )
    .await
    .unwrap_err();
    assert_eq!(err.field(), Some("older_than"), "{err}");
    assert!(err.message().contains("shorter than the ledger's"), "{err}");

    let report = apply_retention(db.pool(), &run()).await.unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Outbox, day(10)), 4);
    let reason = kept_reason(&report, RetentionFamily::Outbox, day(9));
    assert!(
        reason.contains("1 events without a terminal delivery"),
        "{reason}"
    );
    let names: Vec<String> = db
        .store
        .partitions()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    let tag = day(10).format("%Y%m%d").to_string();
    assert!(!names.iter().any(|n| n.ends_with(&tag)), "{names:?}");
    assert_eq!(
        count(db.pool(), "SELECT count(*) FROM outbox_events").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_days_leave_once_every_destination_read_them() {
    let Some(db) = open_store().await else { return };
    with_policy(&db).await;
    let pool = db.pool();
    message(pool, "merchants:1", 1, noon(40)).await;
    let second = message(pool, "merchants:2", 1, noon(40)).await;
    message(pool, "merchants:1", 2, noon(39)).await;
    let fourth = message(pool, "merchants:2", 2, noon(39)).await;
    for (id, at) in [("wh-1", noon(40)), ("wh-2", noon(39))] {
        sqlx::query("INSERT INTO fanout_deliveries (delivery_id, received_at) VALUES ($1, $2)")
            .bind(id)
            .bind(at)
            .execute(pool)
            .await
            .unwrap();
    }
    cursor(pool, "kafka://k:9092/payouts", fourth).await;
    cursor(pool, "https://hooks.example/treasury", second).await;
    cursor(pool, "ledger-log:payouts", 1).await;
    cursor(pool, "kafka://k:9092/payouts@replayed:merchants:1", 0).await;

    let report = apply_retention(pool, &run()).await.unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Fanout, day(40)), 3);
    let reason = kept_reason(&report, RetentionFamily::Fanout, day(39));
    assert!(
        reason.contains("https://hooks.example/treasury") && reason.contains(&second.to_string()),
        "{reason}"
    );
    assert_eq!(count(pool, "SELECT count(*) FROM fanout_messages").await, 2);

    cursor(pool, "https://hooks.example/treasury", fourth).await;
    let report = apply_retention(pool, &run()).await.unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Fanout, day(39)), 3);
    assert_eq!(count(pool, "SELECT count(*) FROM fanout_messages").await, 0);
    assert_eq!(
        count(pool, "SELECT count(*) FROM fanout_deliveries").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fanout_day_no_destination_has_read_stays() {
    let Some(db) = open_store().await else { return };
    with_policy(&db).await;
    message(db.pool(), "merchants:1", 1, noon(40)).await;
    let report = apply_retention(db.pool(), &run()).await.unwrap();
    let reason = kept_reason(&report, RetentionFamily::Fanout, day(40));
    assert!(reason.contains("no destination"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_lettered_messages_keep_their_day_until_replayed_then_the_group_leaves() {
    let Some(db) = open_store().await else { return };
    with_policy(&db).await;
    let pool = db.pool();
    let dest = "https://hooks.example/treasury";
    let refused = message(pool, "merchants:1", 1, noon(40)).await;
    let set_aside = message(pool, "merchants:1", 2, noon(40)).await;
    let other = message(pool, "merchants:2", 1, noon(40)).await;
    cursor(pool, dest, other).await;
    let refusal = dead_letter(pool, dest, refused, "merchants:1", "refused", noon(40)).await;
    dead_letter(pool, dest, set_aside, "merchants:1", "set_aside", noon(40)).await;

    let report = apply_retention(pool, &run()).await.unwrap();
    let reason = kept_reason(&report, RetentionFamily::Fanout, day(40));
    assert!(
        reason.contains("parked") && reason.contains("merchants:1"),
        "{reason}"
    );
    let reason = kept_reason(&report, RetentionFamily::FanoutDeadLetters, day(40));
    assert!(reason.contains("parked"), "{reason}");

    replay_request(pool, dest, "merchants:1", refusal).await;
    cursor(pool, &format!("{dest}@replayed:merchants:1"), refused).await;
    let report = apply_retention(pool, &run()).await.unwrap();
    let reason = kept_reason(&report, RetentionFamily::Fanout, day(40));
    assert!(reason.contains("replaying"), "{reason}");

    cursor(pool, &format!("{dest}@replayed:merchants:1"), set_aside).await;
    let report = apply_retention(pool, &run()).await.unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Fanout, day(40)), 3);
    assert_eq!(
        dropped_rows(&report, RetentionFamily::FanoutDeadLetters, day(40)),
        3
    );
    for table in [
        "fanout_messages",
        "fanout_dead_letters",
        "fanout_replay_requests",
    ] {
        assert_eq!(
            count(pool, &format!("SELECT count(*) FROM {table}")).await,
            0,
            "{table}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_markers_leave_by_day_and_the_high_water_marks_stay() {
    let Some(db) = open_store().await else { return };
    with_policy(&db).await;
    let pool = db.pool();
    marker(pool, "treasury", "merchants:1", 1, noon(40)).await;
    marker(pool, "treasury", "merchants:1", 2, noon(40)).await;
    marker(pool, "treasury", "merchants:2", 1, noon(40)).await;
    marker(pool, "treasury", "merchants:2", 2, noon(5)).await;
    let report = apply_retention(pool, &run()).await.unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Inbox, day(40)), 3);
    assert_eq!(count(pool, "SELECT count(*) FROM inbox_messages").await, 1);
    let marks: Vec<(String, i64)> =
        sqlx::query_as("SELECT account, last_applied FROM inbox_accounts ORDER BY account")
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(
        marks,
        [("merchants:1".to_owned(), 2), ("merchants:2".to_owned(), 2)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_message_keeps_its_accounts_markers() {
    let Some(db) = open_store().await else { return };
    with_policy(&db).await;
    let pool = db.pool();
    marker(pool, "treasury", "merchants:1", 1, noon(40)).await;
    execute(
        pool,
        "INSERT INTO inbox_held (consumer, account, sequence, instruction_id, kind, payload, held_at)
         VALUES ('treasury', 'merchants:1', 3, 'i-3', 'committed', '\\x7b7d', now())",
    )
    .await
    .unwrap();
    let report = apply_retention(pool, &run()).await.unwrap();
    let reason = kept_reason(&report, RetentionFamily::Inbox, day(40));
    assert!(
        reason.contains("treasury") && reason.contains("merchants:1") && reason.contains("held"),
        "{reason}"
    );
    assert_eq!(count(pool, "SELECT count(*) FROM inbox_messages").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceptions_leave_unless_their_account_still_has_something_pending() {
    let Some(db) = open_store().await else { return };
    with_policy(&db).await;
    let pool = db.pool();
    resolved_exception(pool, "merchants:1", 1, noon(40)).await;
    resolved_exception(pool, "merchants:r2", 4, noon(39)).await;
    // merchants:r2 still has an event without a terminal delivery from before then.
    db.store.ensure_partitions(day(41), 1).await.unwrap();
    let pending = enqueue_on(&db, "r2", day(41), 0).await;
    deliver(&db, &pending, DeliveryOutcome::Failed).await;
    let report = apply_retention(pool, &run()).await.unwrap();
    assert_eq!(
        dropped_rows(&report, RetentionFamily::Exceptions, day(40)),
        2,
        "the exception and its resolution"
    );
    let reason = kept_reason(&report, RetentionFamily::Exceptions, day(39));
    assert!(reason.contains("merchants:r2"), "{reason}");
    assert_eq!(count(pool, "SELECT count(*) FROM exceptions").await, 1);
    assert_eq!(
        count(pool, "SELECT count(*) FROM exception_resolutions").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_exception_keeps_its_day_until_it_is_resolved() {
    let Some(db) = open_store().await else { return };
    with_policy(&db).await;
    let pool = db.pool();
    resolved_exception(pool, "merchants:1", 1, noon(40)).await;
    let open = exception(pool, "merchants:2", 4, noon(40)).await;
    resolved_exception(pool, "merchants:3", 1, noon(39)).await;
    let report = apply_retention(pool, &run()).await.unwrap();
    let reason = kept_reason(&report, RetentionFamily::Exceptions, day(40));
    assert!(
        reason.contains("1 exceptions of the day are open") && reason.contains(&format!("#{open}")),
        "{reason}"
    );
    assert_eq!(
        dropped_rows(&report, RetentionFamily::Exceptions, day(39)),
        2
    );
    assert_eq!(count(pool, "SELECT count(*) FROM exceptions").await, 2);

    resolve(pool, open).await;
    let report = apply_retention(pool, &run()).await.unwrap();
    assert_eq!(
        dropped_rows(&report, RetentionFamily::Exceptions, day(40)),
        4,
        "two exceptions and their resolutions"
    );
    assert_eq!(count(pool, "SELECT count(*) FROM exceptions").await, 0);
    assert_eq!(
        count(pool, "SELECT count(*) FROM exception_resolutions").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_keeps_an_open_exception_and_a_resolution_whose_exception_stays() {
    let Some(db) = open_store().await else { return };
    with_policy(&db).await;
    let pool = db.pool();
    let open = exception(pool, "merchants:2", 4, noon(40)).await;
    let done = exception(pool, "merchants:2", 5, noon(40)).await;
    resolve(pool, done).await;
    // A permit for the day, as the retention job writes it.
    execute(
        pool,
        "INSERT INTO outbox_retention_permits (family, period_start, period_end, policy_id, rows, granted_by)
         SELECT 'exceptions', d, d + interval '24 hours', 1, 2, 'mallory'
         FROM (SELECT (date_trunc('day', now() AT TIME ZONE 'UTC') - interval '40 days') AT TIME ZONE 'UTC' AS d) day",
    )
    .await
    .unwrap();
    for sql in [
        format!("DELETE FROM exceptions WHERE id = {open}"),
        "DELETE FROM exception_resolutions".to_owned(),
    ] {
        let err = execute(pool, &sql).await.expect_err(&sql);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
    }
    // The resolved one may leave with its resolution, in that order, in one transaction.
    let mut tx = pool.begin().await.unwrap();
    for sql in [
        format!("DELETE FROM exceptions WHERE id = {done}"),
        "DELETE FROM exception_resolutions".to_owned(),
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    assert_eq!(count(pool, "SELECT count(*) FROM exceptions").await, 1);
    assert_eq!(
        count(pool, "SELECT count(*) FROM exception_resolutions").await,
        0
    );
    // Without the resolution's removal the deferred foreign key refuses the commit.
    resolve(pool, open).await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "DELETE FROM exceptions WHERE id = {open}"
    )))
    .execute(&mut *tx)
    .await
    .unwrap();
    assert!(
        tx.commit().await.is_err(),
        "an orphaned resolution was committed"
    );
    assert_eq!(count(pool, "SELECT count(*) FROM exceptions").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forever_policy_drops_nothing() {
    let Some(db) = open_store().await else { return };
    save_retention_policy(db.pool(), &policy("forever", "forever"), "ops")
        .await
        .unwrap();
    message(db.pool(), "merchants:1", 1, noon(4000)).await;
    cursor(db.pool(), "kafka://k:9092/payouts", 10).await;
    let report = apply_retention(db.pool(), &run()).await.unwrap();
    assert!(report.periods.is_empty(), "{report:#?}");
    assert_eq!(
        count(db.pool(), "SELECT count(*) FROM fanout_messages").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_without_a_permit_is_refused_on_every_record_table() {
    let Some(db) = open_store().await else { return };
    with_policy(&db).await;
    let pool = db.pool();
    let position = message(pool, "merchants:1", 1, noon(40)).await;
    execute(
        pool,
        "INSERT INTO fanout_deliveries (delivery_id, received_at) VALUES ('wh', now() - interval '40 days')",
    )
    .await
    .unwrap();
    let refusal = dead_letter(pool, "d", position, "merchants:1", "refused", noon(40)).await;
    replay_request(pool, "d", "merchants:1", refusal).await;
    marker(pool, "treasury", "merchants:1", 1, noon(40)).await;
    resolved_exception(pool, "merchants:1", 1, noon(40)).await;
    for table in [
        "fanout_messages",
        "fanout_deliveries",
        "fanout_dead_letters",
        "fanout_replay_requests",
        "inbox_messages",
        "exceptions",
        "exception_resolutions",
        "outbox_retention_policies",
    ] {
        // CASCADE: a plain TRUNCATE of `exceptions` is already refused by the foreign
        // key of its resolutions, before any trigger runs.
        for sql in [
            format!("DELETE FROM {table}"),
            format!("TRUNCATE {table} CASCADE"),
        ] {
            let err = execute(pool, &sql).await.expect_err(&sql);
            assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
        }
        execute(pool, &format!("TRUNCATE {table}"))
            .await
            .expect_err("TRUNCATE");
        assert_eq!(
            count(pool, &format!("SELECT count(*) FROM {table}")).await,
            1,
            "{table}"
        );
    }
    for sql in [
        "UPDATE inbox_messages SET kind = 'rejected'",
        "UPDATE exceptions SET detail = 'nothing to see'",
        "UPDATE exception_resolutions SET note = 'nothing to see'",
    ] {
        let err = execute(pool, sql).await.expect_err(sql);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_the_policy_does_not_allow_is_refused_by_the_database() {
    let Some(db) = open_store().await else { return };
    let pool = db.pool();
    let permit = |start: String, policy_id: i64| {
        format!(
            "INSERT INTO outbox_retention_permits (family, period_start, period_end, policy_id, rows, granted_by)
             VALUES ('inbox', {start}, {start} + interval '24 hours', {policy_id}, 0, 'mallory')"
        )
    };
    let old =
        "(date_trunc('day', now() AT TIME ZONE 'UTC') - interval '40 days') AT TIME ZONE 'UTC'";
    assert!(
        execute(pool, &permit(old.into(), 1)).await.is_err(),
        "without a policy"
    );
    with_policy(&db).await;
    let recent = "date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'";
    assert!(
        execute(pool, &permit(recent.into(), 1)).await.is_err(),
        "inside retention"
    );
    let ragged = format!("({old} + interval '1 second')");
    assert!(
        execute(pool, &permit(ragged, 1)).await.is_err(),
        "not one whole UTC day"
    );
    assert!(
        execute(pool, &permit(old.into(), 7)).await.is_err(),
        "not the current policy"
    );

    // A permit the policy allows covers exactly its day; the trace stays.
    marker(pool, "treasury", "merchants:1", 1, noon(40)).await;
    marker(pool, "treasury", "merchants:1", 2, noon(39)).await;
    execute(pool, &permit(old.into(), 1)).await.unwrap();
    assert_eq!(
        execute(pool, "DELETE FROM inbox_messages WHERE sequence = 1")
            .await
            .unwrap(),
        1
    );
    assert!(
        execute(pool, "DELETE FROM inbox_messages WHERE sequence = 2")
            .await
            .is_err()
    );
    for sql in [
        "DELETE FROM outbox_retention_permits",
        "UPDATE outbox_retention_permits SET rows = 9",
        "TRUNCATE outbox_retention_permits",
    ] {
        let err = execute(pool, sql).await.expect_err(sql);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
    }
    // Row DELETE on the outbox stays refused outright: it leaves by partitions only.
    enqueue_on(&db, "4471", day(0), 0).await;
    let today = Utc::now().format("%Y%m%d");
    let err = execute(pool, &format!("DELETE FROM outbox_events_p{today}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Immutable, "{err}");
}
