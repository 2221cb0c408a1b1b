//! Retention on SQLite: one stored policy per database, never shorter than the
//! ledger's; every record table leaves only by whole expired days whose records are
//! all terminal, through a retention permit; any other DELETE is refused by the
//! database. Old rows are written straight into the tables with old timestamps (the
//! store stamps its own rows with the current time).

use chrono::{Days, NaiveDate, Utc};
use outbox_core::{
    ErrorKind, ExceptionKind, Keep, NewException, PeriodOutcome, RetentionFamily, RetentionPolicy,
    RetentionReport,
};
use outbox_store_sqlite::{
    SqliteConfig, SqliteStore, apply_retention, connect, enqueue, load_retention_policy, migrate,
    save_retention_policy,
};
use outbox_testkit::fixtures::payout;
use rusqlite::{Connection, params};
use tempfile::TempDir;

const DAY: i64 = 86_400_000_000;

struct Db {
    _dir: TempDir,
    config: SqliteConfig,
    conn: Connection,
}

fn db() -> Db {
    let dir = TempDir::new().unwrap();
    let config = SqliteConfig::new(dir.path().join("outbox.db"));
    let mut conn = connect(&config).unwrap();
    migrate(&mut conn).unwrap();
    Db {
        _dir: dir,
        config,
        conn,
    }
}

fn keep(text: &str) -> Keep {
    Keep::parse_field("keep", text).unwrap()
}

fn policy(ours: &str, ledger: &str) -> RetentionPolicy {
    RetentionPolicy::new(keep(ours), keep(ledger)).unwrap()
}

/// A 30-day policy: every day from 31 days ago back is past retention.
fn with_policy(db: &Db) {
    save_retention_policy(&db.conn, &policy("30d", "30d"), "ops@test").unwrap();
}

fn day(days_ago: u64) -> NaiveDate {
    Utc::now().date_naive() - Days::new(days_ago)
}

/// Noon UTC of that day, in the stores' unix microseconds.
fn noon(days_ago: u64) -> i64 {
    day(days_ago)
        .and_hms_opt(12, 0, 0)
        .unwrap()
        .and_utc()
        .timestamp_micros()
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |row| row.get(0)).unwrap()
}

fn event(conn: &Connection, account: &str, sequence: i64, at: i64) -> String {
    let id = outbox_core::EventId::new().to_string();
    conn.execute(
        "INSERT INTO outbox_events (event_id, account, sequence, payload, created_at)
         VALUES (?1, ?2, ?3, x'7b7d', ?4)",
        params![id, account, sequence, at],
    )
    .unwrap();
    id
}

fn deliver(conn: &Connection, event_id: &str, attempt: i64, outcome: &str) {
    conn.execute(
        "INSERT INTO outbox_deliveries (event_id, attempt, outcome, at) VALUES (?1, ?2, ?3, ?4)",
        params![event_id, attempt, outcome, Utc::now().timestamp_micros()],
    )
    .unwrap();
}

fn message(conn: &Connection, account: &str, sequence: i64, at: i64) -> i64 {
    conn.query_row(
        "INSERT INTO fanout_messages (dedup_key, instruction_id, account, sequence, kind, ledger,
             payload, received_at)
         VALUES (?1, ?1, ?2, ?3, 'committed', 'payouts', x'7b7d', ?4) RETURNING position",
        params![
            outbox_core::EventId::new().to_string(),
            account,
            sequence,
            at
        ],
        |row| row.get(0),
    )
    .unwrap()
}

fn cursor(conn: &Connection, name: &str, position: i64) {
    conn.execute(
        "INSERT INTO fanout_cursors (transport, position, updated_at) VALUES (?1, ?2, 0)
         ON CONFLICT (transport) DO UPDATE SET position = excluded.position",
        params![name, position],
    )
    .unwrap();
}

fn dead_letter(
    conn: &Connection,
    destination: &str,
    position: i64,
    account: &str,
    reason: &str,
    at: i64,
) -> i64 {
    conn.query_row(
        "INSERT INTO fanout_dead_letters (destination, position, account, sequence, instruction_id,
             reason, error, dead_lettered_at)
         VALUES (?1, ?2, ?3, 1, 'i', ?4, '422 refused', ?5) RETURNING id",
        params![destination, position, account, reason, at],
        |row| row.get(0),
    )
    .unwrap()
}

