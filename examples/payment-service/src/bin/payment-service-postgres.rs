//! A payment service on PostgreSQL: `POST /payouts` writes the payout intent and its
//! outbox event in one sqlx transaction, so the ledger gets the payout if and only
//! if the service kept it.
//!
//! `payment-service-postgres --database postgres://… [--schema S] [--listen ADDR]`

use std::net::SocketAddr;

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use clap::Parser;
use outbox_core::Result;
use outbox_example_payment_service::answer::Failure;
use outbox_example_payment_service::payout::{
    Payout, PayoutAccepted, PayoutRequest, StoredPayout, Written,
};
use outbox_example_payment_service::retry::with_retries;
use outbox_store_postgres::{PgConfig, PgStore, enqueue, map_error};
use sqlx::PgPool;

#[derive(Parser)]
struct Args {
    /// The service's database, where the outbox lives beside the payouts.
    #[arg(long, env = "DATABASE_URL")]
    database: String,
    /// Schema of the payouts and outbox tables (created if missing).
    #[arg(long)]
    schema: Option<String>,
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
}

/// The service's own table. The outbox tables come from the outbox migrations,
/// which `PgStore::open` runs.
const PAYOUTS: &str = "CREATE TABLE IF NOT EXISTS payouts (
    payout_id    TEXT PRIMARY KEY,
    merchant     TEXT NOT NULL,
    amount_minor BIGINT NOT NULL CHECK (amount_minor > 0),
    asset        TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    sequence     BIGINT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
)";

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut config = PgConfig::new(args.database);
    if let Some(schema) = args.schema {
        config = config.with_schema(schema);
    }
    let pool = PgStore::open(config).await?.pool().clone();
    sqlx::query(PAYOUTS)
        .execute(&pool)
        .await
        .map_err(map_error)?;
    let app = Router::new()
        .route("/payouts", post(create_payout))
        .with_state(pool);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| outbox_core::Error::invalid("listen", e.to_string()))?;
    println!("payment service listening on {}", args.listen);
    axum::serve(listener, app)
        .await
        .map_err(|e| outbox_core::Error::new(outbox_core::ErrorKind::Internal, e.to_string()))
}

async fn create_payout(
    State(pool): State<PgPool>,
    body: std::result::Result<Json<PayoutRequest>, JsonRejection>,
) -> std::result::Result<(StatusCode, Json<PayoutAccepted>), Failure> {
    let Json(request) = body?;
    let payout = request.validate()?;
    with_retries(|| write(&pool, &payout)).await?.answer()
}

/// One transaction: the outbox event, then the payout row that names it. A payout
/// id already taken rolls both back and answers from the row that holds it.
async fn write(pool: &PgPool, payout: &Payout) -> Result<Written> {
    let mut tx = pool.begin().await.map_err(map_error)?;
    let event = enqueue(&mut tx, &payout.event()?).await?;
    let inserted = sqlx::query(
        "INSERT INTO payouts (payout_id, merchant, amount_minor, asset, event_id, sequence)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (payout_id) DO NOTHING",
    )
    .bind(&payout.payout_id)
    .bind(&payout.merchant)
    .bind(i64::try_from(payout.amount.minor_units()).unwrap_or(i64::MAX))
    .bind(payout.asset.as_str())
    .bind(event.event_id.to_string())
    .bind(i64::try_from(event.sequence).unwrap_or(i64::MAX))
    .execute(&mut *tx)
    .await
    .map_err(map_error)?
    .rows_affected();
    if inserted == 1 {
        tx.commit().await.map_err(map_error)?;
        return Ok(Written::New(PayoutAccepted {
            payout_id: payout.payout_id.clone(),
            event_id: event.event_id.to_string(),
            sequence: event.sequence,
        }));
    }
    tx.rollback().await.map_err(map_error)?;
    let (merchant, amount_minor, asset, event_id, sequence) = sqlx::query_as(
        "SELECT merchant, amount_minor, asset, event_id, sequence FROM payouts WHERE payout_id = $1",
    )
    .bind(&payout.payout_id)
    .fetch_one(pool)
    .await
    .map_err(map_error)?;
    Ok(payout.written_before(StoredPayout {
        merchant,
        amount_minor,
        asset,
        event_id,
        sequence,
    }))
}
