//! The checks' questions answered by a PostgreSQL outbox, inbox or fan-out schema.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use outbox_core::{
    Accepted, Account, Error, ErrorKind, EventId, InboxEngine, InboxMessage, MessageKind, NewEvent,
    OutboxEvent, Payload, Result,
};
use outbox_store_postgres::{MIGRATIONS_TABLE, PgConfig, PgInbox, PgPosition, enqueue, map_error};
use sqlx::{PgConnection, PgPool, Row};

use super::db::{
    Attempt, Changes, Db, Held, Hole, Mark, Migration, Redelivery, Rollback, check_event,
    check_message,
};

/// A PostgreSQL schema of the deployment. Opening it runs no migration.
#[derive(Debug, Clone)]
pub struct PgDb {
    pool: PgPool,
    name: String,
}

impl PgDb {
    /// # Errors
    /// When the server cannot be reached.
    pub async fn connect(config: &PgConfig) -> Result<Self> {
        let mut small = config.clone();
        small.max_connections = 2;
        let pool = outbox_store_postgres::connect(&small).await?;
        Ok(Self {
            pool,
            name: display_url(config),
        })
    }
}

/// The URL without its password.
fn display_url(config: &PgConfig) -> String {
    let mut text = match url::Url::parse(&config.url) {
        Ok(mut url) => {
            let _ = url.set_password(None);
            url.to_string()
        }
        Err(_) => "postgres://…".to_owned(),
    };
    if let Some(schema) = &config.schema {
        text.push_str(if text.contains('?') { "&" } else { "?" });
        text.push_str(&format!("schema={schema}"));
    }
    text
}

fn storage(e: sqlx::Error) -> Error {
    map_error(e)
}

async fn attempt(tx: &mut PgConnection, sql: &str, key: &str) -> Result<Attempt> {
    // A savepoint per attempt: a refusal aborts only it, not the check's transaction.
    sqlx::query("SAVEPOINT outbox_check")
        .execute(&mut *tx)
        .await
        .map_err(storage)?;
    let done = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(key)
        .execute(&mut *tx)
        .await;
    sqlx::query("ROLLBACK TO SAVEPOINT outbox_check")
        .execute(&mut *tx)
        .await
        .map_err(storage)?;
    match done {
        Ok(r) if r.rows_affected() == 0 => Err(Error::new(
            ErrorKind::Internal,
            format!("`{sql}` found no row to change"),
        )),
        Ok(_) => Ok(Attempt::Allowed),
        Err(e) => Ok(Attempt::Refused(match e.as_database_error() {
            Some(db) => format!(
                "{} ({})",
                db.message(),
                db.code().as_deref().unwrap_or("no SQLSTATE")
            ),
            None => e.to_string(),
        })),
    }
}

/// A row of `table` the check inserts, the column that finds it, and its cast.
async fn insert_own_row(
    tx: &mut PgConnection,
    table: &str,
) -> Result<(&'static str, &'static str, String)> {
    let key = EventId::new().to_string();
    let sql = match table {
        "outbox_events" => {
            let stored = enqueue(&mut *tx, &check_event()).await?;
            return Ok(("event_id", "::uuid", stored.event_id.to_string()));
        }
        "outbox_deliveries" => {
            "INSERT INTO outbox_deliveries (event_id, attempt, outcome, at) VALUES ($1::uuid, 1, 'failed', now())"
        }
        "fanout_messages" => {
            "INSERT INTO fanout_messages (dedup_key, instruction_id, account, sequence, kind, ledger, payload)
             VALUES ($1, $1, 'outbox_check', 1, 'committed', 'outbox-check', '\\x7b7d'::bytea)"
        }
        "fanout_deliveries" => "INSERT INTO fanout_deliveries (delivery_id) VALUES ($1)",
        other => {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("no check row for {other}"),
            ));
        }
    };
    sqlx::query(sql)
        .bind(&key)
        .execute(&mut *tx)
        .await
        .map_err(storage)?;
    Ok(match table {
        "outbox_deliveries" => ("event_id", "::uuid", key),
        "fanout_messages" => ("dedup_key", "", key),
        _ => ("delivery_id", "", key),
    })
}

