//! SQLite enqueue overhead, printed as figures and ratios (no assertions).
//!
//! Three transactions, interleaved in rounds so drift hits them alike:
//! 1. the payout intent row alone;
//! 2. intent + a plain INSERT of a same-size row into a table with no sequence or
//!    constraints (the physical cost of one more row);
//! 3. intent + `enqueue` (counter bump, constraints, triggers, payload encoding).
//!
//! Goal: (3) ≤ 1.15 × (2). Run: `cargo bench -p outbox-store-sqlite --bench enqueue`
//! (`-- --synchronous normal` to measure without an fsync per commit).

use std::time::{Duration, Instant};

use outbox_core::NewEvent;
use outbox_store_sqlite::{SqliteConfig, connect, enqueue, migrate};
use outbox_testkit::fixtures::payout;
use rusqlite::{Connection, TransactionBehavior, params};

const ROUNDS: usize = 10;
const PER_ROUND: usize = 300;

#[derive(Clone, Copy)]
/// What the transaction writes besides the payout intent.
enum Variant {
    Alone,
    PlusPlainRow,
    PlusEnqueue,
}

fn one_transaction(
    conn: &mut Connection,
    variant: Variant,
    i: usize,
    plain_row: &[u8],
    events: &[NewEvent],
) {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    tx.execute(
        "INSERT INTO payout_intents (merchant, amount, status) VALUES (?1, ?2, 'requested')",
        params![format!("merchants:{}", i % 50), 48_500_000_i64],
    )
    .unwrap();
    match variant {
        Variant::Alone => {}
        Variant::PlusPlainRow => {
            tx.execute(
                "INSERT INTO plain_rows (event_id, account, sequence, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![uuid_text(i), format!("merchants:{}", i % 50), i as i64, plain_row, 1_764_000_000_000_000_i64],
            )
            .unwrap();
        }
        Variant::PlusEnqueue => {
            enqueue(&tx, &events[i % events.len()]).unwrap();
        }
    }
    tx.commit().unwrap();
}

fn uuid_text(i: usize) -> String {
    format!("0190f2a0-7b1c-7cc2-8a4e-{i:012}")
}

fn main() {
    let synchronous_full = !std::env::args().any(|a| a == "normal");
    let dir = tempfile::TempDir::new().unwrap();
    let mut config = SqliteConfig::new(dir.path().join("bench.db"));
    config.synchronous_full = synchronous_full;
    let mut conn = connect(&config).unwrap();
    migrate(&mut conn).unwrap();
    conn.execute_batch(
        "CREATE TABLE payout_intents (id INTEGER PRIMARY KEY, merchant TEXT NOT NULL, amount INTEGER NOT NULL, status TEXT NOT NULL);
         CREATE TABLE plain_rows (event_id TEXT, account TEXT, sequence INTEGER, payload BLOB, created_at INTEGER);",
    )
    .unwrap();
    // The plain row carries a payload of the same size as a real one.
    let sample = payout("0", 48_500_000).encode(1).unwrap().1.into_bytes();
    // Events are built (and validated) outside the timed loop, as a caller builds them
    // before opening its transaction.
    let events: Vec<NewEvent> = (0..50)
        .map(|m| payout(&m.to_string(), 48_500_000))
        .collect();

    let variants = [
        ("intent alone", Variant::Alone),
        ("intent + plain row", Variant::PlusPlainRow),
        ("intent + enqueue", Variant::PlusEnqueue),
    ];
    let mut totals = [Duration::ZERO; 3];
    let mut counter = 0;
    for _ in 0..ROUNDS {
        for (slot, (_, variant)) in variants.iter().enumerate() {
            let start = Instant::now();
            for _ in 0..PER_ROUND {
                one_transaction(&mut conn, *variant, counter, &sample, &events);
                counter += 1;
            }
            totals[slot] += start.elapsed();
        }
    }
    let n = (ROUNDS * PER_ROUND) as f64;
    println!(
        "SQLite enqueue overhead: {} transactions per variant, synchronous={}, payload {} bytes",
        ROUNDS * PER_ROUND,
        if synchronous_full { "FULL" } else { "NORMAL" },
        sample.len()
    );
    let rate = |d: Duration| n / d.as_secs_f64();
    for (slot, (name, _)) in variants.iter().enumerate() {
        println!(
            "  {name:<20} {:>9.0} tx/s  {:>8.1} µs/tx",
            rate(totals[slot]),
            totals[slot].as_secs_f64() * 1e6 / n
        );
    }
    let ratio = |a: usize, b: usize| totals[a].as_secs_f64() / totals[b].as_secs_f64();
    println!(
        "  ratio enqueue / plain row   = {:.3}  (goal ≤ 1.15)",
        ratio(2, 1)
    );
    println!("  ratio enqueue / intent alone = {:.3}", ratio(2, 0));
    println!("  ratio plain row / intent alone = {:.3}", ratio(1, 0));
}
