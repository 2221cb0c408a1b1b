//! The server side of CDC: the `wal_level` check, the publication and the replication
//! slot — created when missing, validated when present, and checked against the saved
//! cursor so that a slot that moved past it (a re-created or advanced slot) is refused.

use outbox_core::{Error, ErrorKind, Position, Result};
use sqlx::{AssertSqlSafe, PgPool, Row};

use super::config::CdcConfig;
use super::error;
use super::position::{format_lsn, log_parts, parse_lsn, quote_ident};

/// The output plugin the relay decodes.
pub const PLUGIN: &str = "pgoutput";

/// Refuses a server whose `wal_level` cannot feed logical replication, saying how to fix it.
///
/// # Errors
/// [`ErrorKind::Config`] unless `wal_level` is `logical`.
pub fn check_wal_level(wal_level: &str) -> Result<()> {
    if wal_level.trim().eq_ignore_ascii_case("logical") {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Config,
        format!(
            "PostgreSQL runs with wal_level = {wal_level}, and the CDC relay needs logical decoding. \
             Fix: run `ALTER SYSTEM SET wal_level = logical;` as a superuser, then restart PostgreSQL \
             (e.g. `pg_ctlcluster --skip-systemctl-redirect <version> main restart`; a reload is not enough). \
             Or use the polling relay, which needs no server setting."
        ),
    )
    .with("wal_level", wal_level))
}

/// Reads `wal_level` from the server and checks it.
pub(crate) async fn check_server_wal_level(pool: &PgPool) -> Result<()> {
    let level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(pool)
        .await
        .map_err(|e| error::sql("reading wal_level", e))?;
    check_wal_level(&level)
}

/// Creates the publication when missing; checks an existing one publishes the outbox's
/// inserts under its root table.
pub(crate) async fn ensure_publication(pool: &PgPool, config: &CdcConfig) -> Result<()> {
    let name = &config.publication;
    let found = sqlx::query("SELECT pubinsert, pubviaroot FROM pg_publication WHERE pubname = $1")
        .bind(name)
        .fetch_optional(pool)
        .await
        .map_err(|e| error::sql("reading the publication", e))?;
    let Some(found) = found else {
        if !config.create_missing {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "publication {name:?} does not exist and create_missing is off: \
                     CREATE PUBLICATION {name} FOR TABLE {}.{} WITH (publish = 'insert', publish_via_partition_root = true)",
                    quote_ident(&config.schema),
                    quote_ident(&config.table)
                ),
            )
            .with("publication", name));
        }
        // Inserts only: outbox rows are immutable, and a TRUNCATE or a DELETE (should
        // one ever get past the triggers) must not look like events. Via the root, so a
        // row arrives under the partitioned table whichever partition holds it.
        let sql = format!(
            "CREATE PUBLICATION {} FOR TABLE {}.{} WITH (publish = 'insert', publish_via_partition_root = true)",
            quote_ident(name),
            quote_ident(&config.schema),
            quote_ident(&config.table)
        );
        return match sqlx::query(AssertSqlSafe(sql)).execute(pool).await {
            Ok(_) => {
                tracing::info!(publication = %name, "created the CDC publication");
                Ok(())
            }
            // Another instance created it first: check what it created.
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42710") => {
                Box::pin(ensure_publication(pool, config)).await
            }
            Err(e) => Err(error::sql("creating the publication", e).with("publication", name)),
        };
    };
    let publishes_insert: bool = found.try_get("pubinsert").unwrap_or(false);
    let via_root: bool = found.try_get("pubviaroot").unwrap_or(false);
    let has_table: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_publication_tables \
         WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)",
    )
    .bind(name)
    .bind(&config.schema)
    .bind(&config.table)
    .fetch_one(pool)
    .await
    .map_err(|e| error::sql("reading the publication's tables", e))?;
    let problem = if !has_table {
        Some(format!(
            "does not publish {}.{}",
            config.schema, config.table
        ))
    } else if !publishes_insert {
        Some("does not publish inserts".to_owned())
    } else if !via_root {
        Some(
            "lacks publish_via_partition_root = true, so rows would arrive under partition names"
                .to_owned(),
        )
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(Error::new(
            ErrorKind::Config,
            format!(
                "publication {name:?} {problem}; fix it (ALTER PUBLICATION …) or configure another publication name"
            ),
        )
        .with("publication", name)),
    }
}