fn marker(conn: &Connection, consumer: &str, account: &str, sequence: i64, at: i64) {
    conn.execute(
        "INSERT INTO inbox_messages (consumer, instruction_id, account, sequence, kind, applied_at)
         VALUES (?1, ?2, ?3, ?4, 'committed', ?5)",
        params![
            consumer,
            outbox_core::EventId::new().to_string(),
            account,
            sequence,
            at
        ],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO inbox_accounts (consumer, account, last_applied) VALUES (?1, ?2, ?3)
         ON CONFLICT (consumer, account) DO UPDATE SET last_applied = excluded.last_applied",
        params![consumer, account, sequence],
    )
    .unwrap();
}

/// An open exception detected at `at`; returns its id.
fn exception(conn: &Connection, account: &str, sequence: i64, at: i64) -> i64 {
    let identity = NewException::new(
        "relay",
        ExceptionKind::Rejected,
        outbox_core::Account::parse(account).unwrap(),
        sequence as u64,
        "INSUFFICIENT_FUND",
    )
    .identity();
    conn.execute(
        "INSERT INTO exceptions (source, kind, severity, account, sequence, detail, detected_at,
             identity, recurrence)
         VALUES ('relay', 'rejected', 'info', ?1, ?2, 'INSUFFICIENT_FUND', ?3, ?4, 0)",
        params![account, sequence, at, identity],
    )
    .unwrap();
    conn.last_insert_rowid()
}

fn resolve(conn: &Connection, exception_id: i64, at: i64) {
    conn.execute(
        "INSERT INTO exception_resolutions (exception_id, resolved_by, note, resolved_at)
         VALUES (?1, 'alice', 'refund sent', ?2)",
        params![exception_id, at],
    )
    .unwrap();
}

/// A resolved exception detected at `at`, resolved the day after.
fn resolved_exception(conn: &Connection, account: &str, sequence: i64, at: i64) {
    let id = exception(conn, account, sequence, at);
    resolve(conn, id, at + DAY);
}

/// The verdict on `family`'s `day`; panics naming the report when there is none.
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

#[test]
fn a_policy_shorter_than_the_ledgers_is_refused_by_the_api_and_by_the_database() {
    let err = RetentionPolicy::new(keep("90d"), keep("400d")).unwrap_err();
    assert_eq!(err.field(), Some("keep"), "{err}");
    assert!(err.message().contains("shorter than the ledger's"), "{err}");

    let db = db();
    // Written past the API, the database refuses it too: finite under a ledger that
    // keeps forever, or shorter than the ledger's.
    for (keep, ledger) in [
        (Some(90 * 86_400_i64), Some(400 * 86_400_i64)),
        (Some(1), None),
    ] {
        let refused = db.conn.execute(
            "INSERT INTO outbox_retention_policies (keep_seconds, ledger_keeps_seconds, set_by, set_at)
             VALUES (?1, ?2, 'ops', 0)",
            params![keep, ledger],
        );
        assert!(refused.is_err(), "{keep:?} under {ledger:?} was stored");
    }
    assert_eq!(load_retention_policy(&db.conn).unwrap(), None);
}

#[tokio::test]
async fn the_latest_policy_wins_and_records_who_and_when() {
    let db = db();
    let store = SqliteStore::open(db.config.clone()).await.unwrap();
    assert_eq!(store.load_retention_policy().await.unwrap(), None);
    let before = Utc::now() - chrono::Duration::seconds(1);
    let first = store
        .save_retention_policy(&policy("400d", "400d"), "alice")
        .await
        .unwrap();
    let second = store
        .save_retention_policy(&policy("forever", "forever"), "bob")
        .await
        .unwrap();
    assert!(second.id > first.id);
    let loaded = store.load_retention_policy().await.unwrap().unwrap();
    assert_eq!(loaded, second);
    assert_eq!(loaded.policy.keep(), Keep::Forever);
    assert_eq!(loaded.set_by, "bob");
    assert!(loaded.set_at >= before && loaded.set_at <= Utc::now());
    // Read through any connection to the file, as `outbox check` does.
    assert_eq!(load_retention_policy(&db.conn).unwrap(), Some(second));
    for sql in [
        "UPDATE outbox_retention_policies SET keep_seconds = 1",
        "DELETE FROM outbox_retention_policies",
    ] {
        let err = db
            .conn
            .execute(sql, [])
            .map_err(outbox_store_sqlite::map_error);
        assert_eq!(err.unwrap_err().kind(), &ErrorKind::Immutable, "{sql}");
    }
}

