//! The exception queue on SQLite: `exceptions` (append-only, deduplicated on
//! `(identity, recurrence)`) and `exception_resolutions` (append-only, one per
//! exception). Schema and rules: migration 5.

use outbox_core::{
    Account, Error, Exception, ExceptionKind, ExceptionQuery, NewException, Resolution, Severity,
};
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use crate::error::SqliteResultExt;
use crate::time;

/// `SELECT` of every column [`exception_from_row`] reads, each exception with its
/// resolution, followed by `$rest` (a `WHERE` and the `ORDER BY`).
macro_rules! select_exceptions {
    ($rest:literal) => {
        concat!(
            "SELECT x.id, x.source, x.kind, x.severity, x.account, x.sequence, x.event_id,
                    x.ledger_tx, x.asset, x.ledger_amount, x.provider_amount, x.detail,
                    x.detected_at, r.resolved_by, r.note, r.resolved_at
             FROM exceptions x LEFT JOIN exception_resolutions r ON r.exception_id = x.id ",
            $rest
        )
    };
}
pub(crate) use select_exceptions;

fn corrupt(column: &'static str, value: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        format!("{column}: unreadable value {value}").into(),
    )
}

fn amount(row: &Row<'_>, index: usize, column: &'static str) -> rusqlite::Result<Option<i128>> {
    row.get::<_, Option<String>>(index)?
        .map(|text| text.parse::<i128>().map_err(|_| corrupt(column, text)))
        .transpose()
}

/// One row of [`select_exceptions`].
pub(crate) fn exception_from_row(row: &Row<'_>) -> rusqlite::Result<Exception> {
    let kind: String = row.get(2)?;
    let severity: String = row.get(3)?;
    let account: String = row.get(4)?;
    let resolved_by: Option<String> = row.get(13)?;
    let resolution = match resolved_by {
        Some(resolved_by) => Some(Resolution {
            resolved_by,
            note: row.get(14)?,
            resolved_at: time::from_micros(row.get(15)?),
        }),
        None => None,
    };
    Ok(Exception {
        id: row.get(0)?,
        source: row.get(1)?,
        kind: ExceptionKind::parse(&kind).ok_or_else(|| corrupt("exceptions.kind", &kind))?,
        severity: Severity::parse(&severity)
            .ok_or_else(|| corrupt("exceptions.severity", &severity))?,
        account: Account::parse(&account).map_err(|e| corrupt("exceptions.account", e))?,
        sequence: row.get::<_, i64>(5)? as u64,
        event_id: row.get(6)?,
        ledger_tx: row.get::<_, Option<i64>>(7)?.map(|tx| tx as u64),
        asset: row.get(8)?,
        ledger_amount: amount(row, 9, "exceptions.ledger_amount")?,
        provider_amount: amount(row, 10, "exceptions.provider_amount")?,
        detail: row.get(11)?,
        detected_at: time::from_micros(row.get(12)?),
        resolution,
    })
}

fn int(field: &str, value: u64) -> outbox_core::Result<i64> {
    i64::try_from(value)
        .map_err(|_| Error::invalid(field, format!("{value} does not fit a SQLite integer")))
}