/// What the relay learned about its slot at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotState {
    /// Where the slot resumes: commits whose record starts before it are not sent again.
    pub confirmed_flush: u64,
    /// The slot was created by this start.
    pub created: bool,
}

/// Creates the slot when missing (never when a cursor exists: see below) and validates it.
pub(crate) async fn ensure_slot(
    pool: &PgPool,
    config: &CdcConfig,
    cursor: Option<Position>,
) -> Result<SlotState> {
    let name = &config.slot;
    if let Some(state) = inspect_slot(pool, config).await? {
        check_against_cursor(config, state.confirmed_flush, cursor)?;
        return Ok(state);
    }
    if let Some(cursor) = cursor {
        return Err(missing_slot(config, cursor));
    }
    if !config.create_missing {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "replication slot {name:?} does not exist and create_missing is off: \
                 SELECT pg_create_logical_replication_slot('{name}', '{PLUGIN}')"
            ),
        )
        .with("slot", name));
    }
    let created =
        sqlx::query("SELECT lsn::text AS lsn FROM pg_create_logical_replication_slot($1, $2)")
            .bind(name)
            .bind(PLUGIN)
            .fetch_one(pool)
            .await;
    match created {
        Ok(row) => {
            let lsn: String = row
                .try_get("lsn")
                .map_err(|e| error::sql("reading the new slot", e))?;
            let confirmed_flush = parse_lsn(&lsn)?;
            tracing::info!(slot = %name, lsn = %lsn, "created the CDC replication slot");
            Ok(SlotState {
                confirmed_flush,
                created: true,
            })
        }
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42710") => {
            // Created concurrently by another instance: validate what is there.
            let state = inspect_slot(pool, config).await?.ok_or_else(|| {
                Error::new(ErrorKind::Storage, format!("replication slot {name:?} vanished while being created"))
                    .transient(None)
            })?;
            check_against_cursor(config, state.confirmed_flush, cursor)?;
            Ok(state)
        }
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("53400") => Err(Error::new(
            ErrorKind::Config,
            format!("cannot create replication slot {name:?}: {} (raise max_replication_slots, or drop unused slots: they retain WAL)", db.message()),
        )
        .with("slot", name)),
        Err(e) => Err(error::sql("creating the replication slot", e).with("slot", name)),
    }
}

/// Checks the slot again (a reconnecting relay: someone may have dropped or moved it
/// meanwhile, and the session's first status update would hide an advance).
pub(crate) async fn verify(
    pool: &PgPool,
    config: &CdcConfig,
    cursor: Option<Position>,
) -> Result<()> {
    match (inspect_slot(pool, config).await?, cursor) {
        (Some(state), cursor) => check_against_cursor(config, state.confirmed_flush, cursor),
        (None, Some(cursor)) => Err(missing_slot(config, cursor)),
        (None, None) => Err(Error::new(
            ErrorKind::NotFound,
            format!("replication slot {:?} does not exist", config.slot),
        )
        .with("slot", &config.slot)),
    }
}

/// Pitfall P4 (docs/ARCHITECTURE.md): a slot made now starts now; everything committed between the old
/// slot's end and this moment would never be streamed.
fn missing_slot(config: &CdcConfig, cursor: Position) -> Error {
    let name = &config.slot;
    Error::new(
        ErrorKind::Config,
        format!(
            "events lost: replication slot {name:?} does not exist, but relay {relay:?} has a saved cursor at {cursor}. \
             A re-created slot starts at the present and never streams what was committed since the old slot went away. \
             Deliver the events after the cursor another way (the polling relay), then delete the relay_cursors row \
             of {relay:?} to start afresh; or restore the slot.",
            relay = config.relay
        ),
    )
    .with("slot", name)
    .with("relay", &config.relay)
}