#[test]
fn retention_without_a_stored_policy_is_refused_naming_the_policy() {
    let mut db = db();
    event(&db.conn, "merchants:1", 1, noon(40));
    let err = apply_retention(&mut db.conn, "job").unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::NotFound, "{err}");
    assert_eq!(err.context("field"), Some("policy"), "{err}");
    assert!(err.message().contains("outbox retention set"), "{err}");
    assert_eq!(count(&db.conn, "SELECT count(*) FROM outbox_events"), 1);
}

#[test]
fn expired_fully_delivered_outbox_days_leave_and_a_pending_day_stays_with_its_reason() {
    let mut db = db();
    with_policy(&db);
    // 40 days ago: every event terminal (one after a failed attempt).
    let a = event(&db.conn, "merchants:1", 1, noon(40));
    let b = event(&db.conn, "merchants:2", 1, noon(40));
    deliver(&db.conn, &a, 1, "accepted");
    deliver(&db.conn, &b, 1, "failed");
    deliver(&db.conn, &b, 2, "replayed");
    // 39 days ago: one event has only a failed attempt.
    let c = event(&db.conn, "merchants:1", 2, noon(39));
    let d = event(&db.conn, "merchants:3", 1, noon(39));
    deliver(&db.conn, &c, 1, "rejected");
    deliver(&db.conn, &d, 1, "failed");
    // 10 days ago: terminal, but not past the 30 days.
    let e = event(&db.conn, "merchants:1", 3, noon(10));
    deliver(&db.conn, &e, 1, "accepted");

    let report = apply_retention(&mut db.conn, "job").unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Outbox, day(40)), 5);
    let reason = kept_reason(&report, RetentionFamily::Outbox, day(39));
    assert!(
        reason.contains("1 events without a terminal delivery"),
        "{reason}"
    );
    assert!(
        !report.periods.iter().any(|p| p.day == day(10)),
        "a day inside retention is not even considered: {report:#?}"
    );
    let events: Vec<String> = db
        .conn
        .prepare("SELECT event_id FROM outbox_events ORDER BY position")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(events, [c, d, e]);
    assert_eq!(count(&db.conn, "SELECT count(*) FROM outbox_deliveries"), 3);
    // The permit stays as the record of what left, when, by whom, under which policy.
    let (family, rows, by): (String, i64, String) = db
        .conn
        .query_row(
            "SELECT family, rows, granted_by FROM outbox_retention_permits",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    assert_eq!((family.as_str(), rows, by.as_str()), ("outbox", 5, "job"));
}

#[test]
fn a_day_holding_the_newest_event_stays_so_positions_are_never_reused() {
    let mut db = db();
    with_policy(&db);
    let a = event(&db.conn, "merchants:1", 1, noon(40));
    deliver(&db.conn, &a, 1, "accepted");
    let report = apply_retention(&mut db.conn, "job").unwrap();
    let reason = kept_reason(&report, RetentionFamily::Outbox, day(40));
    assert!(reason.contains("newest"), "{reason}");
    assert_eq!(count(&db.conn, "SELECT count(*) FROM outbox_events"), 1);
}

#[test]
fn an_accounts_sequence_and_the_positions_continue_after_its_days_left() {
    let mut db = db();
    with_policy(&db);
    for sequence in 1..=3 {
        let id = event(&db.conn, "merchants:4471", sequence, noon(40));
        deliver(&db.conn, &id, 1, "accepted");
    }
    let tx = db.conn.transaction().unwrap();
    let newer = enqueue(&tx, &payout("9", 100)).unwrap();
    tx.commit().unwrap();
    let report = apply_retention(&mut db.conn, "job").unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Outbox, day(40)), 6);

    let tx = db.conn.transaction().unwrap();
    let next = enqueue(&tx, &payout("4471", 100)).unwrap();
    tx.commit().unwrap();
    assert_eq!(next.sequence, 4, "the account's numbering went back");
    assert!(next.position > newer.position, "a position was reused");
}

