//! `PgRelayLock`: at most one relay process per relay name on one outbox schema.
//!
//! Two relays with one name (a rolling deploy, `--once` beside the daemon, a plain
//! relay beside a fleet of that name) would post the same events side by side; a
//! refusal is not idempotent in the ledger, so the second could commit a payout the
//! first reported as refused. The lock is a session advisory lock on a connection of
//! its own, keyed by schema and relay name: PostgreSQL drops it the moment the
//! holder's session ends (SIGKILL closes the socket), so a crashed relay never blocks
//! its successor. A plain or CDC relay takes it exclusively; fleet members take it
//! shared, so they run together but never beside a plain relay of the same name.

use outbox_core::{Error, ErrorKind, Result};
use sqlx::{ConnectOptions, Connection, PgConnection};

use crate::config::PgConfig;
use crate::error::map_error;

/// How a relay holds its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// A plain polling or CDC relay: alone.
    Exclusive,
    /// A fleet member: with the other members, never beside a plain relay.
    Shared,
}

/// Held for as long as the relay runs; dropping it closes the session and releases it.
#[derive(Debug)]
pub struct PgRelayLock {
    conn: PgConnection,
    relay: String,
    class: i32,
    key: i32,
}

impl PgRelayLock {
    /// Takes relay `relay`'s lock in the outbox schema of `config`.
    ///
    /// # Errors
    /// `Config` naming the relay and the holding session when it is taken; storage
    /// errors otherwise.
    pub async fn acquire(config: &PgConfig, relay: &str, mode: LockMode) -> Result<Self> {
        let options = config
            .connect_options()?
            .application_name(&format!("outbox-relay-lock:{relay}"));
        let mut conn = options.connect().await.map_err(map_error)?;
        let (class, key): (i32, i32) = sqlx::query_as(
            "SELECT hashtext('outbox-relay-name:' || current_schema()), hashtext($1)",
        )
        .bind(relay)
        .fetch_one(&mut conn)
        .await
        .map_err(map_error)?;
        let take = match mode {
            LockMode::Exclusive => "SELECT pg_try_advisory_lock($1, $2)",
            LockMode::Shared => "SELECT pg_try_advisory_lock_shared($1, $2)",
        };
        let got: bool = sqlx::query_scalar(take)
            .bind(class)
            .bind(key)
            .fetch_one(&mut conn)
            .await
            .map_err(map_error)?;
        if !got {
            let holders: Vec<(i32, String)> = sqlx::query_as(
                "SELECT l.pid, l.mode FROM pg_locks l
                 WHERE l.locktype = 'advisory' AND l.granted
                   AND l.classid = $1::int4::oid AND l.objid = $2::int4::oid AND l.objsubid = 2",
            )
            .bind(class)
            .bind(key)
            .fetch_all(&mut conn)
            .await
            .map_err(map_error)?;
            let holders: Vec<String> = holders
                .iter()
                .map(|(pid, mode)| {
                    let kind = if mode == "ShareLock" {
                        "a fleet member"
                    } else {
                        "a relay"
                    };
                    format!("{kind} in backend {pid}")
                })
                .collect();
            let _ = conn.close().await;
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "relay {relay:?} is already running on this outbox ({}): a second instance would post the same events; stop it first",
                    holders.join(", ")
                ),
            )
            .with("relay", relay));
        }
        Ok(Self {
            conn,
            relay: relay.to_owned(),
            class,
            key,
        })
    }

    pub fn relay(&self) -> &str {
        &self.relay
    }

    /// Other sessions holding this name's lock (the other members of a fleet).
    ///
    /// # Errors
    /// Storage errors.
    pub async fn other_holders(&mut self) -> Result<u32> {
        let others: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks
             WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()
               AND classid = $1::int4::oid AND objid = $2::int4::oid AND objsubid = 2",
        )
        .bind(self.class)
        .bind(self.key)
        .fetch_one(&mut self.conn)
        .await
        .map_err(map_error)?;
        Ok(u32::try_from(others).unwrap_or(u32::MAX))
    }

    /// Whether the session holding the lock is still alive (if it is gone, so is the lock).
    ///
    /// # Errors
    /// Never: a failed check is reported as `false`.
    pub async fn still_held(&mut self) -> bool {
        self.conn.ping().await.is_ok()
    }
}