async fn redeliver(
    tx: &mut PgConnection,
    consumer: &str,
    message: InboxMessage,
    deliver_first: bool,
) -> Result<Redelivery> {
    let engine = InboxEngine::new(consumer);
    let first = if deliver_first {
        let mut nothing = |_: &mut PgInbox<'_>, _: &InboxMessage| Ok(());
        Some(
            engine
                .accept(&mut PgInbox::new(&mut *tx), message.clone(), &mut nothing)
                .await?,
        )
    } else {
        None
    };
    let mut calls = 0u32;
    let mut impact = |_: &mut PgInbox<'_>, _: &InboxMessage| {
        calls += 1;
        Ok(())
    };
    let again: Accepted = engine
        .accept(&mut PgInbox::new(&mut *tx), message.clone(), &mut impact)
        .await?;
    Ok(Redelivery {
        consumer: consumer.to_owned(),
        instruction_id: message.instruction_id,
        first,
        again,
        impact_calls_on_redelivery: calls,
    })
}

#[async_trait]
impl Db for PgDb {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn tables(&self) -> Result<BTreeSet<String>> {
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema()",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(storage)?;
        Ok(rows.into_iter().collect())
    }

    async fn columns(&self, table: &str) -> Result<Vec<String>> {
        sqlx::query_scalar(
            "SELECT column_name::text FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        )
        .bind(table)
        .fetch_all(&self.pool)
        .await
        .map_err(storage)
    }

    async fn unique_keys(&self, table: &str) -> Result<Vec<BTreeSet<String>>> {
        let keys: Vec<Vec<String>> = sqlx::query_scalar(
            "SELECT array_agg(a.attname::text)
             FROM pg_index i
             JOIN pg_class c ON c.oid = i.indrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey)
             WHERE c.relname = $1 AND n.nspname = current_schema() AND i.indisunique
             GROUP BY i.indexrelid",
        )
        .bind(table)
        .fetch_all(&self.pool)
        .await
        .map_err(storage)?;
        Ok(keys.into_iter().map(|k| k.into_iter().collect()).collect())
    }

