//! `PgInbox`: inbox storage bound to the consumer's open PostgreSQL transaction.

use chrono::Utc;
use outbox_core::{
    Account, Claim, Error, ErrorKind, HeldGap, HoldResult, Inbox, InboxMessage, MessageKind,
    NewException,
};
use sqlx::{PgConnection, Row};

use crate::error::PgResultExt;
use crate::exceptions::insert_exception;

/// The inbox tables seen through the consumer's transaction.
///
/// Build it on the transaction that writes the impact (`PgInbox::new(&mut *tx)`); the
/// handler reaches that transaction through [`PgInbox::connection`]. Every future is
/// `Send`, so accepting can run on a multi-threaded runtime or in `tokio::spawn`.
///
/// # Concurrency
/// Several workers may accept messages of one consumer at once, each in its own
/// transaction:
/// - [`Inbox::processed_kind`] (and [`Inbox::claim_next`]) first take a
///   transaction-scoped advisory lock on (consumer, instruction id), so a redelivery
///   racing the first delivery waits for it and is then reported as a duplicate.
/// - [`Inbox::claim_next`] looks for the instruction again once it holds the
///   account's lock: a redelivery racing the release of its own held original (a
///   release takes no advisory lock) is then a duplicate too, not a stale sequence.
/// - [`Inbox::last_applied`] locks the (consumer, account) high-water-mark row (creating
///   it at 0), so one account's messages are decided one transaction at a time: two
///   messages can never both be applied at one sequence, and a message held while its
///   predecessor is being applied is released by the next one that finds it.
///
/// Both locks end with the consumer's transaction.
#[derive(Debug)]
pub struct PgInbox<'c> {
    conn: &'c mut PgConnection,
}

impl<'c> PgInbox<'c> {
    pub fn new(conn: &'c mut PgConnection) -> Self {
        Self { conn }
    }

    /// The consumer's transaction, for writing the impact.
    pub fn connection(&mut self) -> &mut PgConnection {
        self.conn
    }
}

fn corrupt(column: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, format!("{column}: {e}"))
}

/// A stored message kind, or the column named as corrupt.
fn parse_kind(column: &str, kind: &str) -> outbox_core::Result<MessageKind> {
    MessageKind::parse(kind).ok_or_else(|| corrupt(column, kind))
}

fn sequence_param(sequence: u64) -> outbox_core::Result<i64> {
    i64::try_from(sequence)
        .map_err(|_| Error::invalid("sequence", format!("{sequence} does not fit a bigint")))
}