#[test]
fn fanout_days_leave_once_every_destination_read_them() {
    let mut db = db();
    with_policy(&db);
    let conn = &db.conn;
    message(conn, "merchants:1", 1, noon(40));
    let second = message(conn, "merchants:2", 1, noon(40));
    message(conn, "merchants:1", 2, noon(39));
    let fourth = message(conn, "merchants:2", 2, noon(39));
    for (id, at) in [("wh-1", noon(40)), ("wh-2", noon(39))] {
        conn.execute(
            "INSERT INTO fanout_deliveries (delivery_id, received_at) VALUES (?1, ?2)",
            params![id, at],
        )
        .unwrap();
    }
    cursor(conn, "kafka://k:9092/payouts", fourth);
    cursor(conn, "https://hooks.example/treasury", second);
    // Not destinations: the catch-up checkpoint and a replay's progress.
    cursor(conn, "ledger-log:payouts", 1);
    cursor(conn, "kafka://k:9092/payouts@replayed:merchants:1", 0);

    let report = apply_retention(&mut db.conn, "job").unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Fanout, day(40)), 3);
    let reason = kept_reason(&report, RetentionFamily::Fanout, day(39));
    assert!(
        reason.contains("https://hooks.example/treasury") && reason.contains(&second.to_string()),
        "{reason}"
    );
    assert_eq!(count(&db.conn, "SELECT count(*) FROM fanout_messages"), 2);
    assert_eq!(
        count(
            &db.conn,
            "SELECT count(*) FROM fanout_deliveries WHERE delivery_id = 'wh-2'"
        ),
        1
    );

    cursor(&db.conn, "https://hooks.example/treasury", fourth);
    let report = apply_retention(&mut db.conn, "job").unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Fanout, day(39)), 3);
    assert_eq!(count(&db.conn, "SELECT count(*) FROM fanout_messages"), 0);
    // A message appended later still gets a new position.
    let later = message(&db.conn, "merchants:1", 3, noon(0));
    assert!(later > fourth);
}

#[test]
fn a_fanout_day_no_destination_has_read_stays() {
    let mut db = db();
    with_policy(&db);
    message(&db.conn, "merchants:1", 1, noon(40));
    let report = apply_retention(&mut db.conn, "job").unwrap();
    let reason = kept_reason(&report, RetentionFamily::Fanout, day(40));
    assert!(reason.contains("no destination"), "{reason}");
    assert_eq!(count(&db.conn, "SELECT count(*) FROM fanout_messages"), 1);
}

#[test]
fn dead_lettered_messages_keep_their_day_until_replayed_then_the_group_leaves() {
    let mut db = db();
    with_policy(&db);
    let dest = "https://hooks.example/treasury";
    let refused = message(&db.conn, "merchants:1", 1, noon(40));
    let set_aside = message(&db.conn, "merchants:1", 2, noon(40));
    let other = message(&db.conn, "merchants:2", 1, noon(40));
    cursor(&db.conn, dest, other);
    let refusal = dead_letter(&db.conn, dest, refused, "merchants:1", "refused", noon(40));
    dead_letter(
        &db.conn,
        dest,
        set_aside,
        "merchants:1",
        "set_aside",
        noon(40),
    );

    // Parked: no replay request yet.
    let report = apply_retention(&mut db.conn, "job").unwrap();
    let reason = kept_reason(&report, RetentionFamily::Fanout, day(40));
    assert!(
        reason.contains("parked") && reason.contains("merchants:1"),
        "{reason}"
    );
    let reason = kept_reason(&report, RetentionFamily::FanoutDeadLetters, day(40));
    assert!(reason.contains("parked"), "{reason}");

    // Released, but the replay has re-published only the refused message.
    db.conn
        .execute(
            "INSERT INTO fanout_replay_requests (destination, account, refusal_id, requested_at)
             VALUES (?1, 'merchants:1', ?2, ?3)",
            params![dest, refusal, noon(40)],
        )
        .unwrap();
    cursor(&db.conn, &format!("{dest}@replayed:merchants:1"), refused);
    let report = apply_retention(&mut db.conn, "job").unwrap();
    let reason = kept_reason(&report, RetentionFamily::Fanout, day(40));
    assert!(reason.contains("replaying"), "{reason}");
    assert_eq!(count(&db.conn, "SELECT count(*) FROM fanout_messages"), 3);

    // Replayed: the messages, the dead letters and the request leave.
    cursor(&db.conn, &format!("{dest}@replayed:merchants:1"), set_aside);
    let report = apply_retention(&mut db.conn, "job").unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Fanout, day(40)), 3);
    let group = report
        .periods
        .iter()
        .find(|p| p.family == RetentionFamily::FanoutDeadLetters)
        .unwrap();
    assert_eq!(group.outcome, PeriodOutcome::Dropped { rows: 3 });
    assert!(group.group.as_deref().unwrap().contains("merchants:1"));
    for table in [
        "fanout_messages",
        "fanout_dead_letters",
        "fanout_replay_requests",
    ] {
        assert_eq!(
            count(&db.conn, &format!("SELECT count(*) FROM {table}")),
            0,
            "{table}"
        );
    }
}

