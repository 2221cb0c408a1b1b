//! The checks' questions answered by a SQLite outbox, inbox or fan-out file.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use futures_util::FutureExt;
use outbox_core::{
    Accepted, Error, ErrorKind, EventId, InboxEngine, InboxMessage, MessageKind, NewEvent,
    OutboxEvent, Payload, Result,
};
use outbox_store_sqlite::{SqliteConfig, SqliteInbox, connect, enqueue, map_error};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::db::{
    Attempt, Changes, Db, Held, Hole, Mark, Migration, Redelivery, Rollback, check_message,
};

/// A SQLite file of the deployment. Opening it runs no migration.
#[derive(Debug, Clone)]
pub struct SqliteDb {
    config: SqliteConfig,
}

impl SqliteDb {
    pub fn new(config: SqliteConfig) -> Self {
        Self { config }
    }

    /// Runs `f` on a connection of its own, on the blocking pool.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let config = self.config.clone();
        if !config.path.exists() {
            return Err(Error::invalid(
                "database",
                format!("{} does not exist", config.path.display()),
            ));
        }
        tokio::task::spawn_blocking(move || f(&mut connect(&config)?))
            .await
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?
    }
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// The SQLite inbox's futures never wait, so they finish on their first poll.
fn ready<F: std::future::Future>(future: F) -> F::Output {
    future
        .now_or_never()
        .expect("SQLite inbox futures complete on their first poll")
}

fn attempt(conn: &Connection, sql: &str, key: &str) -> Result<Attempt> {
    match conn.execute(sql, [key]) {
        Ok(0) => Err(Error::new(
            ErrorKind::Internal,
            format!("`{sql}` found no row to change"),
        )),
        Ok(_) => Ok(Attempt::Allowed),
        Err(e) => Ok(Attempt::Refused(e.to_string())),
    }
}

/// A row of `table` the check inserts, and the column that finds it again.
fn insert_own_row(conn: &Connection, table: &str) -> Result<(&'static str, String)> {
    let key = format!("outbox-check-{}", EventId::new());
    let now = now_micros();
    match table {
        "outbox_events" => {
            let stored = enqueue(conn, &super::db::check_event())?;
            return Ok(("event_id", stored.event_id.to_string()));
        }
        "outbox_deliveries" => conn.execute(
            "INSERT INTO outbox_deliveries (event_id, attempt, outcome, at) VALUES (?1, 1, 'failed', ?2)",
            params![key, now],
        ),
        "fanout_messages" => conn.execute(
            "INSERT INTO fanout_messages (dedup_key, instruction_id, account, sequence, kind, ledger, payload, received_at)
             VALUES (?1, ?1, 'outbox_check', 1, 'committed', 'outbox-check', x'7b7d', ?2)",
            params![key, now],
        ),
        "fanout_deliveries" => conn.execute(
            "INSERT INTO fanout_deliveries (delivery_id, received_at) VALUES (?1, ?2)",
            params![key, now],
        ),
        other => {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("no check row for {other}"),
            ));
        }
    }
    .map_err(map_error)?;
    let column = match table {
        "outbox_deliveries" => "event_id",
        "fanout_messages" => "dedup_key",
        _ => "delivery_id",
    };
    Ok((column, key))
}

#[async_trait]
impl Db for SqliteDb {
    fn name(&self) -> String {
        format!("sqlite://{}", self.config.path.display())
    }

    async fn tables(&self) -> Result<BTreeSet<String>> {
        self.with(|conn| {
            let mut stmt = conn
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
                .map_err(map_error)?;
            let rows = stmt
                .query_map([], |row| row.get::<_, String>(0))
                .map_err(map_error)?;
            rows.collect::<rusqlite::Result<_>>().map_err(map_error)
        })
        .await
    }

    async fn columns(&self, table: &str) -> Result<Vec<String>> {
        let table = table.to_owned();
        self.with(move |conn| {
            let mut stmt = conn
                .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
                .map_err(map_error)?;
            let rows = stmt
                .query_map([table], |row| row.get::<_, String>(0))
                .map_err(map_error)?;
            rows.collect::<rusqlite::Result<_>>().map_err(map_error)
        })
        .await
    }

    async fn unique_keys(&self, table: &str) -> Result<Vec<BTreeSet<String>>> {
        let table = table.to_owned();
        self.with(move |conn| {
            // Every unique index, the primary key's included (origin 'pk'); a rowid
            // table's INTEGER PRIMARY KEY has none, and is the rowid itself.
            let mut stmt = conn
                .prepare("SELECT name FROM pragma_index_list(?1) WHERE \"unique\" = 1")
                .map_err(map_error)?;
            let indexes: Vec<String> = stmt
                .query_map([&table], |row| row.get(0))
                .map_err(map_error)?
                .collect::<rusqlite::Result<_>>()
                .map_err(map_error)?;
            let mut keys = Vec::new();
            for index in indexes {
                let mut stmt = conn
                    .prepare("SELECT name FROM pragma_index_info(?1)")
                    .map_err(map_error)?;
                let columns: BTreeSet<String> = stmt
                    .query_map([&index], |row| row.get(0))
                    .map_err(map_error)?
                    .collect::<rusqlite::Result<_>>()
                    .map_err(map_error)?;
                keys.push(columns);
            }
            Ok(keys)
        })
        .await
    }

