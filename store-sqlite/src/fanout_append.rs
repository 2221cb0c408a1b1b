//! Fan-out appends with group commit: the webhooks that arrive while one commit is
//! being made durable are written together, in one `IMMEDIATE` transaction with a
//! savepoint each, and made durable by the next single commit.
//!
//! Why: with `synchronous=FULL` every commit waits for the disk, so one transaction
//! per webhook caps the receiver at the disk's flush rate (about 2,400 commits/s
//! measured on the 2-core development machine), whatever the ledger offers. Grouping
//! keeps every guarantee of a lone append — a webhook is answered only after its own
//! rows are durable, an append that fails leaves nothing behind (its savepoint is
//! rolled back) and does not fail the others, positions are still drawn under the
//! write lock in commit order — and pays one flush per group. Nobody waits for a
//! group to fill: an append arriving at an idle store is written at once
//! (docs/ARCHITECTURE.md#webhook-intake-on-sqlite-group-commit).

use std::sync::{Arc, Mutex};

use outbox_core::{AppendOutcome, Error, ErrorKind, FanoutMessage};
use rusqlite::{Connection, Transaction, TransactionBehavior, params};
use tokio::sync::oneshot;

use crate::error::SqliteResultExt;
use crate::fanout::to_i64;
use crate::shared::SharedConnection;
use crate::time;

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

/// One delivery waiting to be written, and where its outcome goes.
struct Request {
    delivery_id: String,
    rows: Vec<NewRow>,
    reply: oneshot::Sender<outbox_core::Result<AppendOutcome>>,
}

/// The appends waiting for the connection; shared by a store's clones.
#[derive(Default)]
pub(crate) struct AppendQueue {
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    requests: Vec<Request>,
    /// Whether a writer is running; it stops only once it finds nothing waiting.
    writer_running: bool,
}

impl AppendQueue {
    /// Appends one delivery's messages and answers once they are durable (or not
    /// written at all).
    ///
    /// One writer at a time takes everything waiting, writes it as one group, and
    /// goes on while requests keep arriving: the appends that arrive during one
    /// commit's flush make the next group.
    ///
    /// Cancel safety: the request is queued, and the writer started, before the
    /// first await; the append commits or rolls back even when the caller's future is
    /// dropped. The caller then learns nothing, and a retried delivery is recognised
    /// by its id either way.
    pub(crate) async fn append(
        self: &Arc<Self>,
        shared: &SharedConnection,
        delivery_id: &str,
        messages: &[FanoutMessage],
    ) -> outbox_core::Result<AppendOutcome> {
        let rows = messages
            .iter()
            .map(NewRow::from_message)
            .collect::<outbox_core::Result<Vec<_>>>()
            .map_err(|e| e.with("delivery_id", delivery_id))?;
        let (reply, outcome) = oneshot::channel();
        let start_writer = {
            let mut waiting = self.lock();
            waiting.requests.push(Request {
                delivery_id: delivery_id.to_owned(),
                rows,
                reply,
            });
            !std::mem::replace(&mut waiting.writer_running, true)
        };
        if start_writer {
            Arc::clone(self).write_next_group(shared.clone());
        }
        outcome.await.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Internal,
                "the fan-out append was dropped before its outcome was known",
            )
            .with("delivery_id", delivery_id))
        })
    }

    /// Writes one group on a blocking thread, then hands on to the next group (a
    /// new wait for the connection, so the fan-out loop's reads and cursor saves
    /// interleave) or, with nothing waiting, stops. A lone append costs what one
    /// transaction of its own costs: no task sits between the caller and the thread.
    fn write_next_group(self: Arc<Self>, shared: SharedConnection) {
        let next = shared.clone();
        shared.spawn(move |conn| {
            // Hands on even when writing panics (that group's callers see their
            // replies dropped): a writer flag left set would stall every append.
            let _hand_on = HandOn {
                queue: Arc::clone(&self),
                shared: next,
            };
            self.write_waiting(conn);
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes every waiting request in one transaction and answers each. The group
    /// is taken once the write lock is held, so appends that arrive while it is
    /// awaited (behind another process's writer, or this store's last commit) join it.
    fn write_waiting(&self, conn: &mut Connection) {
        if self.lock().requests.is_empty() {
            return;
        }
        // IMMEDIATE: the write lock is taken (or BUSY, transient) before anything is
        // read, and every position of the group is drawn under it.
        let mut tx = match conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .storage()
        {
            Ok(tx) => tx,
            Err(e) => return Self::answer_all(self.take(), &e),
        };
        let group = self.take();
        let outcomes = if let [lone] = group.as_slice() {
            // A group of one needs no savepoint: on failure the transaction itself
            // is rolled back (dropped).
            match write_one(&tx, lone, time::now_micros()) {
                Ok(outcome) => tx.commit().storage().map(|()| vec![Ok(outcome)]),
                Err(e) => Ok(vec![Err(e)]),
            }
        } else {
            write_group(&mut tx, &group).and_then(|outcomes| {
                tx.commit().storage()?;
                Ok(outcomes)
            })
        };
        match outcomes {
            Ok(outcomes) => {
                for (request, outcome) in group.into_iter().zip(outcomes) {
                    let outcome = outcome.map_err(|e| e.with("delivery_id", &request.delivery_id));
                    // A caller that went away needs no answer.
                    let _ = request.reply.send(outcome);
                }
            }
            // Nothing of the group was committed: every delivery is retried.
            Err(e) => Self::answer_all(group, &e),
        }
    }

    fn take(&self) -> Vec<Request> {
        std::mem::take(&mut self.lock().requests)
    }

    fn answer_all(group: Vec<Request>, error: &Error) {
        for request in group {
            let _ = request
                .reply
                .send(Err(error.clone().with("delivery_id", &request.delivery_id)));
        }
    }
}

/// Started when a group is done: the next group, or the writer's end.
struct HandOn {
    queue: Arc<AppendQueue>,
    shared: SharedConnection,
}

impl Drop for HandOn {
    fn drop(&mut self) {
        let more = {
            let mut waiting = self.queue.lock();
            waiting.writer_running = !waiting.requests.is_empty();
            waiting.writer_running
        };
        if more {
            Arc::clone(&self.queue).write_next_group(self.shared.clone());
        }
    }
}

/// The group, one savepoint per request: a request that fails leaves nothing
/// behind and the others go on; the outer error is one that loses the whole group.
fn write_group(
    tx: &mut Transaction<'_>,
    group: &[Request],
) -> outbox_core::Result<Vec<outbox_core::Result<AppendOutcome>>> {
    let now = time::now_micros();
    let mut outcomes = Vec::with_capacity(group.len());
    for request in group {
        let savepoint = tx.savepoint().storage()?;
        match write_one(&savepoint, request, now) {
            // Nothing to keep for a delivery seen before, but nothing to undo either.
            Ok(outcome) => {
                savepoint.commit().storage()?;
                outcomes.push(Ok(outcome));
            }
            // Dropping the savepoint rolls back this request's rows only.
            Err(e) => outcomes.push(Err(e)),
        }
    }
    Ok(outcomes)
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
