//! Inbox apply rate against a raw insert of the same impact rows, printed as figures
//! and ratios (no assertions on time).
//!
//! Committed messages over 1,000 accounts (round-robin, each account's sequences in
//! order; ~460-byte ledger transactions with one posting, so two `treasury_balances`
//! upserts each) are applied one transaction per message:
//!
//! - SQLite: `TreasuryConsumer::apply_one` against a raw loop that opens the same
//!   `IMMEDIATE` transaction on a connection with the same settings (the consumer's
//!   `connect`), upserts the same `deltas` and commits, with no inbox bookkeeping.
//!   With `synchronous=FULL` (the `SqliteConfig` default: an fsync per commit) two
//!   more rows: the consumer as a `MessageSink` driven by `--workers` concurrent
//!   tasks (as the AMQP subscriber's queue workers drive it, one delivery each at a
//!   time), whose waiting deliveries share a commit (group commit), and the raw loop
//!   committing that many messages per transaction (the same grouping without the
//!   inbox). Then
//!   `synchronous=NORMAL` (diagnostic: the statements' own cost), where two more rows
//!   show raw + the inbox's two marker writes, and a prototype with the inbox's three
//!   reads in one statement.
//! - PostgreSQL: `PgTreasuryConsumer::apply_one` against a raw loop that begins a
//!   transaction on a pool with the same settings, writes the same impact and commits:
//!   the baseline sends it as the consumer does (one summed upsert statement), a
//!   second raw row as one upsert per delta, and a diagnostic row adds to the
//!   baseline the inbox's two writes (marker and high-water mark, into the inbox's
//!   own tables) as one more statement: what those rows cost without the inbox's reads.
//!   The consumer takes 4 round trips per message (BEGIN, `outbox_inbox_claim_next`,
//!   its impact summed into one upsert, COMMIT) like the raw loop (BEGIN, 2 upserts,
//!   COMMIT). With the server's `synchronous_commit` (on), then `off` for the bench's
//!   sessions (diagnostic: round trips only).
//!
//! Each side works in a database (schema) of its own, so each starts empty. Sides
//! alternate, in rotating order, `--reps` times; the figures are medians.
//! Goal: inbox ≥ 0.8 × raw.
//!
//! Run: `cargo bench -p outbox-bins --features all --bench inbox`, options after `--`:
//! `--sqlite-messages 20000 --pg-messages 3000 --accounts 1000 --reps 2 --workers 8
//! --only sqlite|postgres`. The server comes from `OUTBOX_BENCH_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); the schemas are
//! `outbox_bench_<run>_<side>`, dropped at the end (also on panic). An unreachable
//! server is skipped with a message.

use outbox_testkit::bench_args::Args;
use outbox_testkit::fixtures::ledger_transaction_payload as payload;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use outbox_bins::consumer::{PgTreasuryConsumer, TreasuryConsumer, deltas, write_impact};
use outbox_core::{Accepted, Account, FanoutMessage, InboxMessage, MessageKind, MessageSink};
use outbox_store_postgres::{PgConfig, PgStore};
use outbox_store_sqlite::{SqliteConfig, connect};
use rusqlite::TransactionBehavior;
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection, PgPool, Row};
use uuid::Uuid;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const CONSUMER: &str = "bench";
const GAP_ALARM: Duration = Duration::from_secs(60);
const UPSERT_SQLITE: &str =
    "INSERT INTO treasury_balances (account, asset, balance) VALUES (?1, ?2, ?3)
     ON CONFLICT (account, asset) DO UPDATE SET balance = balance + excluded.balance";
const UPSERT_PG: &str = "INSERT INTO treasury_balances (account, asset, balance) VALUES ($1, $2, $3)
     ON CONFLICT (account, asset) DO UPDATE SET balance = treasury_balances.balance + excluded.balance";

// ---------------------------------------------------------------------------------------
// Arguments

// ---------------------------------------------------------------------------------------
// Messages

