//! Fan-out appends: one webhook delivery's messages written with its delivery id,
//! through the store's [`GroupCommit`], so the webhooks that arrive while one commit
//! is being made durable share the next one
//! (docs/ARCHITECTURE.md#group-commit-on-sqlite). Positions are still drawn under the
//! write lock in commit order.

use std::sync::Arc;

use outbox_core::{AppendOutcome, FanoutMessage};
use rusqlite::{Connection, params};

use crate::error::SqliteResultExt;
use crate::fanout::to_i64;
use crate::group_commit::GroupCommit;
use crate::shared::SharedConnection;

/// One message as its row will hold it, checked before any transaction starts.
struct NewRow {
    dedup_key: String,
    instruction_id: String,
    account: String,
    sequence: i64,
    kind: &'static str,
    ledger: String,
    ledger_tx_id: Option<i64>,
    traceparent: Option<String>,
    tracestate: Option<String>,
    payload: Vec<u8>,
}

impl NewRow {
    fn from_message(m: &FanoutMessage) -> outbox_core::Result<Self> {
        Ok(Self {
            dedup_key: m.dedup_key(),
            instruction_id: m.instruction_id.clone(),
            account: m.account.as_str().to_owned(),
            sequence: to_i64("sequence", m.sequence)?,
            kind: m.kind.as_str(),
            ledger: m.ledger.clone(),
            ledger_tx_id: m
                .ledger_tx_id
                .map(|tx| to_i64("ledger_tx_id", tx))
                .transpose()?,
            traceparent: m.traceparent.clone(),
            tracestate: m.tracestate.clone(),
            payload: m.payload.clone(),
        })
    }
}

/// One delivery waiting to be written.
struct Request {
    delivery_id: String,
    rows: Vec<NewRow>,
}

/// The store's appends, committed in groups on its connection; shared by its clones.
#[derive(Clone)]
pub(crate) struct AppendQueue(Arc<GroupCommit<Request, AppendOutcome>>);

impl AppendQueue {
    pub(crate) fn new(shared: &SharedConnection) -> Self {
        Self(GroupCommit::new(shared.connection(), Box::new(write_one)))
    }

    /// Appends one delivery's messages and answers once they are durable (or not
    /// written at all); appends waiting together share one commit.
    ///
    /// Cancel safety: the append commits or rolls back even when the caller's future
    /// is dropped. The caller then learns nothing, and a retried delivery is
    /// recognised by its id either way.
    pub(crate) async fn append(
        &self,
        delivery_id: &str,
        messages: &[FanoutMessage],
    ) -> outbox_core::Result<AppendOutcome> {
        let rows = messages
            .iter()
            .map(NewRow::from_message)
            .collect::<outbox_core::Result<Vec<_>>>()
            .map_err(|e| e.with("delivery_id", delivery_id))?;
        let request = Request {
            delivery_id: delivery_id.to_owned(),
            rows,
        };
        self.0
            .submit(request)
            .await
            .map_err(|e| e.with("delivery_id", delivery_id))
    }
}

fn write_one(tx: &Connection, request: &Request, now: i64) -> outbox_core::Result<AppendOutcome> {
    let first_time = tx
        .prepare_cached(
            "INSERT INTO fanout_deliveries (delivery_id, received_at) VALUES (?1, ?2)
             ON CONFLICT (delivery_id) DO NOTHING",
        )
        .storage()?
        .execute(params![request.delivery_id, now])
        .storage()?
        == 1;
    if !first_time {
        return Ok(AppendOutcome {
            delivery_seen: true,
            ..AppendOutcome::default()
        });
    }
    let mut outcome = AppendOutcome::default();
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO fanout_messages (dedup_key, instruction_id, account, sequence, kind,
                 ledger, ledger_tx_id, traceparent, tracestate, payload, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT (dedup_key) DO NOTHING",
        )
        .storage()?;
    for row in &request.rows {
        // A duplicate within this append (or this group) conflicts with the row
        // written a moment ago, so the first occurrence is the one kept.
        let inserted = insert
            .execute(params![
                row.dedup_key,
                row.instruction_id,
                row.account,
                row.sequence,
                row.kind,
                row.ledger,
                row.ledger_tx_id,
                row.traceparent,
                row.tracestate,
                row.payload,
                now
            ])
            .map_err(|e| crate::error::map(e).with("dedup_key", &row.dedup_key))?;
        if inserted == 1 {
            outcome.stored += 1;
        } else {
            outcome.duplicates += 1;
        }
    }
    Ok(outcome)
}
