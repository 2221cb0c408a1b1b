//! Opening the pool and running the embedded migrations.

use chrono::{Days, Utc};
use outbox_core::Result;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgPool};

use crate::config::PgConfig;
use crate::error::{PgResultExt, map_error, map_migrate};
use crate::partitions;

/// Where applied migrations are recorded. Not sqlx's default `_sqlx_migrations`: the
/// application may keep its own sqlx migrations in the same schema, and two migration
/// sets in one table refuse each other ("previously applied but missing").
pub const MIGRATIONS_TABLE: &str = "outbox_schema_migrations";

/// Opens a pool whose connections use the configured schema.
///
/// Callers may use this pool for their own transactions too (`pool.begin()`), so that
/// enqueue runs in the same transaction as the payout intent and finds the outbox
/// tables on its `search_path`.
///
/// # Errors
/// `InvalidInput` for a bad URL or schema name; storage errors (transient when the
/// server cannot be reached) otherwise.
pub async fn connect(config: &PgConfig) -> Result<PgPool> {
    let options = config.connect_options()?;
    let pool = PgPoolOptions::new()
        .max_connections(config.max_connections)
        .acquire_timeout(config.acquire_timeout)
        .connect_with(options.clone())
        .await;
    match pool {
        Ok(pool) => Ok(pool),
        // The pool retried until its timeout and kept only "pool timed out": one
        // direct attempt recovers the cause (refused, unknown host, bad password).
        Err(sqlx::Error::PoolTimedOut) => Err(unreachable(&options, config).await),
        Err(other) => Err(map_error(other)),
    }
    .map_err(|e| {
        e.with(
            "server",
            format!("{}:{}", options.get_host(), options.get_port()),
        )
    })
}

/// Why the server at `options` cannot be reached, naming it.
async fn unreachable(
    options: &sqlx::postgres::PgConnectOptions,
    config: &PgConfig,
) -> outbox_core::Error {
    let server = format!("{}:{}", options.get_host(), options.get_port());
    let attempt = tokio::time::timeout(
        config.acquire_timeout,
        sqlx::PgConnection::connect_with(options),
    )
    .await;
    let (kind, cause, transient) = match attempt {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            (
                outbox_core::ErrorKind::Storage,
                "the server accepted a connection only after the pool gave up".to_owned(),
                true,
            )
        }
        Ok(Err(err)) => {
            let error = map_error(err);
            let transient = matches!(error.retry(), outbox_core::Retry::Transient { .. });
            let cause = error.message().trim_start_matches("postgres: ").to_owned();
            (error.kind().clone(), cause, transient)
        }
        Err(_) => (
            outbox_core::ErrorKind::Storage,
            format!("no answer within {:?}", config.acquire_timeout),
            true,
        ),
    };
    let error = outbox_core::Error::new(
        kind,
        format!("cannot connect to PostgreSQL at {server}: {cause}"),
    );
    // A refused connection or a timeout may pass; a wrong password does not.
    if transient {
        error.transient(None)
    } else {
        error
    }
}

/// Applies the migrations not yet applied, then makes sure the daily partitions from
/// yesterday to `partition_days_ahead` days ahead exist.
///
/// Safe to call from several processes at once: sqlx holds a database-wide advisory
/// lock while it migrates, and partition creation takes its own lock.
///
/// # Errors
/// Storage errors (a partition lock wait beyond `partition_lock_timeout` is
/// transient); a migration that changed since it was applied is refused.
pub async fn migrate(pool: &PgPool, config: &PgConfig) -> Result<()> {
    run_migrations(pool, config).await?;
    ensure_current_partitions(pool, config).await.map(drop)
}

/// Yesterday's to `partition_days_ahead` days ahead's partitions; returns those created.
pub(crate) async fn ensure_current_partitions(
    pool: &PgPool,
    config: &PgConfig,
) -> Result<Vec<String>> {
    let yesterday = Utc::now().date_naive() - Days::new(1);
    partitions::ensure_partitions(
        pool,
        yesterday,
        config.partition_days_ahead.saturating_add(2),
        config.partition_lock_timeout,
    )
    .await
}

/// The newest migration version this build applies.
pub fn current_schema_version() -> i64 {
    let migrator: Migrator = sqlx::migrate!("./migrations");
    migrator.iter().map(|m| m.version).max().unwrap_or(0)
}

/// Refuses a schema an older release left behind, for readers that never migrate:
/// its version, this build's and the command that upgrades it.
pub(crate) async fn require_current_schema(pool: &PgPool) -> Result<()> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(MIGRATIONS_TABLE)
        .fetch_one(pool)
        .await
        .map_err(map_error)?;
    let applied: i64 = if exists {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT coalesce(max(version), 0) FROM {MIGRATIONS_TABLE} WHERE success"
        )))
        .fetch_one(pool)
        .await
        .map_err(map_error)?
    } else {
        0
    };
    let current = current_schema_version();
    if applied < current {
        return Err(outbox_core::Error::new(
            outbox_core::ErrorKind::Config,
            format!(
                "the schema is at version {applied}, this build reads version {current}: run `outbox migrate --database …` first"
            ),
        ));
    }
    Ok(())
}

/// Applies the embedded migrations not yet applied.
pub(crate) async fn run_migrations(pool: &PgPool, config: &PgConfig) -> Result<()> {
    let mut migrator: Migrator = sqlx::migrate!("./migrations");
    match config.schema.as_deref() {
        Some(schema) => {
            crate::config::check_schema(schema)?;
            // Created under the migration lock, so concurrent first starts do not race
            // on CREATE SCHEMA; the table is qualified because the schema may not have
            // existed when this connection resolved its search_path.
            migrator.create_schema(schema.to_owned());
            migrator.dangerous_set_table_name(format!("{schema}.{MIGRATIONS_TABLE}"));
        }
        None => {
            migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        }
    }
    // A connection of its own, closed afterwards: sqlx takes a session-level advisory
    // lock and does not release it when a migration fails, so a pooled connection would
    // carry the lock back into the pool and block every later migration.
    let mut conn = pool.acquire().await.storage()?.detach();
    // `run_direct` is what `Migrator::run` calls after acquiring; sqlx exposes it
    // (hidden) as the way around `run`'s `Acquire` bound, which makes every caller's
    // future fail the higher-ranked `Send` check ("Acquire is not general enough").
    let migrated = migrator.run_direct(None, &mut conn, false).await;
    // Release at once, then close: the session's end would release it too, but only
    // once the server notices. Failures here say nothing about the migration.
    let _ = sqlx::query("SELECT pg_advisory_unlock_all()")
        .execute(&mut conn)
        .await;
    let _ = conn.close().await;
    migrated.map_err(map_migrate)
}