    async fn migration(&self) -> Result<Migration> {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(MIGRATIONS_TABLE)
            .fetch_one(&self.pool)
            .await
            .map_err(storage)?;
        let applied = if exists {
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
                "SELECT coalesce(max(version), 0) FROM {MIGRATIONS_TABLE} WHERE success"
            )))
            .fetch_one(&self.pool)
            .await
            .map_err(storage)?
        } else {
            0
        };
        Ok(Migration {
            applied,
            current: outbox_store_postgres::current_schema_version(),
        })
    }

    async fn rolled_back_enqueues(&self, first: NewEvent, second: NewEvent) -> Result<Rollback> {
        let mut sequences = Vec::new();
        for event in [&first, &second] {
            let mut tx = self.pool.begin().await.map_err(storage)?;
            sequences.push(enqueue(&mut tx, event).await?.sequence);
            tx.rollback().await.map_err(storage)?;
        }
        let rows_left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE account = $1")
                .bind(first.account.as_str())
                .fetch_one(&self.pool)
                .await
                .map_err(storage)?;
        Ok(Rollback {
            account: first.account.to_string(),
            first_sequence: sequences[0],
            second_sequence: sequences[1],
            rows_left: rows_left as u64,
        })
    }

    async fn recent_events(&self, n: usize) -> Result<Vec<OutboxEvent>> {
        let rows = sqlx::query(
            "SELECT position, event_id::text AS event_id, account, sequence, payload, created_at
             FROM outbox_events ORDER BY position DESC LIMIT $1",
        )
        .bind(n as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(storage)?;
        rows.into_iter()
            .map(|row| {
                let position: i64 = row.get("position");
                Ok(OutboxEvent {
                    position: PgPosition::Snapshot {
                        txid: 0,
                        row: position,
                    }
                    .encode(),
                    event_id: EventId::parse(row.get("event_id"))?,
                    account: Account::parse(row.get("account"))?,
                    sequence: row.get::<i64, _>("sequence") as u64,
                    payload: Payload::from_stored(row.get("payload")),
                    created_at: row.get("created_at"),
                })
            })
            .collect()
    }

    async fn sequence_holes(&self) -> Result<Vec<Hole>> {
        let rows = sqlx::query(
            "SELECT account, prev + 1 AS first, sequence - 1 AS last FROM (
                 SELECT account, sequence,
                        lag(sequence, 1, 0::bigint) OVER (PARTITION BY account ORDER BY sequence) AS prev
                 FROM outbox_events
             ) AS s WHERE sequence - prev > 1
             ORDER BY account, prev",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(storage)?;
        Ok(rows
            .into_iter()
            .map(|row| Hole {
                account: row.get("account"),
                from: row.get::<i64, _>("first") as u64,
                to: row.get::<i64, _>("last") as u64,
            })
            .collect())
    }

    async fn retention_dropped(&self) -> Result<bool> {
        // The first migration creates the partitions from the day before it ran; an
        // oldest daily partition newer than that means `outbox retention` dropped some.
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT coalesce(
                 (SELECT to_date(substr(min(c.relname), 16), 'YYYYMMDD')
                  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                  WHERE i.inhparent = 'outbox_events'::regclass
                    AND c.relname ~ '^outbox_events_p[0-9]{{8}}$')
                 > (SELECT (installed_on AT TIME ZONE 'UTC')::date - 1
                    FROM {MIGRATIONS_TABLE} WHERE version = 1),
                 false)"
        )))
        .fetch_one(&self.pool)
        .await
        .map_err(storage)
    }

    async fn max_sequences(&self) -> Result<BTreeMap<String, u64>> {
        let rows = sqlx::query(
            "SELECT account, max(sequence) AS last FROM outbox_events GROUP BY account",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(storage)?;
        Ok(rows
            .into_iter()
            .map(|row| (row.get("account"), row.get::<i64, _>("last") as u64))
            .collect())
    }

    async fn try_changes(&self, table: &'static str) -> Result<Changes> {
        let mut tx = self.pool.begin().await.map_err(storage)?;
        let (column, cast, key) = insert_own_row(&mut tx, table).await?;
        let update = attempt(
            &mut tx,
            &format!("UPDATE {table} SET {column} = {column} WHERE {column} = $1{cast}"),
            &key,
        )
        .await?;
        let delete = attempt(
            &mut tx,
            &format!("DELETE FROM {table} WHERE {column} = $1{cast}"),
            &key,
        )
        .await?;
        tx.rollback().await.map_err(storage)?;
        Ok(Changes {
            table,
            update,
            delete,
        })
    }

    async fn redeliveries(&self) -> Result<Vec<Redelivery>> {
        let mut tx = self.pool.begin().await.map_err(storage)?;
        let mut consumers: Vec<String> = sqlx::query_scalar(
            "SELECT consumer FROM inbox_accounts UNION SELECT consumer FROM inbox_messages",
        )
        .fetch_all(&mut *tx)
        .await
        .map_err(storage)?;
        if consumers.is_empty() {
            consumers.push("outbox-check".into());
        }
        let mut out = Vec::new();
        for consumer in consumers {
            let latest = sqlx::query(
                "SELECT instruction_id, account, sequence, kind FROM inbox_messages
                 WHERE consumer = $1 ORDER BY applied_at DESC LIMIT 1",
            )
            .bind(&consumer)
            .fetch_optional(&mut *tx)
            .await
            .map_err(storage)?;
            if let Some(row) = latest {
                let message = InboxMessage {
                    instruction_id: row.get("instruction_id"),
                    account: Account::parse(row.get("account"))?,
                    sequence: row.get::<i64, _>("sequence") as u64,
                    kind: MessageKind::parse(row.get("kind")).unwrap_or(MessageKind::Committed),
                    payload: b"{}".to_vec(),
                };
                out.push(redeliver(&mut tx, &consumer, message, false).await?);
            }
            out.push(redeliver(&mut tx, &consumer, check_message(), true).await?);
        }
        tx.rollback().await.map_err(storage)?;
        Ok(out)
    }

    async fn high_water_marks(&self) -> Result<Vec<Mark>> {
        let rows = sqlx::query(
            "SELECT consumer, account, last_applied FROM inbox_accounts ORDER BY consumer, account",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(storage)?;
        Ok(rows
            .into_iter()
            .map(|row| Mark {
                consumer: row.get("consumer"),
                account: row.get("account"),
                last_applied: row.get::<i64, _>("last_applied") as u64,
            })
            .collect())
    }

    async fn retention_policy(
        &self,
    ) -> Result<Option<outbox_core::retention::StoredRetentionPolicy>> {
        outbox_store_postgres::load_retention_policy(&self.pool).await
    }

    async fn held_gaps(&self) -> Result<Vec<Held>> {
        let rows = sqlx::query(
            "SELECT h.consumer, h.account, coalesce(max(a.last_applied), 0) AS last_applied,
                    min(h.sequence) AS lowest, min(h.held_at) AS held_at
             FROM inbox_held h
             LEFT JOIN inbox_accounts a ON a.consumer = h.consumer AND a.account = h.account
             GROUP BY h.consumer, h.account ORDER BY h.consumer, h.account",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(storage)?;
        Ok(rows
            .into_iter()
            .map(|row| Held {
                consumer: row.get("consumer"),
                account: row.get("account"),
                last_applied: row.get::<i64, _>("last_applied") as u64,
                lowest_held: row.get::<i64, _>("lowest") as u64,
                held_at: row.get::<DateTime<Utc>, _>("held_at"),
            })
            .collect())
    }
}
