//! The SQLite journal: ledgers, the append-only log, and webhook deliveries with
//! their outcomes. Every table is insert-only (triggers refuse UPDATE and DELETE);
//! a delivery is pending while it has no outcome row.
//!
//! A write and the deliveries of its event are inserted in one SQLite transaction,
//! so a crash after the commit still re-delivers the event at the next start
//! (at-least-once). In-memory mode uses the same code on `:memory:`.

use std::path::Path;

use chrono::{DateTime, Utc};
use outbox_core::{Error, ErrorKind, Result};
use rusqlite::{Connection, params};

use crate::clock;
use crate::log::Log;
use crate::state::LedgerInfo;

/// Bumped when the schema changes incompatibly; a newer file is refused.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS ledgers (
    name       TEXT PRIMARY KEY,
    payload    TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS logs (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    ledger           TEXT NOT NULL REFERENCES ledgers(name),
    log_id           INTEGER NOT NULL,
    type             TEXT NOT NULL,
    idempotency_key  TEXT,
    idempotency_hash TEXT,
    payload          TEXT NOT NULL,
    at               TEXT NOT NULL,
    UNIQUE (ledger, log_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS logs_idempotency_key
    ON logs (ledger, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    url        TEXT NOT NULL,
    event_type TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS webhook_outcomes (
    delivery_id TEXT PRIMARY KEY REFERENCES webhook_deliveries(id),
    outcome     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    detail      TEXT,
    at          TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS ledgers_append_only_u BEFORE UPDATE ON ledgers
    BEGIN SELECT RAISE(ABORT, 'ledgers is append-only'); END;
CREATE TRIGGER IF NOT EXISTS ledgers_append_only_d BEFORE DELETE ON ledgers
    BEGIN SELECT RAISE(ABORT, 'ledgers is append-only'); END;
CREATE TRIGGER IF NOT EXISTS logs_append_only_u BEFORE UPDATE ON logs
    BEGIN SELECT RAISE(ABORT, 'logs is append-only'); END;
CREATE TRIGGER IF NOT EXISTS logs_append_only_d BEFORE DELETE ON logs
    BEGIN SELECT RAISE(ABORT, 'logs is append-only'); END;
CREATE TRIGGER IF NOT EXISTS webhook_deliveries_append_only_u BEFORE UPDATE ON webhook_deliveries
    BEGIN SELECT RAISE(ABORT, 'webhook_deliveries is append-only'); END;
CREATE TRIGGER IF NOT EXISTS webhook_deliveries_append_only_d BEFORE DELETE ON webhook_deliveries
    BEGIN SELECT RAISE(ABORT, 'webhook_deliveries is append-only'); END;
CREATE TRIGGER IF NOT EXISTS webhook_outcomes_append_only_u BEFORE UPDATE ON webhook_outcomes
    BEGIN SELECT RAISE(ABORT, 'webhook_outcomes is append-only'); END;
CREATE TRIGGER IF NOT EXISTS webhook_outcomes_append_only_d BEFORE DELETE ON webhook_outcomes
    BEGIN SELECT RAISE(ABORT, 'webhook_outcomes is append-only'); END;
";

/// A webhook delivery: one event to one endpoint, with an id stable across retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredDelivery {
    pub(crate) id: String,
    pub(crate) url: String,
    pub(crate) event_type: String,
    pub(crate) body: String,
    pub(crate) created_at: DateTime<Utc>,
}

/// How a delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeliveryOutcome {
    Delivered,
    Failed,
}

impl DeliveryOutcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }
}

/// How one delivery ended, on its way to `webhook_outcomes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordedOutcome {
    pub(crate) delivery_id: String,
    pub(crate) outcome: DeliveryOutcome,
    pub(crate) attempts: u32,
    pub(crate) detail: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Journal {
    conn: Connection,
    location: String,
}

fn storage(location: &str, what: &str, e: &rusqlite::Error) -> Error {
    Error::new(ErrorKind::Storage, format!("{what}: {e}")).with("data", location)
}