    async fn migration(&self) -> Result<Migration> {
        self.with(|conn| {
            let version = |conn: &Connection| -> Result<i64> {
                conn.pragma_query_value(None, "user_version", |row| row.get(0))
                    .map_err(map_error)
            };
            Ok(Migration {
                applied: version(conn)?,
                current: outbox_store_sqlite::current_schema_version(),
            })
        })
        .await
    }

    async fn rolled_back_enqueues(&self, first: NewEvent, second: NewEvent) -> Result<Rollback> {
        self.with(move |conn| {
            let mut sequences = Vec::new();
            for event in [&first, &second] {
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(map_error)?;
                sequences.push(enqueue(&tx, event)?.sequence);
                tx.rollback().map_err(map_error)?;
            }
            let rows_left: i64 = conn
                .query_row(
                    "SELECT count(*) FROM outbox_events WHERE account = ?1",
                    [first.account.as_str()],
                    |row| row.get(0),
                )
                .map_err(map_error)?;
            Ok(Rollback {
                account: first.account.to_string(),
                first_sequence: sequences[0],
                second_sequence: sequences[1],
                rows_left: rows_left as u64,
            })
        })
        .await
    }

    async fn recent_events(&self, n: usize) -> Result<Vec<OutboxEvent>> {
        self.with(move |conn| {
            let mut stmt = conn
                .prepare(
                    "SELECT position, event_id, account, sequence, payload, created_at
                     FROM outbox_events ORDER BY position DESC LIMIT ?1",
                )
                .map_err(map_error)?;
            let rows = stmt
                .query_map([n as i64], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, i64>(3)?,
                        row.get::<_, Vec<u8>>(4)?,
                        row.get::<_, i64>(5)?,
                    ))
                })
                .map_err(map_error)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(map_error)?;
            rows.into_iter()
                .map(|(position, id, account, sequence, payload, created)| {
                    Ok(OutboxEvent {
                        position: outbox_store_sqlite::position::row_position(position),
                        event_id: EventId::parse(&id)?,
                        account: outbox_core::Account::parse(&account)?,
                        sequence: sequence as u64,
                        payload: Payload::from_stored(payload),
                        created_at: chrono::DateTime::from_timestamp_micros(created)
                            .unwrap_or_default(),
                    })
                })
                .collect()
        })
        .await
    }

    async fn sequence_holes(&self) -> Result<Vec<Hole>> {
        self.with(|conn| {
            let mut stmt = conn.prepare(HOLES_SQL).map_err(map_error)?;
            let rows = stmt
                .query_map([], |row| {
                    Ok(Hole {
                        account: row.get(0)?,
                        from: row.get::<_, i64>(1)? as u64,
                        to: row.get::<_, i64>(2)? as u64,
                    })
                })
                .map_err(map_error)?;
            rows.collect::<rusqlite::Result<_>>().map_err(map_error)
        })
        .await
    }

    async fn retention_dropped(&self) -> Result<bool> {
        // Every removal leaves its permit behind (an older schema has no permits).
        self.with(|conn| {
            let has_permits: bool = conn
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outbox_retention_permits')",
                    [],
                    |row| row.get(0),
                )
                .map_err(map_error)?;
            if !has_permits {
                return Ok(false);
            }
            conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM outbox_retention_permits WHERE family = 'outbox')",
                [],
                |row| row.get(0),
            )
            .map_err(map_error)
        })
        .await
    }

    async fn retention_policy(
        &self,
    ) -> Result<Option<outbox_core::retention::StoredRetentionPolicy>> {
        self.with(|conn| outbox_store_sqlite::load_retention_policy(conn))
            .await
    }

    async fn max_sequences(&self) -> Result<BTreeMap<String, u64>> {
        self.with(|conn| {
            let mut stmt = conn
                .prepare("SELECT account, max(sequence) FROM outbox_events GROUP BY account")
                .map_err(map_error)?;
            let rows = stmt
                .query_map([], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)? as u64))
                })
                .map_err(map_error)?;
            rows.collect::<rusqlite::Result<_>>().map_err(map_error)
        })
        .await
    }

    async fn try_changes(&self, table: &'static str) -> Result<Changes> {
        self.with(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(map_error)?;
            let (column, key) = insert_own_row(&tx, table)?;
            // A refused statement rolls back only itself; the transaction goes on.
            let update = attempt(
                &tx,
                &format!("UPDATE {table} SET {column} = {column} WHERE {column} = ?1"),
                &key,
            )?;
            let delete = attempt(
                &tx,
                &format!("DELETE FROM {table} WHERE {column} = ?1"),
                &key,
            )?;
            tx.rollback().map_err(map_error)?;
            Ok(Changes {
                table,
                update,
                delete,
            })
        })
        .await
    }

    async fn redeliveries(&self) -> Result<Vec<Redelivery>> {
        self.with(|conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(map_error)?;
            let mut consumers: Vec<String> = tx
                .prepare(
                    "SELECT consumer FROM inbox_accounts UNION SELECT consumer FROM inbox_messages",
                )
                .map_err(map_error)?
                .query_map([], |row| row.get(0))
                .map_err(map_error)?
                .collect::<rusqlite::Result<_>>()
                .map_err(map_error)?;
            if consumers.is_empty() {
                consumers.push("outbox-check".into());
            }
            let mut out = Vec::new();
            for consumer in consumers {
                let latest: Option<(String, String, i64, String)> = tx
                    .query_row(
                        "SELECT instruction_id, account, sequence, kind FROM inbox_messages
                         WHERE consumer = ?1 ORDER BY applied_at DESC LIMIT 1",
                        [&consumer],
                        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
                    )
                    .optional()
                    .map_err(map_error)?;
                if let Some((instruction_id, account, sequence, kind)) = latest {
                    let message = InboxMessage {
                        instruction_id,
                        account: outbox_core::Account::parse(&account)?,
                        sequence: sequence as u64,
                        kind: MessageKind::parse(&kind).unwrap_or(MessageKind::Committed),
                        payload: b"{}".to_vec(),
                    };
                    out.push(redeliver(&tx, &consumer, message, false)?);
                }
                out.push(redeliver(&tx, &consumer, check_message(), true)?);
            }
            tx.rollback().map_err(map_error)?;
            Ok(out)
        })
        .await
    }

    async fn high_water_marks(&self) -> Result<Vec<Mark>> {
        self.with(|conn| {
            let mut stmt = conn
                .prepare("SELECT consumer, account, last_applied FROM inbox_accounts ORDER BY consumer, account")
                .map_err(map_error)?;
            let rows = stmt
                .query_map([], |row| {
                    Ok(Mark {
                        consumer: row.get(0)?,
                        account: row.get(1)?,
                        last_applied: row.get::<_, i64>(2)? as u64,
                    })
                })
                .map_err(map_error)?;
            rows.collect::<rusqlite::Result<_>>().map_err(map_error)
        })
        .await
    }

    async fn held_gaps(&self) -> Result<Vec<Held>> {
        self.with(|conn| {
            let mut stmt = conn
                .prepare(
                    "SELECT h.consumer, h.account, coalesce(a.last_applied, 0), min(h.sequence), min(h.held_at)
                     FROM inbox_held h
                     LEFT JOIN inbox_accounts a ON a.consumer = h.consumer AND a.account = h.account
                     GROUP BY h.consumer, h.account ORDER BY h.consumer, h.account",
                )
                .map_err(map_error)?;
            let rows = stmt
                .query_map([], |row| {
                    Ok(Held {
                        consumer: row.get(0)?,
                        account: row.get(1)?,
                        last_applied: row.get::<_, i64>(2)? as u64,
                        lowest_held: row.get::<_, i64>(3)? as u64,
                        held_at: chrono::DateTime::from_timestamp_micros(row.get(4)?)
                            .unwrap_or_default(),
                    })
                })
                .map_err(map_error)?;
            rows.collect::<rusqlite::Result<_>>().map_err(map_error)
        })
        .await
    }
}

