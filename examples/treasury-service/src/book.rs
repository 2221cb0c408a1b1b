//! Booking one applied message: its journal row and its balance changes, written
//! through the inbox's transaction so they commit with the processed marker.

use outbox_core::{Handler, InboxMessage, Result};
use outbox_store_postgres::{PgInbox, map_error};
use sqlx::PgConnection;

use crate::payload::{Impact, decode};

/// The inbox engine's handler: called for the message it applies and for every held
/// message that message releases, all in one transaction. Never called for a
/// rejection notice (its sequence is consumed, no money moved).
#[derive(Debug, Default)]
pub struct Book;

impl Handler<PgInbox<'_>> for Book {
    async fn apply(&mut self, inbox: &mut PgInbox<'_>, message: &InboxMessage) -> Result<()> {
        // Decoded again here, not passed in: a released message was decoded (and found
        // good) when it arrived, before it was held.
        let impact = decode(message)?;
        write(inbox.connection(), message, &impact).await
    }
}

/// The journal row, then every balance change in one statement.
async fn write(conn: &mut PgConnection, message: &InboxMessage, impact: &Impact) -> Result<()> {
    let sequence = i64::try_from(message.sequence)
        .map_err(|_| outbox_core::Error::invalid("sequence", "beyond a BIGINT"))?;
    let ledger_tx_id = impact
        .ledger_tx_id
        .map(i64::try_from)
        .transpose()
        .map_err(|_| {
            outbox_core::Error::invalid("id", "the ledger transaction id is beyond a BIGINT")
        })?;
    sqlx::query(
        "INSERT INTO treasury_journal (instruction_id, account, sequence, kind, ledger_tx_id)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&message.instruction_id)
    .bind(message.account.as_str())
    .bind(sequence)
    .bind(message.kind.as_str())
    .bind(ledger_tx_id)
    .execute(&mut *conn)
    .await
    .map_err(map_error)?;
    if impact.available.is_empty() {
        return Ok(());
    }
    let (mut merchants, mut assets, mut changes) = (Vec::new(), Vec::new(), Vec::new());
    for ((merchant, asset), change) in &impact.available {
        merchants.push(merchant.as_str());
        assets.push(asset.as_str());
        changes.push(*change);
    }
    // One upsert, rows in (merchant, asset) order (the map's): a posting between two
    // merchants locks their rows in the same order in every transaction, so two of
    // them do not wait for each other in a cycle. (A deadlock is still possible when
    // one transaction also books released messages; it is transient, the transaction
    // rolls back and the subscriber runs it again.)
    sqlx::query(
        "INSERT INTO merchant_balances (merchant, asset, available_minor)
         SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
         ON CONFLICT (merchant, asset)
         DO UPDATE SET available_minor = merchant_balances.available_minor + excluded.available_minor",
    )
    .bind(merchants)
    .bind(assets)
    .bind(changes)
    .execute(conn)
    .await
    .map_err(map_error)?;
    Ok(())
}
