//! The exception queue on PostgreSQL: `exceptions` (append-only, deduplicated on
//! `(identity, recurrence)`) and `exception_resolutions` (append-only, one per
//! exception). Schema and rules: migration 8.

use chrono::{DateTime, Utc};
use outbox_core::{
    Account, Error, Exception, ExceptionKind, ExceptionQuery, NewException, Resolution, Severity,
};
use sqlx::postgres::PgRow;
use sqlx::{Executor, PgPool, Postgres, Row};

use crate::error::PgResultExt;
use crate::fanout::{corrupt, u64_column};

/// `SELECT` of every column [`exception_from_row`] reads, each exception with its
/// resolution, followed by `$rest` (a `WHERE` and the `ORDER BY`). Amounts travel as
/// text: an i128 has no sqlx mapping, and text keeps every digit.
macro_rules! select_exceptions {
    ($rest:literal) => {
        concat!(
            "SELECT x.id, x.source, x.kind, x.severity, x.account, x.sequence, x.event_id,
                    x.ledger_tx, x.asset, x.ledger_amount::text AS ledger_amount,
                    x.provider_amount::text AS provider_amount, x.detail, x.detected_at,
                    r.resolved_by, r.note, r.resolved_at
             FROM exceptions x LEFT JOIN exception_resolutions r ON r.exception_id = x.id ",
            $rest
        )
    };
}
pub(crate) use select_exceptions;

fn amount(row: &PgRow, column: &str) -> outbox_core::Result<Option<i128>> {
    row.get::<Option<String>, _>(column)
        .map(|text| {
            text.parse::<i128>()
                .map_err(|_| corrupt(&format!("exceptions.{column}"), text))
        })
        .transpose()
}

/// One row of [`select_exceptions`].
pub(crate) fn exception_from_row(row: &PgRow) -> outbox_core::Result<Exception> {
    let kind: String = row.get("kind");
    let severity: String = row.get("severity");
    let account: String = row.get("account");
    let resolution = row
        .get::<Option<String>, _>("resolved_by")
        .map(|resolved_by| Resolution {
            resolved_by,
            note: row.get("note"),
            resolved_at: row.get("resolved_at"),
        });
    Ok(Exception {
        id: row.get("id"),
        source: row.get("source"),
        kind: ExceptionKind::parse(&kind).ok_or_else(|| corrupt("exceptions.kind", &kind))?,
        severity: Severity::parse(&severity)
            .ok_or_else(|| corrupt("exceptions.severity", &severity))?,
        account: Account::parse(&account).map_err(|e| corrupt("exceptions.account", e))?,
        sequence: u64_column("exceptions.sequence", row.get("sequence"))?,
        event_id: row.get("event_id"),
        ledger_tx: row
            .get::<Option<i64>, _>("ledger_tx")
            .map(|tx| u64_column("exceptions.ledger_tx", tx))
            .transpose()?,
        asset: row.get("asset"),
        ledger_amount: amount(row, "ledger_amount")?,
        provider_amount: amount(row, "provider_amount")?,
        detail: row.get("detail"),
        detected_at: row.get("detected_at"),
        resolution,
    })
}

fn bigint(field: &str, value: u64) -> outbox_core::Result<i64> {
    i64::try_from(value)
        .map_err(|_| Error::invalid(field, format!("{value} does not fit a Postgres bigint")))
}

/// Records `exception` unless an open one with its identity exists; shared with the
/// inbox, which passes the consumer's transaction.
///
/// The recurrence written is the identity's latest one while that is open and the
/// next once it is resolved (0 for a new finding). Two raisers of one finding compute
/// the same number, so the unique constraint lets exactly one insert through and the
/// other records nothing. The latest, not a count of resolved ones, so that resolved
/// exceptions retention removed never bring a number back.
pub(crate) async fn insert_exception<'e, E>(
    executor: E,
    exception: &NewException,
) -> outbox_core::Result<bool>
where
    E: Executor<'e, Database = Postgres>,
{
    let inserted = sqlx::query(
        "INSERT INTO exceptions (source, kind, severity, account, sequence, event_id, ledger_tx,
             asset, ledger_amount, provider_amount, detail, identity, recurrence)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::numeric, $10::numeric, $11, $12,
             coalesce((SELECT x.recurrence
                              + (EXISTS (SELECT 1 FROM exception_resolutions r
                                         WHERE r.exception_id = x.id))::int
                       FROM exceptions x WHERE x.identity = $12
                       ORDER BY x.recurrence DESC LIMIT 1), 0))
         ON CONFLICT (identity, recurrence) DO NOTHING",
    )
    .bind(&exception.source)
    .bind(exception.kind.as_str())
    .bind(exception.severity.as_str())
    .bind(exception.account.as_str())
    .bind(bigint("sequence", exception.sequence)?)
    .bind(&exception.event_id)
    .bind(
        exception
            .ledger_tx
            .map(|tx| bigint("ledger_tx", tx))
            .transpose()?,
    )
    .bind(&exception.asset)
    .bind(exception.ledger_amount.map(|a| a.to_string()))
    .bind(exception.provider_amount.map(|a| a.to_string()))
    .bind(&exception.detail)
    .bind(exception.identity())
    .execute(executor)
    .await
    .storage()?;
    Ok(inserted.rows_affected() == 1)
}

/// The exceptions `query` selects, oldest first, filtered in the query.
pub(crate) async fn exceptions_matching(
    pool: &PgPool,
    query: &ExceptionQuery,
) -> outbox_core::Result<Vec<Exception>> {
    let kinds: Vec<&str> = query.kinds.iter().map(|k| k.as_str()).collect();
    let rows = sqlx::query(select_exceptions!(
        "WHERE (NOT $1 OR r.exception_id IS NULL)
           AND (cardinality($2::text[]) = 0 OR x.kind = ANY($2::text[]))
         ORDER BY x.id"
    ))
    .bind(query.open_only)
    .bind(kinds)
    .fetch_all(pool)
    .await
    .storage()?;
    rows.iter().map(exception_from_row).collect()
}

/// Appends the resolution of exception `id`; the unique `exception_id` makes a second
/// resolution, even a concurrent one, record nothing.
pub(crate) async fn resolve_exception(
    pool: &PgPool,
    id: i64,
    resolved_by: &str,
    note: &str,
) -> outbox_core::Result<Resolution> {
    Resolution::validate(resolved_by, note)?;
    let recorded: Option<(DateTime<Utc>,)> = sqlx::query_as(
        "INSERT INTO exception_resolutions (exception_id, resolved_by, note)
         SELECT x.id, $2, $3 FROM exceptions x WHERE x.id = $1
         ON CONFLICT (exception_id) DO NOTHING
         RETURNING resolved_at",
    )
    .bind(id)
    .bind(resolved_by)
    .bind(note)
    .fetch_optional(pool)
    .await
    .storage()?;
    if let Some((resolved_at,)) = recorded {
        return Ok(Resolution {
            resolved_by: resolved_by.to_owned(),
            note: note.to_owned(),
            resolved_at,
        });
    }
    let existing: Option<(Option<String>, Option<DateTime<Utc>>)> = sqlx::query_as(
        "SELECT r.resolved_by, r.resolved_at
         FROM exceptions x LEFT JOIN exception_resolutions r ON r.exception_id = x.id
         WHERE x.id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
    .storage()?;
    Err(match existing {
        Some((Some(by), Some(at))) => Error::invalid(
            "id",
            format!(
                "exception {id} was already resolved by {by} at {}: a resolution is never replaced",
                at.to_rfc3339()
            ),
        ),
        _ => Error::invalid("id", format!("there is no exception {id}")),
    })
}