/// Missing numbers per account as ranges, the ones below the lowest stored included
/// (the previous number of an account's first row counts as 0).
const HOLES_SQL: &str = "
    SELECT account, prev + 1, sequence - 1 FROM (
        SELECT account, sequence,
               lag(sequence, 1, 0) OVER (PARTITION BY account ORDER BY sequence) AS prev
        FROM outbox_events
    ) WHERE sequence - prev > 1
    ORDER BY account, prev";

/// Delivers `message` through the consumer's inbox (twice for the check's own
/// message: once to apply it, once as the redelivery), counting the impact calls.
fn redeliver(
    tx: &Connection,
    consumer: &str,
    message: InboxMessage,
    deliver_first: bool,
) -> Result<Redelivery> {
    let engine = InboxEngine::new(consumer);
    let mut inbox = SqliteInbox::new(tx);
    let mut calls = 0u32;
    let first = if deliver_first {
        let mut count = |_: &mut SqliteInbox<'_>, _: &InboxMessage| Ok(());
        Some(ready(engine.accept(
            &mut inbox,
            message.clone(),
            &mut count,
        ))?)
    } else {
        None
    };
    let mut impact = |_: &mut SqliteInbox<'_>, _: &InboxMessage| {
        calls += 1;
        Ok(())
    };
    let again: Accepted = ready(engine.accept(&mut inbox, message.clone(), &mut impact))?;
    Ok(Redelivery {
        consumer: consumer.to_owned(),
        instruction_id: message.instruction_id,
        first,
        again,
        impact_calls_on_redelivery: calls,
    })
}