#[test]
fn inbox_markers_leave_by_day_and_the_high_water_marks_stay() {
    let mut db = db();
    with_policy(&db);
    marker(&db.conn, "treasury", "merchants:1", 1, noon(40));
    marker(&db.conn, "treasury", "merchants:1", 2, noon(40));
    marker(&db.conn, "treasury", "merchants:2", 1, noon(40));
    marker(&db.conn, "treasury", "merchants:2", 2, noon(5));
    let report = apply_retention(&mut db.conn, "job").unwrap();
    assert_eq!(dropped_rows(&report, RetentionFamily::Inbox, day(40)), 3);
    assert_eq!(count(&db.conn, "SELECT count(*) FROM inbox_messages"), 1);
    let marks: Vec<(String, i64)> = db
        .conn
        .prepare("SELECT account, last_applied FROM inbox_accounts ORDER BY account")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        marks,
        [("merchants:1".to_owned(), 2), ("merchants:2".to_owned(), 2)]
    );
}

#[test]
fn a_held_message_keeps_its_accounts_markers() {
    let mut db = db();
    with_policy(&db);
    marker(&db.conn, "treasury", "merchants:1", 1, noon(40));
    db.conn
        .execute(
            "INSERT INTO inbox_held (consumer, account, sequence, instruction_id, kind, payload, held_at)
             VALUES ('treasury', 'merchants:1', 3, 'i-3', 'committed', x'7b7d', ?1)",
            [noon(0)],
        )
        .unwrap();
    let report = apply_retention(&mut db.conn, "job").unwrap();
    let reason = kept_reason(&report, RetentionFamily::Inbox, day(40));
    assert!(
        reason.contains("treasury") && reason.contains("merchants:1"),
        "{reason}"
    );
    assert!(reason.contains("held"), "{reason}");
    assert_eq!(count(&db.conn, "SELECT count(*) FROM inbox_messages"), 1);
}

#[test]
fn exceptions_leave_unless_their_account_still_has_something_pending() {
    let mut db = db();
    with_policy(&db);
    resolved_exception(&db.conn, "merchants:1", 1, noon(40));
    resolved_exception(&db.conn, "merchants:2", 4, noon(39));
    // merchants:2 still has an event without a terminal delivery from before then.
    let pending = event(&db.conn, "merchants:2", 4, noon(41));
    deliver(&db.conn, &pending, 1, "failed");
    event(&db.conn, "merchants:9", 1, noon(0));
    let report = apply_retention(&mut db.conn, "job").unwrap();
    assert_eq!(
        dropped_rows(&report, RetentionFamily::Exceptions, day(40)),
        2,
        "the exception and its resolution"
    );
    let reason = kept_reason(&report, RetentionFamily::Exceptions, day(39));
    assert!(reason.contains("merchants:2"), "{reason}");
    assert_eq!(count(&db.conn, "SELECT count(*) FROM exceptions"), 1);
    assert_eq!(
        count(&db.conn, "SELECT count(*) FROM exception_resolutions"),
        1
    );
}

