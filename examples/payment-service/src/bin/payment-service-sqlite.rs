//! A payment service on SQLite: `POST /payouts` writes the payout intent and its
//! outbox event in one rusqlite transaction, so the ledger gets the payout if and
//! only if the service kept it.
//!
//! `payment-service-sqlite --database FILE [--listen ADDR]`

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use clap::Parser;
use outbox_core::{Error, ErrorKind, Result};
use outbox_example_payment_service::answer::Failure;
use outbox_example_payment_service::payout::{
    Payout, PayoutAccepted, PayoutRequest, StoredPayout, Written,
};
use outbox_example_payment_service::retry::with_retries;
use outbox_store_sqlite::{SqliteConfig, connect, enqueue, map_error, migrate};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

#[derive(Parser)]
struct Args {
    /// The service's SQLite file, where the outbox lives beside the payouts.
    #[arg(long)]
    database: PathBuf,
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
}

/// The service's own table; the outbox tables come from `migrate`.
const PAYOUTS: &str = "CREATE TABLE IF NOT EXISTS payouts (
    payout_id    TEXT PRIMARY KEY,
    merchant     TEXT NOT NULL,
    amount_minor INTEGER NOT NULL CHECK (amount_minor > 0),
    asset        TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    sequence     INTEGER NOT NULL,
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)";

/// SQLite has one writer: one connection, used on the blocking pool.
type Db = Arc<Mutex<Connection>>;

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut conn = connect(&SqliteConfig::new(&args.database))?;
    migrate(&mut conn)?;
    conn.execute_batch(PAYOUTS).map_err(map_error)?;
    let app = Router::new()
        .route("/payouts", post(create_payout))
        .with_state(Arc::new(Mutex::new(conn)));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Error::invalid("listen", e.to_string()))?;
    println!("payment service listening on {}", args.listen);
    axum::serve(listener, app)
        .await
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))
}

async fn create_payout(
    State(db): State<Db>,
    body: std::result::Result<Json<PayoutRequest>, JsonRejection>,
) -> std::result::Result<(StatusCode, Json<PayoutAccepted>), Failure> {
    let Json(request) = body?;
    let payout = request.validate()?;
    let written = with_retries(|| {
        let (db, payout) = (Arc::clone(&db), payout.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                let mut conn = db.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                write(&mut conn, &payout)
            })
            .await
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?
        }
    })
    .await?;
    written.answer()
}

/// One transaction (taken for writing at once, so a busy file fails before any
/// work): the payout row, then its outbox event. A payout id already taken writes
/// nothing and answers from the row that holds it.
fn write(conn: &mut Connection, payout: &Payout) -> Result<Written> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_error)?;
    let existing = tx
        .query_row(
            "SELECT merchant, amount_minor, asset, event_id, sequence FROM payouts WHERE payout_id = ?1",
            [&payout.payout_id],
            |r| {
                Ok(StoredPayout {
                    merchant: r.get(0)?,
                    amount_minor: r.get(1)?,
                    asset: r.get(2)?,
                    event_id: r.get(3)?,
                    sequence: r.get(4)?,
                })
            },
        )
        .optional()
        .map_err(map_error)?;
    if let Some(stored) = existing {
        return Ok(payout.written_before(stored));
    }
    let event = enqueue(&tx, &payout.event()?)?;
    tx.execute(
        "INSERT INTO payouts (payout_id, merchant, amount_minor, asset, event_id, sequence)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            payout.payout_id,
            payout.merchant,
            i64::try_from(payout.amount.minor_units()).unwrap_or(i64::MAX),
            payout.asset.as_str(),
            event.event_id.to_string(),
            i64::try_from(event.sequence).unwrap_or(i64::MAX),
        ],
    )
    .map_err(map_error)?;
    tx.commit().map_err(map_error)?;
    Ok(Written::New(PayoutAccepted {
        payout_id: payout.payout_id.clone(),
        event_id: event.event_id.to_string(),
        sequence: event.sequence,
    }))
}
