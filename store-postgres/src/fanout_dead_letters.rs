//! The fan-out's dead letters and replay requests on PostgreSQL (tables
//! `fanout_dead_letters`, `fanout_replay_requests`, migration 0005): the statements
//! behind `PgFanoutStore`'s dead-letter methods.

use outbox_core::{
    Account, DeadLetter, DeadLetterQuery, DeadLetterReason, Error, ErrorKind, NewDeadLetter,
    ReplayRequest, StoredMessage,
};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

use crate::error::PgResultExt;
use crate::fanout::{corrupt, i64_field, message_from_row, u64_column};

/// One statement: all of `letters` or none; their ids in input order.
pub(crate) async fn append(
    pool: &PgPool,
    letters: &[NewDeadLetter],
) -> outbox_core::Result<Vec<u64>> {
    if letters.is_empty() {
        return Ok(Vec::new());
    }
    let mut destination = Vec::with_capacity(letters.len());
    let mut position = Vec::with_capacity(letters.len());
    let mut account = Vec::with_capacity(letters.len());
    let mut sequence = Vec::with_capacity(letters.len());
    let mut instruction_id = Vec::with_capacity(letters.len());
    let mut reason = Vec::with_capacity(letters.len());
    let mut error = Vec::with_capacity(letters.len());
    for letter in letters {
        destination.push(letter.destination.clone());
        position.push(i64_field("position", letter.position)?);
        account.push(letter.account.as_str().to_owned());
        sequence.push(i64_field("sequence", letter.sequence)?);
        instruction_id.push(letter.instruction_id.clone());
        reason.push(letter.reason.as_str());
        error.push(letter.error.clone());
    }
    // Rows are inserted in ordinality order, so the identity hands out ascending ids
    // in input order; sorting the returned ids restores that order.
    let mut ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO fanout_dead_letters (destination, position, account, sequence,
             instruction_id, reason, error)
         SELECT d, p, a, s, i, r, e
         FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[],
                     $6::text[], $7::text[]) WITH ORDINALITY AS t(d, p, a, s, i, r, e, n)
         ORDER BY n
         RETURNING id",
    )
    .bind(&destination)
    .bind(&position)
    .bind(&account)
    .bind(&sequence)
    .bind(&instruction_id)
    .bind(&reason)
    .bind(&error)
    .fetch_all(pool)
    .await
    .storage()?;
    ids.sort_unstable();
    ids.into_iter()
        .map(|id| u64_column("fanout_dead_letters.id", id))
        .collect()
}

pub(crate) fn letter_from_row(row: &PgRow) -> outbox_core::Result<DeadLetter> {
    let account: String = row.get("account");
    let reason: String = row.get("reason");
    Ok(DeadLetter {
        id: u64_column("fanout_dead_letters.id", row.get("id"))?,
        destination: row.get("destination"),
        position: u64_column("fanout_dead_letters.position", row.get("position"))?,
        account: Account::parse(&account).map_err(|e| corrupt("fanout_dead_letters.account", e))?,
        sequence: u64_column("fanout_dead_letters.sequence", row.get("sequence"))?,
        instruction_id: row.get("instruction_id"),
        reason: DeadLetterReason::parse(&reason)
            .ok_or_else(|| corrupt("fanout_dead_letters.reason", &reason))?,
        error: row.get("error"),
        dead_lettered_at: row.get("dead_lettered_at"),
    })
}

pub(crate) async fn read(
    pool: &PgPool,
    query: &DeadLetterQuery<'_>,
) -> outbox_core::Result<Vec<DeadLetter>> {
    let rows = sqlx::query(
        "SELECT id, destination, position, account, sequence, instruction_id, reason, error,
                dead_lettered_at
         FROM fanout_dead_letters
         WHERE id > $1 AND ($2::text IS NULL OR destination = $2)
           AND ($3::text IS NULL OR account = $3)
         ORDER BY id LIMIT $4",
    )
    // Ids are at most i64::MAX: anything above reads nothing.
    .bind(i64::try_from(query.after_id).unwrap_or(i64::MAX))
    .bind(query.destination)
    .bind(query.account.map(Account::as_str))
    .bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await
    .storage()?;
    rows.iter().map(letter_from_row).collect()
}

pub(crate) async fn read_set_aside(
    pool: &PgPool,
    destination: &str,
    account: &Account,
    after: u64,
    limit: usize,
) -> outbox_core::Result<Vec<StoredMessage>> {
    let rows = sqlx::query(
        "SELECT position, instruction_id, account, sequence, kind, ledger, ledger_tx_id,
                traceparent, tracestate, payload, received_at
         FROM fanout_messages
         WHERE position IN (SELECT position FROM fanout_dead_letters
                            WHERE destination = $1 AND account = $2 AND position > $3)
         ORDER BY position LIMIT $4",
    )
    .bind(destination)
    .bind(account.as_str())
    .bind(i64::try_from(after).unwrap_or(i64::MAX))
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await
    .storage()?;
    rows.iter().map(message_from_row).collect()
}

/// The request and the refusal it covers, in one statement.
pub(crate) async fn request_replay(
    pool: &PgPool,
    destination: &str,
    account: &Account,
) -> outbox_core::Result<ReplayRequest> {
    let row = sqlx::query(
        "INSERT INTO fanout_replay_requests (destination, account, refusal_id)
         SELECT $1, $2, max(id) FROM fanout_dead_letters
         WHERE destination = $1 AND account = $2 AND reason = 'refused'
         HAVING max(id) IS NOT NULL
         RETURNING id, destination, account, refusal_id, requested_at",
    )
    .bind(destination)
    .bind(account.as_str())
    .fetch_optional(pool)
    .await
    .storage()?;
    match row {
        Some(row) => request_from_row(&row),
        None => Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "account {} has no refused message at {destination}: nothing to replay",
                account.as_str()
            ),
        )
        .with("field", "account")),
    }
}

fn request_from_row(row: &PgRow) -> outbox_core::Result<ReplayRequest> {
    let account: String = row.get("account");
    Ok(ReplayRequest {
        id: u64_column("fanout_replay_requests.id", row.get("id"))?,
        destination: row.get("destination"),
        account: Account::parse(&account)
            .map_err(|e| corrupt("fanout_replay_requests.account", e))?,
        refusal_id: u64_column("fanout_replay_requests.refusal_id", row.get("refusal_id"))?,
        requested_at: row.get("requested_at"),
    })
}

pub(crate) async fn read_replay_requests(
    pool: &PgPool,
    destination: &str,
    after: u64,
) -> outbox_core::Result<Vec<ReplayRequest>> {
    let rows = sqlx::query(
        "SELECT id, destination, account, refusal_id, requested_at
         FROM fanout_replay_requests WHERE destination = $1 AND id > $2 ORDER BY id",
    )
    .bind(destination)
    .bind(i64::try_from(after).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await
    .storage()?;
    rows.iter().map(request_from_row).collect()
}