#[test]
fn an_open_exception_keeps_its_day_until_it_is_resolved() {
    let mut db = db();
    with_policy(&db);
    resolved_exception(&db.conn, "merchants:1", 1, noon(40));
    let open = exception(&db.conn, "merchants:2", 4, noon(40) + 1);
    resolved_exception(&db.conn, "merchants:3", 1, noon(39));
    let report = apply_retention(&mut db.conn, "job").unwrap();
    let reason = kept_reason(&report, RetentionFamily::Exceptions, day(40));
    assert!(
        reason.contains("1 exceptions of the day are open") && reason.contains(&format!("#{open}")),
        "{reason}"
    );
    assert_eq!(
        dropped_rows(&report, RetentionFamily::Exceptions, day(39)),
        2
    );
    assert_eq!(count(&db.conn, "SELECT count(*) FROM exceptions"), 2);

    resolve(&db.conn, open, noon(1));
    let report = apply_retention(&mut db.conn, "job").unwrap();
    assert_eq!(
        dropped_rows(&report, RetentionFamily::Exceptions, day(40)),
        4,
        "two exceptions and their resolutions"
    );
    assert_eq!(count(&db.conn, "SELECT count(*) FROM exceptions"), 0);
    assert_eq!(
        count(&db.conn, "SELECT count(*) FROM exception_resolutions"),
        0
    );
}

#[test]
fn the_database_keeps_an_open_exception_and_a_resolution_whose_exception_stays() {
    let mut db = db();
    with_policy(&db);
    let open = exception(&db.conn, "merchants:2", 4, noon(40));
    let done = exception(&db.conn, "merchants:2", 5, noon(40));
    resolve(&db.conn, done, noon(39));
    // A permit for the day, as the retention job writes it.
    db.conn
        .execute(
            "INSERT INTO outbox_retention_permits (family, period_start, period_end, policy_id,
                 rows, granted_by, granted_at)
             VALUES ('exceptions', ?1, ?2, 1, 2, 'mallory', 0)",
            params![noon(40) - DAY / 2, noon(40) + DAY / 2],
        )
        .unwrap();
    let refused = |conn: &Connection, sql: &str| {
        let err = conn
            .execute(sql, [])
            .map_err(outbox_store_sqlite::map_error)
            .expect_err(sql);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
    };
    refused(
        &db.conn,
        &format!("DELETE FROM exceptions WHERE id = {open}"),
    );
    refused(&db.conn, "DELETE FROM exception_resolutions");
    // The resolved one may leave with its resolution, in that order, in one transaction.
    let tx = db.conn.transaction().unwrap();
    tx.execute(&format!("DELETE FROM exceptions WHERE id = {done}"), [])
        .unwrap();
    tx.execute("DELETE FROM exception_resolutions", []).unwrap();
    tx.commit().unwrap();
    assert_eq!(count(&db.conn, "SELECT count(*) FROM exceptions"), 1);
    assert_eq!(
        count(&db.conn, "SELECT count(*) FROM exception_resolutions"),
        0
    );
    // Without the resolution's removal the deferred foreign key refuses the commit.
    resolve(&db.conn, open, noon(1));
    let tx = db.conn.transaction().unwrap();
    tx.execute(&format!("DELETE FROM exceptions WHERE id = {open}"), [])
        .unwrap();
    assert!(tx.commit().is_err(), "an orphaned resolution was committed");
    assert_eq!(count(&db.conn, "SELECT count(*) FROM exceptions"), 1);
}

#[test]
fn a_forever_policy_drops_nothing() {
    let mut db = db();
    save_retention_policy(&db.conn, &policy("forever", "forever"), "ops").unwrap();
    let a = event(&db.conn, "merchants:1", 1, noon(4000));
    deliver(&db.conn, &a, 1, "accepted");
    event(&db.conn, "merchants:1", 2, noon(0));
    message(&db.conn, "merchants:1", 1, noon(4000));
    let report = apply_retention(&mut db.conn, "job").unwrap();
    assert!(report.periods.is_empty(), "{report:#?}");
    assert_eq!(count(&db.conn, "SELECT count(*) FROM outbox_events"), 2);
    assert_eq!(count(&db.conn, "SELECT count(*) FROM fanout_messages"), 1);
}