/// Validates an existing slot: logical, `pgoutput`, this database, WAL still there.
async fn inspect_slot(pool: &PgPool, config: &CdcConfig) -> Result<Option<SlotState>> {
    let name = &config.slot;
    let row = sqlx::query(
        "SELECT slot_type, plugin, database, current_database() AS here, \
                confirmed_flush_lsn::text AS confirmed, wal_status \
         FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(name)
    .fetch_optional(pool)
    .await
    .map_err(|e| error::sql("reading the replication slot", e).with("slot", name))?;
    let Some(row) = row else { return Ok(None) };
    let get = |column: &str| -> Option<String> {
        row.try_get::<Option<String>, _>(column).ok().flatten()
    };
    let refuse = |problem: String| {
        Err(Error::new(
            ErrorKind::Config,
            format!(
                "replication slot {name:?} {problem}; the CDC relay needs a logical slot with plugin {PLUGIN:?} \
                 in this database. Configure another slot name, or drop this one if nothing uses it \
                 (SELECT pg_drop_replication_slot('{name}'))"
            ),
        )
        .with("slot", name))
    };
    let slot_type = get("slot_type").unwrap_or_default();
    if slot_type != "logical" {
        return refuse(format!("is a {slot_type} slot"));
    }
    let plugin = get("plugin").unwrap_or_default();
    if plugin != PLUGIN {
        return refuse(format!("uses the output plugin {plugin:?}"));
    }
    let (database, here) = (
        get("database").unwrap_or_default(),
        get("here").unwrap_or_default(),
    );
    if database != here {
        return refuse(format!("belongs to database {database:?}, not {here:?}"));
    }
    if get("wal_status").as_deref() == Some("lost") {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "events lost: replication slot {name:?} lost WAL it still needed (wal_status = lost, \
                 max_slot_wal_keep_size exceeded). Deliver the events after relay {relay:?}'s cursor another way \
                 (the polling relay), then drop the slot and delete the relay's cursor row.",
                relay = config.relay
            ),
        )
        .with("slot", name));
    }
    let confirmed_flush = match get("confirmed") {
        Some(text) => parse_lsn(&text)?,
        None => 0,
    };
    Ok(Some(SlotState {
        confirmed_flush,
        created: false,
    }))
}

/// The relay only ever confirms the commit LSN of a durable cursor, so a slot that
/// resumes after the cursor's commit was moved by someone else (advanced, or dropped
/// and re-created): the commits in between would never be streamed.
pub(crate) fn check_against_cursor(
    config: &CdcConfig,
    confirmed_flush: u64,
    cursor: Option<Position>,
) -> Result<()> {
    let Some(cursor) = cursor else { return Ok(()) };
    let (lsn, _) = log_parts(cursor)?;
    if confirmed_flush <= lsn {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Config,
        format!(
            "events lost: replication slot {slot:?} resumes at {confirmed}, after relay {relay:?}'s saved cursor at {cursor}. \
             The slot was advanced or re-created behind the relay's back, and commits between the two are not in it. \
             Deliver the events after the cursor another way (the polling relay), then delete the relay_cursors row \
             of {relay:?} to start from the slot.",
            slot = config.slot,
            confirmed = format_lsn(confirmed_flush),
            relay = config.relay
        ),
    )
    .with("slot", &config.slot)
    .with("relay", &config.relay))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_wal_level_names_the_exact_fix() {
        let err = check_wal_level("replica").unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Config);
        assert!(
            err.message()
                .contains("ALTER SYSTEM SET wal_level = logical;"),
            "{err}"
        );
        assert!(err.message().contains("restart PostgreSQL"), "{err}");
        assert!(
            err.message()
                .contains("pg_ctlcluster --skip-systemctl-redirect <version> main restart"),
            "{err}"
        );
        assert_eq!(err.context("wal_level"), Some("replica"));
        assert!(!err.is_transient());
        assert!(check_wal_level("minimal").is_err());
        check_wal_level("logical").unwrap();
    }

    #[test]
    fn a_slot_ahead_of_the_cursor_is_refused() {
        let config = CdcConfig::new("postgres://x/y");
        let cursor = crate::position::PgPosition::Log { lsn: 1000, row: 7 }.encode();
        check_against_cursor(&config, 1000, Some(cursor)).unwrap();
        check_against_cursor(&config, 10, Some(cursor)).unwrap();
        check_against_cursor(&config, 5000, None).unwrap();
        let err = check_against_cursor(&config, 1001, Some(cursor)).unwrap_err();
        assert_eq!(err.context("slot"), Some("outbox_cdc"));
        assert!(err.message().starts_with("events lost"), "{err}");
    }
}
