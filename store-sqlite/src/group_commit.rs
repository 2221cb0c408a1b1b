//! `GroupCommit`: writes that arrive while one commit is being made durable are
//! made durable together by the next single commit, a savepoint each.
//!
//! Why: with `synchronous=FULL` every commit waits for the disk, so one transaction
//! per write caps a writer at the disk's flush rate whatever its callers offer.
//! Grouping keeps every guarantee of a lone transaction — a caller hears its outcome
//! only once its own rows are durable, a write that fails leaves nothing behind (its
//! savepoint is rolled back) and does not fail the others, everything of a group is
//! written under one write lock in arrival order — and pays one flush per group.
//! Nobody waits for a group to fill: a write arriving at an idle connection is made
//! at once (docs/ARCHITECTURE.md#group-commit-on-sqlite).
//!
//! The fan-out store's webhook intake and the reference consumer's inbox both write
//! through it; a team's own SQLite consumer can too.

use std::sync::{Arc, Mutex, MutexGuard};

use outbox_core::{Error, ErrorKind};
use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use crate::error::SqliteResultExt;
use crate::time;

/// What a [`GroupCommit`] does with one request, inside the group's transaction (or a
/// savepoint of it). `now` is the group's one timestamp in microseconds since the Unix
/// epoch, so every request of a group can record the same time.
pub type WriteFn<R, O> =
    Box<dyn Fn(&Connection, &R, i64) -> outbox_core::Result<O> + Send + Sync + 'static>;

/// A queue of writes on one connection, committed in groups.
///
/// Build it once per connection ([`GroupCommit::new`]) and share the `Arc`; every
/// [`GroupCommit::submit`] answers with its own request's outcome.
pub struct GroupCommit<R, O> {
    conn: Arc<Mutex<Connection>>,
    write: WriteFn<R, O>,
    waiting: Mutex<Waiting<R, O>>,
}

struct Waiting<R, O> {
    requests: Vec<Pending<R, O>>,
    /// Whether a writer is running; it stops only once it finds nothing waiting.
    writer_running: bool,
}

struct Pending<R, O> {
    request: R,
    reply: oneshot::Sender<outbox_core::Result<O>>,
}

impl<R: Send + 'static, O: Send + 'static> GroupCommit<R, O> {
    /// Writes through `conn` (shared with whatever else uses the connection: each
    /// group waits for its mutex like any other user) with `write`.
    pub fn new(conn: Arc<Mutex<Connection>>, write: WriteFn<R, O>) -> Arc<Self> {
        Arc::new(Self {
            conn,
            write,
            waiting: Mutex::new(Waiting {
                requests: Vec::new(),
                writer_running: false,
            }),
        })
    }

    /// Writes `request` and answers once it is durable (or not written at all).
    ///
    /// One writer at a time takes everything waiting, writes it as one `IMMEDIATE`
    /// transaction, and goes on while requests keep arriving: the requests that
    /// arrive during one commit's flush make the next group.
    ///
    /// # Errors
    /// The request's own error from the write function (nothing of it is kept), or
    /// the group's: `BEGIN` or `COMMIT` failed and nothing of the group was written
    /// (transient when SQLite was busy).
    ///
    /// Cancel safety: the request is queued, and the writer started, before the
    /// first await; it commits or rolls back even when the caller's future is
    /// dropped, and the caller then learns nothing.
    pub async fn submit(self: &Arc<Self>, request: R) -> outbox_core::Result<O> {
        let (reply, outcome) = oneshot::channel();
        let start_writer = {
            let mut waiting = self.lock();
            waiting.requests.push(Pending { request, reply });
            !std::mem::replace(&mut waiting.writer_running, true)
        };
        if start_writer {
            Arc::clone(self).write_next_group();
        }
        outcome.await.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Internal,
                "a grouped write was dropped before its outcome was known",
            ))
        })
    }

    /// Writes one group on a blocking thread, then hands on to the next group (a
    /// new wait for the connection, so its other users interleave) or, with
    /// nothing waiting, stops. A lone request costs what one transaction of its own
    /// costs: no task sits between the caller and the thread.
    fn write_next_group(self: Arc<Self>) {
        tokio::task::spawn_blocking(move || {
            // Hands on even when writing panics (that group's callers see their
            // replies dropped): a writer flag left set would stall every request.
            let hand_on = HandOn(Arc::clone(&self));
            let mut conn = self
                .conn
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            self.write_waiting(&mut conn);
            drop(conn);
            drop(hand_on);
        });
    }

    fn lock(&self) -> MutexGuard<'_, Waiting<R, O>> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn take(&self) -> Vec<Pending<R, O>> {
        std::mem::take(&mut self.lock().requests)
    }

    /// Writes every waiting request in one transaction and answers each. The group
    /// is taken once the write lock is held, so requests that arrive while it is
    /// awaited (behind another process's writer, or this connection's last commit)
    /// join it.
    fn write_waiting(&self, conn: &mut Connection) {
        if self.lock().requests.is_empty() {
            return;
        }
        // IMMEDIATE: the write lock is taken (or BUSY, transient) before anything is
        // read, so nothing of the group is decided on a snapshot another writer moves.
        let mut tx = match conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .storage()
        {
            Ok(tx) => tx,
            Err(e) => return answer_all(self.take(), &e),
        };
        let group = self.take();
        let now = time::now_micros();
        let outcomes = if let [lone] = group.as_slice() {
            // A group of one needs no savepoint: on failure the transaction itself
            // is rolled back (dropped).
            match (self.write)(&tx, &lone.request, now) {
                Ok(outcome) => tx.commit().storage().map(|()| vec![Ok(outcome)]),
                Err(e) => Ok(vec![Err(e)]),
            }
        } else {
            self.write_group(&mut tx, &group, now).and_then(|outcomes| {
                tx.commit().storage()?;
                Ok(outcomes)
            })
        };
        match outcomes {
            Ok(outcomes) => {
                for (pending, outcome) in group.into_iter().zip(outcomes) {
                    // A caller that went away needs no answer.
                    let _ = pending.reply.send(outcome);
                }
            }
            // Nothing of the group was committed: every request may be retried.
            Err(e) => answer_all(group, &e),
        }
    }

    /// The group, one savepoint per request: a request that fails leaves nothing
    /// behind and the others go on; the outer error is one that loses the whole group.
    fn write_group(
        &self,
        tx: &mut Transaction<'_>,
        group: &[Pending<R, O>],
        now: i64,
    ) -> outbox_core::Result<Vec<outbox_core::Result<O>>> {
        let mut outcomes = Vec::with_capacity(group.len());
        for pending in group {
            let savepoint = tx.savepoint().storage()?;
            match (self.write)(&savepoint, &pending.request, now) {
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
}

fn answer_all<R, O>(group: Vec<Pending<R, O>>, error: &Error) {
    for pending in group {
        let _ = pending.reply.send(Err(error.clone()));
    }
}

/// Dropped when a group is done: starts the next group, or ends the writer.
struct HandOn<R: Send + 'static, O: Send + 'static>(Arc<GroupCommit<R, O>>);

impl<R: Send + 'static, O: Send + 'static> Drop for HandOn<R, O> {
    fn drop(&mut self) {
        let more = {
            let mut waiting = self.0.lock();
            waiting.writer_running = !waiting.requests.is_empty();
            waiting.writer_running
        };
        if more {
            Arc::clone(&self.0).write_next_group();
        }
    }
}

impl<R, O> std::fmt::Debug for GroupCommit<R, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").finish_non_exhaustive()
    }
}