#[test]
fn a_delete_without_a_permit_is_refused_on_every_record_table() {
    let db = db();
    with_policy(&db);
    let conn = &db.conn;
    let id = event(conn, "merchants:1", 1, noon(40));
    deliver(conn, &id, 1, "accepted");
    let position = message(conn, "merchants:1", 1, noon(40));
    conn.execute(
        "INSERT INTO fanout_deliveries (delivery_id, received_at) VALUES ('wh', ?1)",
        [noon(40)],
    )
    .unwrap();
    let refusal = dead_letter(conn, "d", position, "merchants:1", "refused", noon(40));
    conn.execute(
        "INSERT INTO fanout_replay_requests (destination, account, refusal_id, requested_at)
         VALUES ('d', 'merchants:1', ?1, ?2)",
        params![refusal, noon(40)],
    )
    .unwrap();
    marker(conn, "treasury", "merchants:1", 1, noon(40));
    resolved_exception(conn, "merchants:1", 1, noon(40));
    let tables = [
        "outbox_events",
        "outbox_deliveries",
        "fanout_messages",
        "fanout_deliveries",
        "fanout_dead_letters",
        "fanout_replay_requests",
        "inbox_messages",
        "exceptions",
        "exception_resolutions",
        "outbox_retention_policies",
    ];
    for table in tables {
        let err = conn
            .execute(&format!("DELETE FROM {table}"), [])
            .map_err(outbox_store_sqlite::map_error)
            .expect_err(table);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{table}: {err}");
        assert_eq!(
            count(conn, &format!("SELECT count(*) FROM {table}")),
            1,
            "{table}"
        );
    }
    // The processed markers and the exception queue refuse UPDATE too now.
    for sql in [
        "UPDATE inbox_messages SET kind = 'rejected'",
        "UPDATE exceptions SET detail = 'nothing to see'",
        "UPDATE exception_resolutions SET note = 'nothing to see'",
    ] {
        let err = conn
            .execute(sql, [])
            .map_err(outbox_store_sqlite::map_error)
            .expect_err(sql);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
    }
}

#[test]
fn a_permit_the_policy_does_not_allow_is_refused_by_the_database() {
    let db = db();
    let conn = &db.conn;
    let today = day(0)
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
        .timestamp_micros();
    let old = today - 40 * DAY;
    let permit = |start: i64, policy_id: i64| {
        conn.execute(
            "INSERT INTO outbox_retention_permits (family, period_start, period_end, policy_id,
                 rows, granted_by, granted_at)
             VALUES ('outbox', ?1, ?2, ?3, 0, 'mallory', 0)",
            params![start, start + DAY, policy_id],
        )
    };
    assert!(permit(old, 1).is_err(), "a permit without any policy");
    with_policy(&db);
    assert!(
        permit(today - 2 * DAY, 1).is_err(),
        "a permit inside retention"
    );
    assert!(
        permit(old + 1, 1).is_err(),
        "a permit that is not one whole UTC day"
    );
    assert!(
        permit(old, 7).is_err(),
        "a permit under a policy that is not the current one"
    );

    // A permit the policy allows covers exactly its day: the trace stays, and rows of
    // other days are still refused.
    let inside = event(conn, "merchants:1", 1, noon(40));
    let outside = event(conn, "merchants:1", 2, noon(39));
    permit(old, 1).unwrap();
    assert_eq!(
        conn.execute("DELETE FROM outbox_events WHERE event_id = ?1", [&inside])
            .unwrap(),
        1
    );
    assert!(
        conn.execute("DELETE FROM outbox_events WHERE event_id = ?1", [&outside])
            .is_err()
    );
    for sql in [
        "DELETE FROM outbox_retention_permits",
        "UPDATE outbox_retention_permits SET period_start = 0",
    ] {
        let err = conn
            .execute(sql, [])
            .map_err(outbox_store_sqlite::map_error)
            .expect_err(sql);
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{sql}: {err}");
    }
}