impl Inbox for PgInbox<'_> {
    async fn processed_kind(
        &mut self,
        consumer: &str,
        instruction_id: &str,
    ) -> outbox_core::Result<Option<MessageKind>> {
        let kind: Option<String> = sqlx::query_scalar("SELECT outbox_inbox_claim_kind($1, $2)")
            .bind(consumer)
            .bind(instruction_id)
            .fetch_one(&mut *self.conn)
            .await
            .storage()?;
        kind.map(|kind| parse_kind("inbox_messages.kind", &kind))
            .transpose()
    }

    async fn last_applied(
        &mut self,
        consumer: &str,
        account: &Account,
    ) -> outbox_core::Result<u64> {
        // ON CONFLICT DO UPDATE locks the row and reads its latest committed version,
        // even one committed after this transaction's snapshot (READ COMMITTED).
        let last: i64 = sqlx::query_scalar(
            "INSERT INTO inbox_accounts AS a (consumer, account, last_applied) VALUES ($1, $2, 0)
             ON CONFLICT (consumer, account) DO UPDATE SET last_applied = a.last_applied
             RETURNING last_applied",
        )
        .bind(consumer)
        .bind(account.as_str())
        .fetch_one(&mut *self.conn)
        .await
        .storage()?;
        u64::try_from(last).map_err(|_| corrupt("inbox_accounts.last_applied", last))
    }

    async fn mark_applied(
        &mut self,
        consumer: &str,
        message: &InboxMessage,
    ) -> outbox_core::Result<()> {
        let sequence = sequence_param(message.sequence)?;
        sqlx::query(
            "WITH marker AS (
                 INSERT INTO inbox_messages (consumer, instruction_id, account, sequence, kind)
                 VALUES ($1, $2, $3, $4, $5)
             )
             INSERT INTO inbox_accounts (consumer, account, last_applied) VALUES ($1, $3, $4)
             ON CONFLICT (consumer, account) DO UPDATE SET last_applied = excluded.last_applied",
        )
        .bind(consumer)
        .bind(&message.instruction_id)
        .bind(message.account.as_str())
        .bind(sequence)
        .bind(message.kind.as_str())
        .execute(&mut *self.conn)
        .await
        .storage()
        .map(drop)
    }

    async fn hold(
        &mut self,
        consumer: &str,
        message: &InboxMessage,
    ) -> outbox_core::Result<HoldResult> {
        // held_at comes from this process's clock because the engine measures a gap's
        // age against the same clock.
        let sequence = sequence_param(message.sequence)?;
        let row = sqlx::query(
            "WITH inserted AS (
                 INSERT INTO inbox_held (consumer, account, sequence, instruction_id, kind, payload, held_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT DO NOTHING
                 RETURNING instruction_id
             )
             SELECT true AS held, instruction_id, $5 AS kind FROM inserted
             UNION ALL
             SELECT false, instruction_id, kind FROM inbox_held
             WHERE consumer = $1 AND account = $2 AND sequence = $3
               AND NOT EXISTS (SELECT 1 FROM inserted)",
        )
        .bind(consumer)
        .bind(message.account.as_str())
        .bind(sequence)
        .bind(&message.instruction_id)
        .bind(message.kind.as_str())
        .bind(&message.payload)
        .bind(Utc::now())
        .fetch_optional(&mut *self.conn)
        .await
        .storage()?;
        if let Some(row) = row {
            return Ok(if row.get::<bool, _>("held") {
                HoldResult::Held
            } else {
                HoldResult::Occupied {
                    instruction_id: row.get("instruction_id"),
                    kind: parse_kind("inbox_held.kind", row.get("kind"))?,
                }
            });
        }
        // The slot's holder committed after this statement's snapshot was taken (the
        // insert waited for it): a new statement sees it.
        let (instruction_id, kind): (String, String) = sqlx::query_as(
            "SELECT instruction_id, kind FROM inbox_held WHERE consumer = $1 AND account = $2 AND sequence = $3",
        )
        .bind(consumer)
        .bind(message.account.as_str())
        .bind(sequence)
        .fetch_one(&mut *self.conn)
        .await
        .storage()?;
        Ok(HoldResult::Occupied {
            instruction_id,
            kind: parse_kind("inbox_held.kind", &kind)?,
        })
    }

    async fn take_held(
        &mut self,
        consumer: &str,
        account: &Account,
        sequence: u64,
    ) -> outbox_core::Result<Option<InboxMessage>> {
        let row = sqlx::query(
            "DELETE FROM inbox_held WHERE consumer = $1 AND account = $2 AND sequence = $3
             RETURNING instruction_id, kind, payload",
        )
        .bind(consumer)
        .bind(account.as_str())
        .bind(sequence_param(sequence)?)
        .fetch_optional(&mut *self.conn)
        .await
        .storage()?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(InboxMessage {
            instruction_id: row.get("instruction_id"),
            account: account.clone(),
            sequence,
            kind: parse_kind("inbox_held.kind", row.get("kind"))?,
            payload: row.get("payload"),
        }))
    }

    async fn claim_next(
        &mut self,
        consumer: &str,
        message: &InboxMessage,
    ) -> outbox_core::Result<Claim> {
        let row = sqlx::query(
            "SELECT verdict, last, recorded_kind, held_instruction, held_kind, held_payload
             FROM outbox_inbox_claim_next($1, $2, $3, $4, $5)",
        )
        .bind(consumer)
        .bind(&message.instruction_id)
        .bind(message.account.as_str())
        .bind(sequence_param(message.sequence)?)
        .bind(message.kind.as_str())
        .fetch_one(&mut *self.conn)
        .await
        .storage()?;
        let verdict: String = row.get("verdict");
        match verdict.as_str() {
            "duplicate" => Ok(Claim::Duplicate {
                recorded: parse_kind("inbox_messages.kind", row.get("recorded_kind"))?,
            }),
            "not next" => {
                let last: i64 = row.get("last");
                let last_applied = u64::try_from(last)
                    .map_err(|_| corrupt("inbox_accounts.last_applied", last))?;
                Ok(Claim::NotNext { last_applied })
            }
            "claimed" => {
                let next_held = match row.get::<Option<String>, _>("held_instruction") {
                    None => None,
                    Some(instruction_id) => Some(InboxMessage {
                        instruction_id,
                        account: message.account.clone(),
                        sequence: message.sequence + 1,
                        kind: parse_kind("inbox_held.kind", row.get("held_kind"))?,
                        payload: row.get("held_payload"),
                    }),
                };
                Ok(Claim::Claimed { next_held })
            }
            other => Err(corrupt("outbox_inbox_claim_next.verdict", other)),
        }
    }

    async fn record_exception(&mut self, exception: &NewException) -> outbox_core::Result<bool> {
        insert_exception(&mut *self.conn, exception).await
    }

    async fn held_gaps(&mut self, consumer: &str) -> outbox_core::Result<Vec<HeldGap>> {
        let rows = sqlx::query(
            "SELECT DISTINCT ON (h.account) h.account, coalesce(a.last_applied, 0) AS last_applied,
                    h.sequence, h.held_at
             FROM inbox_held h
             LEFT JOIN inbox_accounts a ON a.consumer = h.consumer AND a.account = h.account
             WHERE h.consumer = $1
             ORDER BY h.account, h.sequence",
        )
        .bind(consumer)
        .fetch_all(&mut *self.conn)
        .await
        .storage()?;
        rows.iter()
            .map(|row| {
                let account: String = row.get("account");
                let last_applied: i64 = row.get("last_applied");
                let lowest: i64 = row.get("sequence");
                Ok(HeldGap {
                    account: Account::parse(&account)
                        .map_err(|e| corrupt("inbox_held.account", e))?,
                    last_applied: u64::try_from(last_applied)
                        .map_err(|_| corrupt("inbox_accounts.last_applied", last_applied))?,
                    lowest_held: u64::try_from(lowest)
                        .map_err(|_| corrupt("inbox_held.sequence", lowest))?,
                    held_at: row.get("held_at"),
                })
            })
            .collect()
    }
}