/// Records `exception` unless an open one with its identity exists; shared with the
/// inbox, which passes the consumer's transaction.
///
/// The recurrence written is the identity's latest one while that is open (the
/// conflict then records nothing) and the next once it is resolved (0 for a new
/// finding). The latest, not a count of resolved ones, so that resolved exceptions
/// retention removed never bring a number back.
pub(crate) fn insert_exception(
    conn: &Connection,
    exception: &NewException,
) -> outbox_core::Result<bool> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO exceptions (source, kind, severity, account, sequence, event_id, ledger_tx,
                 asset, ledger_amount, provider_amount, detail, detected_at, identity, recurrence)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,
                 coalesce((SELECT x.recurrence
                                  + EXISTS (SELECT 1 FROM exception_resolutions r WHERE r.exception_id = x.id)
                           FROM exceptions x WHERE x.identity = ?13
                           ORDER BY x.recurrence DESC LIMIT 1), 0))
             ON CONFLICT (identity, recurrence) DO NOTHING",
        )
        .storage()?
        .execute(params![
            exception.source,
            exception.kind.as_str(),
            exception.severity.as_str(),
            exception.account.as_str(),
            int("sequence", exception.sequence)?,
            exception.event_id,
            exception
                .ledger_tx
                .map(|tx| int("ledger_tx", tx))
                .transpose()?,
            exception.asset,
            exception.ledger_amount.map(|a| a.to_string()),
            exception.provider_amount.map(|a| a.to_string()),
            exception.detail,
            time::now_micros(),
            exception.identity(),
        ])
        .storage()?;
    Ok(inserted == 1)
}

/// The exceptions `query` selects, oldest first, filtered in the query.
pub(crate) fn exceptions_matching(
    conn: &Connection,
    query: &ExceptionQuery,
) -> outbox_core::Result<Vec<Exception>> {
    // Kind names are [a-z_]: a JSON array of them needs no escaping.
    let kinds = (!query.kinds.is_empty()).then(|| {
        let quoted: Vec<String> = query
            .kinds
            .iter()
            .map(|k| format!("\"{}\"", k.as_str()))
            .collect();
        format!("[{}]", quoted.join(","))
    });
    let mut stmt = conn
        .prepare_cached(select_exceptions!(
            "WHERE (NOT ?1 OR r.exception_id IS NULL)
               AND (?2 IS NULL OR x.kind IN (SELECT value FROM json_each(?2)))
             ORDER BY x.id"
        ))
        .storage()?;
    let rows = stmt
        .query_map(params![query.open_only, kinds], exception_from_row)
        .storage()?;
    rows.collect::<rusqlite::Result<Vec<_>>>().storage()
}

/// Appends the resolution of exception `id`, in one immediate transaction.
pub(crate) fn resolve_exception(
    conn: &mut Connection,
    id: i64,
    resolved_by: &str,
    note: &str,
) -> outbox_core::Result<Resolution> {
    Resolution::validate(resolved_by, note)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .storage()?;
    let found: Option<Option<(String, i64)>> = tx
        .query_row(
            "SELECT r.resolved_by, r.resolved_at
             FROM exceptions x LEFT JOIN exception_resolutions r ON r.exception_id = x.id
             WHERE x.id = ?1",
            [id],
            |row| {
                let by: Option<String> = row.get(0)?;
                Ok(match by {
                    Some(by) => Some((by, row.get(1)?)),
                    None => None,
                })
            },
        )
        .optional()
        .storage()?;
    match found {
        None => return Err(unknown(id)),
        Some(Some((by, at))) => return Err(already_resolved(id, &by, time::from_micros(at))),
        Some(None) => {}
    }
    let resolution = Resolution {
        resolved_by: resolved_by.to_owned(),
        note: note.to_owned(),
        resolved_at: time::from_micros(time::now_micros()),
    };
    tx.execute(
        "INSERT INTO exception_resolutions (exception_id, resolved_by, note, resolved_at)
         VALUES (?1, ?2, ?3, ?4)",
        params![
            id,
            resolution.resolved_by,
            resolution.note,
            resolution.resolved_at.timestamp_micros()
        ],
    )
    .storage()?;
    tx.commit().storage()?;
    Ok(resolution)
}

pub(crate) fn unknown(id: i64) -> Error {
    Error::invalid("id", format!("there is no exception {id}"))
}

pub(crate) fn already_resolved(id: i64, by: &str, at: chrono::DateTime<chrono::Utc>) -> Error {
    Error::invalid(
        "id",
        format!(
            "exception {id} was already resolved by {by} at {}: a resolution is never replaced",
            at.to_rfc3339()
        ),
    )
}