impl Journal {
    /// Opens (creating if needed) the file at `path`, or an in-memory journal.
    pub(crate) fn open(path: Option<&Path>) -> Result<Self> {
        let location = path.map_or_else(|| ":memory:".to_owned(), |p| p.display().to_string());
        let conn = match path {
            Some(p) => Connection::open(p),
            None => Connection::open_in_memory(),
        }
        .map_err(|e| storage(&location, "cannot open the dev ledger's SQLite file", &e))?;
        // WAL + NORMAL survives a process crash (the case the relay tests exercise);
        // only an OS crash may lose the last commits.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
        )
        .map_err(|e| storage(&location, "cannot configure SQLite", &e))?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| storage(&location, "cannot read the schema version", &e))?;
        if version > SCHEMA_VERSION {
            return Err(Error::new(
                ErrorKind::Config,
                format!("the file has schema version {version}; this dev ledger understands up to {SCHEMA_VERSION}"),
            )
            .with("data", &location));
        }
        conn.execute_batch(SCHEMA)
            .and_then(|()| conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}")))
            .map_err(|e| storage(&location, "cannot create the schema", &e))?;
        Ok(Self { conn, location })
    }

    fn err(&self, what: &str, e: &rusqlite::Error) -> Error {
        storage(&self.location, what, e)
    }

    /// The ledgers, in the order they were created.
    pub(crate) fn ledgers(&self) -> Result<Vec<LedgerInfo>> {
        let read = |e: rusqlite::Error| self.err("cannot read ledgers", &e);
        let mut stmt = self
            .conn
            .prepare("SELECT payload FROM ledgers ORDER BY rowid")
            .map_err(read)?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(read)?;
        let mut ledgers = Vec::new();
        for row in rows {
            ledgers.push(decode(&self.location, "ledger", &row.map_err(read)?)?);
        }
        Ok(ledgers)
    }

    /// Hands every log to `apply` with its ledger's name, in commit order, one at a
    /// time: only the state rebuilt from them stays in memory, never the whole log
    /// as written (its transactions are several times larger than the state's).
    pub(crate) fn replay(&self, mut apply: impl FnMut(&str, Log) -> Result<()>) -> Result<()> {
        let read = |e: rusqlite::Error| self.err("cannot read logs", &e);
        let mut stmt = self
            .conn
            .prepare("SELECT ledger, payload FROM logs ORDER BY seq")
            .map_err(read)?;
        let mut rows = stmt.query([]).map_err(read)?;
        while let Some(row) = rows.next().map_err(read)? {
            let ledger: String = row.get(0).map_err(read)?;
            let payload: String = row.get(1).map_err(read)?;
            apply(&ledger, decode(&self.location, "log", &payload)?)?;
        }
        Ok(())
    }

    /// How many deliveries have no outcome yet.
    pub(crate) fn count_pending_deliveries(&self) -> Result<u64> {
        self.conn
            .query_row(
                "SELECT count(*) FROM webhook_deliveries d
                 LEFT JOIN webhook_outcomes o ON o.delivery_id = d.id
                 WHERE o.delivery_id IS NULL",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(|e| self.err("cannot count pending webhook deliveries", &e))
    }

    /// Up to `limit` deliveries without an outcome written after the one numbered
    /// `after` (0: from the first), in the order they were written, each with its
    /// number: the dispatcher's next page.
    pub(crate) fn pending_deliveries_after(
        &self,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, StoredDelivery)>> {
        let read = |e: rusqlite::Error| self.err("cannot read webhook deliveries", &e);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT d.seq, d.id, d.url, d.event_type, d.body, d.created_at FROM webhook_deliveries d
                 LEFT JOIN webhook_outcomes o ON o.delivery_id = d.id
                 WHERE d.seq > ?1 AND o.delivery_id IS NULL ORDER BY d.seq LIMIT ?2",
            )
            .map_err(read)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![after, limit], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })
            .map_err(read)?;
        let mut pending = Vec::new();
        for row in rows {
            let (seq, id, url, event_type, body, created_at) = row.map_err(read)?;
            let created_at = clock::parse(&created_at)
                .map_err(|e| Error::new(ErrorKind::Storage, e).with("data", &self.location))?;
            pending.push((
                seq,
                StoredDelivery {
                    id,
                    url,
                    event_type,
                    body,
                    created_at,
                },
            ));
        }
        Ok(pending)
    }

    pub(crate) fn insert_ledger(&mut self, info: &LedgerInfo) -> Result<()> {
        let payload = serde_json::to_string(info).expect("ledger info serialises");
        self.conn
            .execute(
                "INSERT INTO ledgers (name, payload, created_at) VALUES (?1, ?2, ?3)",
                params![info.name, payload, clock::format(&info.added_at)],
            )
            .map_err(|e| self.err("cannot store the ledger", &e))?;
        Ok(())
    }

    /// Stores log entries of `ledger` and event deliveries atomically.
    pub(crate) fn commit(
        &mut self,
        ledger: &str,
        logs: &[&Log],
        deliveries: &[StoredDelivery],
    ) -> Result<()> {
        if logs.is_empty() && deliveries.is_empty() {
            return Ok(());
        }
        let location = self.location.clone();
        let fail = |e: rusqlite::Error| storage(&location, "cannot commit to the log", &e);
        let tx = self.conn.transaction().map_err(&fail)?;
        {
            let mut insert_log = tx
                .prepare_cached(
                    "INSERT INTO logs (ledger, log_id, type, idempotency_key, idempotency_hash, payload, at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(&fail)?;
            for log in logs {
                let payload = serde_json::to_string(log).expect("logs serialise");
                insert_log
                    .execute(params![
                        ledger,
                        i64::try_from(log.id).unwrap_or(i64::MAX),
                        log.data.type_name(),
                        log.idempotency_key,
                        log.idempotency_hash,
                        payload,
                        clock::format(&log.date),
                    ])
                    .map_err(&fail)?;
            }
            let mut insert_delivery = tx
                .prepare_cached(
                    "INSERT INTO webhook_deliveries (id, url, event_type, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(&fail)?;
            for d in deliveries {
                insert_delivery
                    .execute(params![
                        d.id,
                        d.url,
                        d.event_type,
                        d.body,
                        clock::format(&d.created_at)
                    ])
                    .map_err(&fail)?;
            }
        }
        tx.commit().map_err(&fail)
    }

    /// Records how deliveries ended, in one transaction (one commit for a page of
    /// outcomes). An outcome for a delivery that already has one is ignored: the
    /// first is kept.
    pub(crate) fn record_outcomes(&mut self, outcomes: &[RecordedOutcome]) -> Result<()> {
        let location = &self.location;
        let fail = |e: &rusqlite::Error| storage(location, "cannot record a webhook outcome", e);
        let tx = self.conn.transaction().map_err(|e| fail(&e))?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO webhook_outcomes (delivery_id, outcome, attempts, detail, at)
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (delivery_id) DO NOTHING",
                )
                .map_err(|e| fail(&e))?;
            let at = clock::format(&clock::now());
            for o in outcomes {
                insert
                    .execute(params![
                        o.delivery_id,
                        o.outcome.as_str(),
                        o.attempts,
                        o.detail,
                        at
                    ])
                    .map_err(|e| fail(&e))?;
            }
        }
        tx.commit().map_err(|e| fail(&e))
    }
}

