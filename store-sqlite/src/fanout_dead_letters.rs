//! The fan-out's dead letters and replay requests on SQLite (tables
//! `fanout_dead_letters`, `fanout_replay_requests`, migration 0003): the statements
//! behind `SqliteFanoutStore`'s dead-letter methods, run on its connection.

use outbox_core::{
    Account, DeadLetter, DeadLetterQuery, DeadLetterReason, Error, ErrorKind, NewDeadLetter,
    ReplayRequest, StoredMessage,
};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::error::SqliteResultExt;
use crate::fanout::{corrupt, message_from_row, to_i64, unsigned};
use crate::time;

/// One transaction: all of `letters` or none; their ids in input order.
pub(crate) fn append(
    conn: &mut Connection,
    letters: &[NewDeadLetter],
) -> outbox_core::Result<Vec<u64>> {
    let rows = letters
        .iter()
        .map(|l| {
            Ok((
                to_i64("position", l.position)?,
                to_i64("sequence", l.sequence)?,
            ))
        })
        .collect::<outbox_core::Result<Vec<_>>>()?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .storage()?;
    let now = time::now_micros();
    let mut ids = Vec::with_capacity(letters.len());
    {
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO fanout_dead_letters (destination, position, account, sequence,
                     instruction_id, reason, error, dead_lettered_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .storage()?;
        for (letter, (position, sequence)) in letters.iter().zip(rows) {
            insert
                .execute(params![
                    letter.destination,
                    position,
                    letter.account.as_str(),
                    sequence,
                    letter.instruction_id,
                    letter.reason.as_str(),
                    letter.error,
                    now
                ])
                .storage()?;
            ids.push(unsigned("fanout_dead_letters.id", tx.last_insert_rowid()).storage()?);
        }
    }
    tx.commit().storage()?;
    Ok(ids)
}

pub(crate) fn letter_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<DeadLetter> {
    let account: String = row.get(3)?;
    let reason: String = row.get(6)?;
    Ok(DeadLetter {
        id: unsigned("fanout_dead_letters.id", row.get(0)?)?,
        destination: row.get(1)?,
        position: unsigned("fanout_dead_letters.position", row.get(2)?)?,
        account: Account::parse(&account).map_err(|e| corrupt("fanout_dead_letters.account", e))?,
        sequence: unsigned("fanout_dead_letters.sequence", row.get(4)?)?,
        instruction_id: row.get(5)?,
        reason: DeadLetterReason::parse(&reason)
            .ok_or_else(|| corrupt("fanout_dead_letters.reason", &reason))?,
        error: row.get(7)?,
        dead_lettered_at: time::from_micros(row.get(8)?),
    })
}

pub(crate) fn read(conn: &mut Connection, query: &Query) -> outbox_core::Result<Vec<DeadLetter>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, destination, position, account, sequence, instruction_id, reason, error,
                    dead_lettered_at
             FROM fanout_dead_letters
             WHERE id > ?1 AND (?2 IS NULL OR destination = ?2) AND (?3 IS NULL OR account = ?3)
             ORDER BY id LIMIT ?4",
        )
        .storage()?;
    let rows = stmt
        .query_map(
            params![
                query.after_id,
                query.destination,
                query.account,
                query.limit
            ],
            letter_from_row,
        )
        .storage()?;
    rows.collect::<rusqlite::Result<Vec<_>>>().storage()
}

/// [`DeadLetterQuery`] owned, for the blocking thread.
pub(crate) struct Query {
    destination: Option<String>,
    account: Option<String>,
    after_id: i64,
    limit: i64,
}

impl Query {
    pub(crate) fn of(query: &DeadLetterQuery<'_>) -> Self {
        Self {
            destination: query.destination.map(str::to_owned),
            account: query.account.map(|a| a.as_str().to_owned()),
            // Ids are at most i64::MAX: anything above reads nothing.
            after_id: i64::try_from(query.after_id).unwrap_or(i64::MAX),
            limit: i64::try_from(query.limit).unwrap_or(i64::MAX),
        }
    }
}

pub(crate) fn read_set_aside(
    conn: &mut Connection,
    destination: &str,
    account: &str,
    after: u64,
    limit: usize,
) -> outbox_core::Result<Vec<StoredMessage>> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn
        .prepare_cached(
            "SELECT position, instruction_id, account, sequence, kind, ledger, ledger_tx_id,
                    traceparent, tracestate, payload, received_at
             FROM fanout_messages
             WHERE position IN (SELECT position FROM fanout_dead_letters
                                WHERE destination = ?1 AND account = ?2 AND position > ?3)
             ORDER BY position LIMIT ?4",
        )
        .storage()?;
    let rows = stmt
        .query_map(
            params![destination, account, after, limit],
            message_from_row,
        )
        .storage()?;
    rows.collect::<rusqlite::Result<Vec<_>>>().storage()
}

/// The request and the refusal it covers, in one transaction.
pub(crate) fn request_replay(
    conn: &mut Connection,
    destination: &str,
    account: &Account,
) -> outbox_core::Result<ReplayRequest> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .storage()?;
    let refusal_id: Option<i64> = tx
        .prepare_cached(
            "SELECT max(id) FROM fanout_dead_letters
             WHERE destination = ?1 AND account = ?2 AND reason = 'refused'",
        )
        .storage()?
        .query_row(params![destination, account.as_str()], |row| row.get(0))
        .optional()
        .storage()?
        .flatten();
    let refusal_id = refusal_id.ok_or_else(|| not_refused(destination, account))?;
    let now = time::now_micros();
    tx.prepare_cached(
        "INSERT INTO fanout_replay_requests (destination, account, refusal_id, requested_at)
         VALUES (?1, ?2, ?3, ?4)",
    )
    .storage()?
    .execute(params![destination, account.as_str(), refusal_id, now])
    .storage()?;
    let id = tx.last_insert_rowid();
    tx.commit().storage()?;
    Ok(ReplayRequest {
        id: unsigned("fanout_replay_requests.id", id).storage()?,
        destination: destination.to_owned(),
        account: account.clone(),
        refusal_id: unsigned("fanout_replay_requests.refusal_id", refusal_id).storage()?,
        requested_at: time::from_micros(now),
    })
}

pub(crate) fn not_refused(destination: &str, account: &Account) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!(
            "account {} has no refused message at {destination}: nothing to replay",
            account.as_str()
        ),
    )
    .with("field", "account")
}

pub(crate) fn read_replay_requests(
    conn: &mut Connection,
    destination: &str,
    after: u64,
) -> outbox_core::Result<Vec<ReplayRequest>> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, destination, account, refusal_id, requested_at
             FROM fanout_replay_requests WHERE destination = ?1 AND id > ?2 ORDER BY id",
        )
        .storage()?;
    let rows = stmt
        .query_map(params![destination, after], |row| {
            let account: String = row.get(2)?;
            Ok(ReplayRequest {
                id: unsigned("fanout_replay_requests.id", row.get(0)?)?,
                destination: row.get(1)?,
                account: Account::parse(&account)
                    .map_err(|e| corrupt("fanout_replay_requests.account", e))?,
                refusal_id: unsigned("fanout_replay_requests.refusal_id", row.get(3)?)?,
                requested_at: time::from_micros(row.get(4)?),
            })
        })
        .storage()?;
    rows.collect::<rusqlite::Result<Vec<_>>>().storage()
}