/// `count` committed messages as a transport hands them to the sink, account
/// `n % accounts` for message `n`, each account's sequences 1, 2, … in order.
fn fanned_out(count: usize, accounts: usize) -> Vec<FanoutMessage> {
    (0..count)
        .map(|n| {
            let account = n % accounts;
            let sequence = (n / accounts) as u64 + 1;
            let tx_id = 1_000_000 + n as u64;
            let instruction_id = Uuid::now_v7().to_string();
            FanoutMessage {
                payload: payload(account, sequence, tx_id, &instruction_id),
                instruction_id,
                account: Account::parse(&format!("merchants:{account}")).unwrap(),
                sequence,
                kind: MessageKind::Committed,
                ledger: "payouts".to_owned(),
                ledger_tx_id: Some(tx_id),
                traceparent: None,
                tracestate: None,
            }
        })
        .collect()
}

/// The same messages as the inbox engine takes them.
fn messages(fanned_out: &[FanoutMessage]) -> Vec<InboxMessage> {
    fanned_out.iter().map(FanoutMessage::to_inbox).collect()
}

fn applied(accepted: &Accepted) {
    assert_eq!(
        accepted,
        &Accepted::Applied {
            released: Vec::new()
        }
    );
}

fn rate(count: usize, d: Duration) -> f64 {
    count as f64 / d.as_secs_f64()
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn print_table(count: usize, rows: &[(&str, &[Duration])]) {
    println!(
        "  {:<34} {:>10} {:>12} {:>7}",
        "variant", "msgs/s", "µs/msg", "ratio"
    );
    let mut raw = None;
    for (label, times) in rows {
        let d = median(times);
        let r = rate(count, d);
        let raw = *raw.get_or_insert(r);
        println!(
            "  {label:<34} {r:>10.0} {:>12.1} {:>7.2}",
            d.as_secs_f64() * 1e6 / count as f64,
            r / raw
        );
    }
}

// ---------------------------------------------------------------------------------------
// SQLite

fn sqlite_config(dir: &std::path::Path, side: &str, full: bool) -> SqliteConfig {
    let mut config = SqliteConfig::new(dir.join(format!("{side}-{}.db", Uuid::now_v7())));
    config.synchronous_full = full;
    config
}

/// The consumer, one `apply_one` (its own transaction) per message.
fn sqlite_inbox(
    runtime: &tokio::runtime::Runtime,
    config: SqliteConfig,
    all: &[InboxMessage],
) -> Duration {
    let consumer = runtime
        .block_on(TreasuryConsumer::open(config, CONSUMER, GAP_ALARM))
        .unwrap();
    let mut conn = consumer.connect().unwrap();
    let owned = all.to_vec();
    let start = Instant::now();
    for message in owned {
        applied(&consumer.apply_one(&mut conn, message).unwrap());
    }
    start.elapsed()
}

/// Opens the database the way the consumer does (same tables, same settings) and
/// returns a connection from `connect` with that configuration.
fn sqlite_conn(runtime: &tokio::runtime::Runtime, config: &SqliteConfig) -> rusqlite::Connection {
    drop(
        runtime
            .block_on(TreasuryConsumer::open(config.clone(), CONSUMER, GAP_ALARM))
            .unwrap(),
    );
    connect(config).unwrap()
}

fn sqlite_upserts(tx: &rusqlite::Transaction<'_>, message: &InboxMessage) {
    let mut upsert = tx.prepare_cached(UPSERT_SQLITE).unwrap();
    for d in deltas(message).unwrap() {
        upsert.execute((&d.account, &d.asset, d.amount)).unwrap();
    }
}

/// The inbox's two writes (`SqliteInbox::mark_applied`), statement for statement.
fn sqlite_mark(tx: &rusqlite::Transaction<'_>, message: &InboxMessage) {
    tx.prepare_cached(
        "INSERT INTO inbox_messages (consumer, instruction_id, account, sequence, kind, applied_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .unwrap()
    .execute(rusqlite::params![
        CONSUMER,
        message.instruction_id,
        message.account.as_str(),
        message.sequence as i64,
        message.kind.as_str(),
        chrono::Utc::now().timestamp_micros()
    ])
    .unwrap();
    tx.prepare_cached(
        "INSERT INTO inbox_accounts (consumer, account, last_applied) VALUES (?1, ?2, ?3)
         ON CONFLICT (consumer, account) DO UPDATE SET last_applied = excluded.last_applied",
    )
    .unwrap()
    .execute(rusqlite::params![
        CONSUMER,
        message.account.as_str(),
        message.sequence as i64
    ])
    .unwrap();
}

/// The consumer as a `MessageSink`, fed by `workers` concurrent tasks: worker `w`
/// takes the accounts `a % workers == w` (message `n` is account `n % accounts`),
/// in order, one message per delivery.
fn sqlite_sink(
    runtime: &tokio::runtime::Runtime,
    config: SqliteConfig,
    all: &[FanoutMessage],
    accounts: usize,
    workers: usize,
) -> Duration {
    let consumer = runtime
        .block_on(TreasuryConsumer::open(config, CONSUMER, GAP_ALARM))
        .unwrap();
    let shares: Vec<Vec<FanoutMessage>> = (0..workers)
        .map(|w| {
            all.iter()
                .enumerate()
                .filter(|(n, _)| n % accounts % workers == w)
                .map(|(_, m)| m.clone())
                .collect()
        })
        .collect();
    let start = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = shares
            .into_iter()
            .enumerate()
            .map(|(w, share)| {
                let consumer = consumer.clone();
                tokio::spawn(async move {
                    for (n, message) in share.into_iter().enumerate() {
                        consumer
                            .accept(&format!("{w}/{n}"), vec![message])
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    let elapsed = start.elapsed();
    let applied = outbox_bins::consumer::ConsumerStats::get(&consumer.stats().applied);
    assert_eq!(applied, all.len() as u64, "every message applied once");
    elapsed
}

/// Raw upserts, `per_tx` messages per `IMMEDIATE` transaction.
fn sqlite_raw_grouped(
    runtime: &tokio::runtime::Runtime,
    config: &SqliteConfig,
    all: &[InboxMessage],
    per_tx: usize,
) -> Duration {
    let mut conn = sqlite_conn(runtime, config);
    let start = Instant::now();
    for group in all.chunks(per_tx.max(1)) {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        for message in group {
            sqlite_upserts(&tx, message);
        }
        tx.commit().unwrap();
    }
    start.elapsed()
}

#[derive(Clone, Copy, PartialEq)]
enum SqliteSide {
    /// Per message an `IMMEDIATE` transaction with the same upserts, nothing else.
    Raw,
    /// Diagnostic: raw plus the inbox's two marker writes, without its reads.
    RawWithMarker,
    /// `TreasuryConsumer::apply_one`.
    Inbox,
    /// Prototype: the inbox's three reads (processed? last applied? anything held?)
    /// in one statement, `take_held` only when something is held: 5 statements.
    Lean,
    /// `TreasuryConsumer` as the subscribers drive it: `--workers` tasks (an AMQP
    /// queue or Kafka partition each, accounts split between them), each handing
    /// over one delivery of one message at a time; deliveries that wait together
    /// share a commit (group commit).
    Sink,
    /// Raw upserts, `--workers` messages per transaction: what the same grouping
    /// gives a hand-written loop with no inbox.
    RawGrouped,
}

fn sqlite_run(
    runtime: &tokio::runtime::Runtime,
    config: SqliteConfig,
    all: &[InboxMessage],
    side: SqliteSide,
    workers: usize,
) -> Duration {
    match side {
        SqliteSide::Inbox => return sqlite_inbox(runtime, config, all),
        SqliteSide::RawGrouped => return sqlite_raw_grouped(runtime, &config, all, workers),
        SqliteSide::Sink => unreachable!("sqlite_sink takes the fanned-out messages"),
        _ => {}
    }
    let mut conn = sqlite_conn(runtime, &config);
    let start = Instant::now();
    for message in all {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        if side == SqliteSide::Lean {
            let (processed, last, held): (bool, i64, bool) = tx
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM inbox_messages WHERE consumer = ?1 AND instruction_id = ?2),
                            coalesce((SELECT last_applied FROM inbox_accounts WHERE consumer = ?1 AND account = ?3), 0),
                            EXISTS (SELECT 1 FROM inbox_held WHERE consumer = ?1 AND account = ?3)",
                )
                .unwrap()
                .query_row(
                    (CONSUMER, &message.instruction_id, message.account.as_str()),
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .unwrap();
            // The bench's messages always come next; other paths stay as they are.
            assert!(!processed && !held && message.sequence == last as u64 + 1);
        }
        sqlite_upserts(&tx, message);
        if side != SqliteSide::Raw {
            sqlite_mark(&tx, message);
        }
        tx.commit().unwrap();
    }
    start.elapsed()
}

fn sqlite_section(runtime: &tokio::runtime::Runtime, args: &Args, accounts: usize, reps: usize) {
    let dir = tempfile::TempDir::new().unwrap();
    let count = args.num("--sqlite-messages", 20_000);
    let fanned = fanned_out(count, accounts);
    let all = messages(&fanned);
    let workers = args.num("--workers", 8).max(1);
    println!("SQLite (WAL; files in {}):", dir.path().display());
    for full in [true, false] {
        let sides: &[(&str, SqliteSide)] = if full {
            &[
                ("raw upserts (2 statements)", SqliteSide::Raw),
                ("TreasuryConsumer::apply_one (7)", SqliteSide::Inbox),
                ("MessageSink::accept, group commit", SqliteSide::Sink),
                ("raw, --workers messages per tx", SqliteSide::RawGrouped),
            ]
        } else {
            &[
                ("raw upserts (2 statements)", SqliteSide::Raw),
                ("TreasuryConsumer::apply_one (7)", SqliteSide::Inbox),
                ("diag: raw + marker writes (4)", SqliteSide::RawWithMarker),
                ("prototype: one read statement (5)", SqliteSide::Lean),
            ]
        };
        let mut times: Vec<Vec<Duration>> = sides.iter().map(|_| Vec::new()).collect();
        for rep in 0..reps {
            for i in 0..sides.len() {
                let i = (i + rep) % sides.len();
                let config = sqlite_config(dir.path(), &format!("side{i}"), full);
                times[i].push(match sides[i].1 {
                    SqliteSide::Sink => sqlite_sink(runtime, config, &fanned, accounts, workers),
                    side => sqlite_run(runtime, config, &all, side, workers),
                });
            }
        }
        println!(
            " synchronous={} — {count} messages over {accounts} accounts, one transaction each \
             (group commit: {workers} workers, one delivery each at a time):",
            if full {
                "FULL (SqliteConfig default: an fsync per commit)"
            } else {
                "NORMAL (diagnostic: no fsync per commit, the statements' own cost)"
            }
        );
        let rows: Vec<(&str, &[Duration])> = sides
            .iter()
            .zip(&times)
            .map(|((label, _), t)| (*label, t.as_slice()))
            .collect();
        print_table(count, &rows);
    }
}

// ---------------------------------------------------------------------------------------
// PostgreSQL: schemas this run creates, dropped at the end (also on panic)

struct Schemas {
    url: String,
    names: Mutex<Vec<String>>,
}

impl Schemas {
    fn add(&self, name: &str) {
        self.names.lock().unwrap().push(name.to_owned());
    }

    async fn drop_all(url: &str, names: Vec<String>) {
        if names.is_empty() {
            return;
        }
        match PgConnection::connect(url).await {
            Ok(mut conn) => {
                for name in names {
                    let sql = format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE");
                    if let Err(e) = conn.execute(AssertSqlSafe(sql)).await {
                        eprintln!("cleanup: schema {name} NOT dropped: {e}");
                    }
                }
            }
            Err(e) => eprintln!("cleanup: cannot connect to drop {names:?}: {e}"),
        }
    }

    async fn now(&self) {
        let names = std::mem::take(&mut *self.names.lock().unwrap());
        Self::drop_all(&self.url, names).await;
    }
}

impl Drop for Schemas {
    fn drop(&mut self) {
        let names = std::mem::take(&mut *self.names.lock().unwrap());
        if names.is_empty() {
            return;
        }
        let url = self.url.clone();
        // Not on the bench's runtime: a thread with a runtime of its own.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(Self::drop_all(&url, names)))
        })
        .join();
    }
}

fn pg_config(url: &str, schema: &str) -> PgConfig {
    PgConfig::new(url).with_schema(schema)
}

async fn pg_inbox(url: &str, schema: &str, all: &[InboxMessage]) -> Duration {
    let consumer = PgTreasuryConsumer::open(pg_config(url, schema), CONSUMER, GAP_ALARM)
        .await
        .unwrap();
    let owned = all.to_vec();
    let start = Instant::now();
    for message in owned {
        applied(&consumer.apply_one(message).await.unwrap());
    }
    start.elapsed()
}

/// A pool with the consumer's settings on a schema the consumer created.
async fn pg_pool(url: &str, schema: &str) -> PgPool {
    drop(
        PgTreasuryConsumer::open(pg_config(url, schema), CONSUMER, GAP_ALARM)
            .await
            .unwrap(),
    );
    PgStore::open(pg_config(url, schema))
        .await
        .unwrap()
        .pool()
        .clone()
}

async fn upserts(conn: &mut PgConnection, message: &InboxMessage) {
    for d in deltas(message).unwrap() {
        sqlx::query(UPSERT_PG)
            .bind(&d.account)
            .bind(&d.asset)
            .bind(d.amount)
            .execute(&mut *conn)
            .await
            .unwrap();
    }
}

async fn pg_raw(
    url: &str,
    schema: &str,
    all: &[InboxMessage],
    async_commit: bool,
    side: PgSide,
) -> Duration {
    let pool = pg_pool(url, schema).await;
    let setting: String = sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        setting == "off",
        async_commit,
        "synchronous_commit={setting}"
    );
    let start = Instant::now();
    for message in all {
        let mut tx = pool.begin().await.unwrap();
        if side == PgSide::Raw {
            upserts(&mut tx, message).await;
        } else {
            // The consumer's own impact writer (one summed upsert), without the inbox.
            write_impact(&mut tx, message).await.unwrap();
        }
        if side == PgSide::RawWithMarker {
            pg_mark(&mut tx, message).await;
        }
        tx.commit().await.unwrap();
    }
    start.elapsed()
}

/// The inbox's two writes (its processed marker and the account's high-water mark)
/// in one statement, into its own tables (their keys, indexes and append-only
/// triggers), without its reads.
async fn pg_mark(conn: &mut PgConnection, message: &InboxMessage) {
    sqlx::query(
        "WITH marker AS (
             INSERT INTO inbox_messages (consumer, instruction_id, account, sequence, kind)
             VALUES ($1, $2, $3, $4, $5))
         INSERT INTO inbox_accounts (consumer, account, last_applied) VALUES ($1, $3, $4)
         ON CONFLICT (consumer, account) DO UPDATE SET last_applied = excluded.last_applied",
    )
    .bind(CONSUMER)
    .bind(&message.instruction_id)
    .bind(message.account.as_str())
    .bind(message.sequence as i64)
    .bind(message.kind.as_str())
    .execute(conn)
    .await
    .unwrap();
}

#[derive(Clone, Copy, PartialEq)]
enum PgSide {
    /// The consumer's single upsert statement, no inbox.
    RawOne,
    /// Diagnostic: `RawOne` plus the inbox's two writes in one statement (4 round
    /// trips, as the inbox): what the bookkeeping's rows cost by themselves.
    RawWithMarker,
    /// One upsert statement per delta, no inbox.
    Raw,
    Inbox,
}

async fn pg_run(
    url: &str,
    schema: &str,
    all: &[InboxMessage],
    side: PgSide,
    async_commit: bool,
) -> Duration {
    match side {
        PgSide::Inbox => pg_inbox(url, schema, all).await,
        raw => pg_raw(url, schema, all, async_commit, raw).await,
    }
}

/// The server's durability settings, for the header line.
async fn pg_settings(url: &str) -> sqlx::Result<String> {
    let mut conn = PgConnection::connect(url).await?;
    let row = sqlx::query(
        "SELECT current_setting('server_version'), current_setting('synchronous_commit'),
                current_setting('fsync'), current_setting('wal_sync_method')",
    )
    .fetch_one(&mut conn)
    .await?;
    Ok(format!(
        "PostgreSQL {}, synchronous_commit={}, fsync={}, wal_sync_method={}",
        row.get::<String, _>(0),
        row.get::<String, _>(1),
        row.get::<String, _>(2),
        row.get::<String, _>(3)
    ))
}

/// `url` with `synchronous_commit=off` for every session when `async_commit`.
fn pg_url(url: &str, async_commit: bool) -> String {
    if !async_commit {
        return url.to_owned();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20synchronous_commit%3Doff")
}

async fn pg_section(args: &Args, accounts: usize, reps: usize) {
    let url = std::env::var("OUTBOX_BENCH_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let settings = match tokio::time::timeout(Duration::from_secs(5), pg_settings(&url)).await {
        Ok(Ok(settings)) => settings,
        Ok(Err(e)) => return println!("PostgreSQL SKIPPED: cannot reach {url}: {e}"),
        Err(_) => return println!("PostgreSQL SKIPPED: connecting to {url} timed out"),
    };
    println!("{settings}:");
    let schemas = Schemas {
        url: url.clone(),
        names: Mutex::new(Vec::new()),
    };
    let run = Uuid::now_v7().simple().to_string();
    let count = args.num("--pg-messages", 3_000);
    let all = messages(&fanned_out(count, accounts));
    for async_commit in [false, true] {
        let sides: &[(&str, PgSide)] = &[
            ("raw, one upsert stmt (3 trips)", PgSide::RawOne),
            ("raw, 2 upserts (4 round trips)", PgSide::Raw),
            ("diag: raw + marker writes (4)", PgSide::RawWithMarker),
            ("PgTreasuryConsumer::apply_one (4)", PgSide::Inbox),
        ];
        let side_url = pg_url(&url, async_commit);
        let mut times: Vec<Vec<Duration>> = sides.iter().map(|_| Vec::new()).collect();
        for rep in 0..reps {
            for i in 0..sides.len() {
                let i = (i + rep) % sides.len();
                let schema = format!("outbox_bench_{run}_{}{rep}{i}", u8::from(async_commit));
                schemas.add(&schema);
                times[i].push(pg_run(&side_url, &schema, &all, sides[i].1, async_commit).await);
            }
        }
        schemas.now().await;
        println!(
            " synchronous_commit={} — {count} messages over {accounts} accounts, one transaction each:",
            if async_commit {
                "off (diagnostic, per session: no WAL flush wait, the round trips' own cost)"
            } else {
                "on (server default: a WAL flush per commit)"
            }
        );
        let rows: Vec<(&str, &[Duration])> = sides
            .iter()
            .zip(&times)
            .map(|((label, _), t)| (*label, t.as_slice()))
            .collect();
        print_table(count, &rows);
    }
}

fn main() {
    let args = Args::from_env();
    let accounts = args.num("--accounts", 1_000).max(1);
    let reps = args.num("--reps", 2).max(1);
    let only = args.value("--only").unwrap_or("").to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "Inbox apply vs raw impact upserts (medians of {reps} alternating runs; ratio to raw)"
    );
    if only.is_empty() || only == "sqlite" {
        sqlite_section(&runtime, &args, accounts, reps);
    }
    if only.is_empty() || only == "postgres" {
        runtime.block_on(pg_section(&args, accounts, reps));
    }
    println!("goal: inbox / raw ≥ 0.80");
}