fn decode<T: serde::de::DeserializeOwned>(location: &str, what: &str, payload: &str) -> Result<T> {
    serde_json::from_str(payload).map_err(|e| {
        Error::new(
            ErrorKind::Storage,
            format!("cannot decode a stored {what}: {e}"),
        )
        .with("data", location)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_refuse_updates_and_deletes() {
        let journal = Journal::open(None).unwrap();
        let info = LedgerInfo {
            name: "l".into(),
            added_at: clock::now(),
            bucket: "_default".into(),
            metadata: Default::default(),
            features: Default::default(),
            id: 1,
        };
        let mut journal = journal;
        journal.insert_ledger(&info).unwrap();
        let err = journal.conn.execute("DELETE FROM ledgers", []).unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
        let err = journal
            .conn
            .execute("UPDATE ledgers SET name = 'x'", [])
            .unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
    }

    fn delivery(id: &str) -> StoredDelivery {
        StoredDelivery {
            id: id.into(),
            url: "http://127.0.0.1:9/h".into(),
            event_type: "ledger.committed_transactions".into(),
            body: "{}".into(),
            created_at: clock::now(),
        }
    }

    fn pending_ids(journal: &Journal) -> Vec<String> {
        journal
            .pending_deliveries_after(0, 100)
            .unwrap()
            .into_iter()
            .map(|(_, d)| d.id)
            .collect()
    }

    fn outcome(id: &str, outcome: DeliveryOutcome) -> RecordedOutcome {
        RecordedOutcome {
            delivery_id: id.into(),
            outcome,
            attempts: 1,
            detail: None,
        }
    }

    #[test]
    fn pending_deliveries_are_those_without_outcome() {
        let mut journal = Journal::open(None).unwrap();
        journal
            .commit("l", &[], &[delivery("a"), delivery("b")])
            .unwrap();
        journal
            .record_outcomes(&[outcome("a", DeliveryOutcome::Delivered)])
            .unwrap();
        journal
            .record_outcomes(&[outcome("a", DeliveryOutcome::Failed)])
            .unwrap();
        assert_eq!(pending_ids(&journal), ["b"]);
        assert_eq!(journal.count_pending_deliveries().unwrap(), 1);
    }

    #[test]
    fn outcomes_recorded_together_keep_the_first_per_delivery() {
        let mut journal = Journal::open(None).unwrap();
        let written = [delivery("a"), delivery("b"), delivery("c")];
        journal.commit("l", &[], &written).unwrap();
        journal
            .record_outcomes(&[
                outcome("a", DeliveryOutcome::Delivered),
                outcome("c", DeliveryOutcome::Failed),
                outcome("a", DeliveryOutcome::Failed),
            ])
            .unwrap();
        assert_eq!(pending_ids(&journal), ["b"]);
        let kept: String = journal
            .conn
            .query_row(
                "SELECT group_concat(delivery_id || '=' || outcome, ',') FROM
                     (SELECT delivery_id, outcome FROM webhook_outcomes ORDER BY delivery_id)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(kept, "a=delivered,c=failed");
    }

    #[test]
    fn pending_deliveries_come_in_pages_in_written_order() {
        let mut journal = Journal::open(None).unwrap();
        let written: Vec<StoredDelivery> = (0..7).map(|n| delivery(&format!("d{n}"))).collect();
        journal.commit("l", &[], &written).unwrap();
        journal
            .record_outcomes(&[outcome("d2", DeliveryOutcome::Delivered)])
            .unwrap();
        let mut seen = Vec::new();
        let mut after = 0;
        loop {
            let page = journal.pending_deliveries_after(after, 3).unwrap();
            if page.is_empty() {
                break;
            }
            assert!(page.len() <= 3, "a page longer than its limit: {page:?}");
            after = page.last().unwrap().0;
            seen.extend(page.into_iter().map(|(_, d)| d.id));
        }
        assert_eq!(seen, ["d0", "d1", "d3", "d4", "d5", "d6"]);
        assert_eq!(journal.count_pending_deliveries().unwrap(), 6);
    }
}
