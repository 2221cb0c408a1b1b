//! The fan-out families: messages with their webhook ids, by the UTC day received;
//! and the dead letters with the replay requests of one destination and account,
//! which leave together.

use chrono::{DateTime, Utc};
use outbox_core::{Account, KeptBecause, RetentionFamily};
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, PgPool, Postgres, Row, Transaction};

use super::{Pass, day_end};
use crate::error::PgResultExt;

/// Cursors that are not destinations: the catch-up checkpoint (`ledger-log:<ledger>`)
/// and replay progress (`<destination>@replayed:<account>`). The slowest first.
const SLOWEST_DESTINATION: &str = "SELECT transport, position FROM fanout_cursors
     WHERE NOT starts_with(transport, 'ledger-log:') AND strpos(transport, '@replayed:') = 0
     ORDER BY position, transport LIMIT 1";

/// Where one destination's dead letters of one account stand, the way
/// `FanoutStore::dead_letter_accounts` reads them, for the groups of `g`.
const GROUP_STATE: &str = "SELECT g.destination, g.account,
        coalesce((SELECT max(id) FROM fanout_dead_letters r
                  WHERE r.destination = g.destination AND r.account = g.account AND r.reason = 'refused'), 0) AS refusal,
        (SELECT max(refusal_id) FROM fanout_replay_requests q
         WHERE q.destination = g.destination AND q.account = g.account) AS covered,
        coalesce((SELECT max(position) FROM fanout_dead_letters x
                  WHERE x.destination = g.destination AND x.account = g.account), 0) AS last_position,
        coalesce((SELECT position FROM fanout_cursors c
                  WHERE c.transport = g.destination || '@replayed:' || g.account), 0) AS replayed_through,
        coalesce((SELECT position FROM fanout_cursors c WHERE c.transport = g.destination), 0) AS cursor
     FROM";

struct Group {
    destination: String,
    account: String,
    refusal: i64,
    covered: Option<i64>,
    last_position: i64,
    replayed_through: i64,
    cursor: i64,
}

impl Group {
    fn read(row: &PgRow) -> Self {
        Self {
            destination: row.get("destination"),
            account: row.get("account"),
            refusal: row.get("refusal"),
            covered: row.get("covered"),
            last_position: row.get("last_position"),
            replayed_through: row.get("replayed_through"),
            cursor: row.get("cursor"),
        }
    }

    /// Why the group's messages are not done with, if they are not.
    fn unreleased(&self) -> outbox_core::Result<Option<KeptBecause>> {
        let account =
            Account::parse(&self.account).map_err(|e| e.with("table", "fanout_dead_letters"))?;
        let id = |v: i64| v.max(0) as u64;
        Ok(KeptBecause::dead_letters(
            &self.destination,
            &account,
            id(self.refusal),
            self.covered.map(id),
            id(self.last_position),
            id(self.replayed_through),
        ))
    }

    fn label(&self) -> String {
        format!("{} account {}", self.destination, self.account)
    }
}

async fn days(
    pool: &PgPool,
    sql: &str,
    horizon: DateTime<Utc>,
) -> outbox_core::Result<Vec<DateTime<Utc>>> {
    sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
        .bind(horizon)
        .fetch_all(pool)
        .await
        .storage()
}

pub(super) async fn run_messages(pool: &PgPool, pass: &mut Pass<'_>) -> outbox_core::Result<()> {
    let family = RetentionFamily::Fanout;
    let days = days(
        pool,
        "SELECT outbox_utc_day(received_at) AS day FROM fanout_messages WHERE received_at < $1
         UNION SELECT outbox_utc_day(received_at) FROM fanout_deliveries WHERE received_at < $1
         ORDER BY day",
        pass.horizon,
    )
    .await?;
    for start in days {
        let end = day_end(start);
        let mut tx = Pass::begin(pool).await?;
        let (messages, last): (i64, Option<i64>) = sqlx::query_as(
            "SELECT count(*), max(position) FROM fanout_messages
             WHERE received_at >= $1 AND received_at < $2",
        )
        .bind(start)
        .bind(end)
        .fetch_one(&mut *tx)
        .await
        .storage()?;
        if let Some(last) = last {
            if let Some(reason) = unread(&mut tx, last).await? {
                pass.kept(family, start, None, reason);
                continue;
            }
            let groups = sqlx::query(AssertSqlSafe(format!(
                "{GROUP_STATE} (SELECT DISTINCT d.destination, d.account
                     FROM fanout_dead_letters d JOIN fanout_messages m ON m.position = d.position
                     WHERE m.received_at >= $1 AND m.received_at < $2) g"
            )))
            .bind(start)
            .bind(end)
            .fetch_all(&mut *tx)
            .await
            .storage()?;
            let mut blocked = None;
            for row in &groups {
                if let Some(reason) = Group::read(row).unreleased()? {
                    blocked = Some(reason);
                    break;
                }
            }
            if let Some(reason) = blocked {
                pass.kept(family, start, None, reason);
                continue;
            }
        }
        let webhooks: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM fanout_deliveries WHERE received_at >= $1 AND received_at < $2",
        )
        .bind(start)
        .bind(end)
        .fetch_one(&mut *tx)
        .await
        .storage()?;
        if messages + webhooks == 0 {
            // Another pass dropped it meanwhile.
            continue;
        }
        pass.grant(&mut tx, family, start, None, messages + webhooks)
            .await?;
        for table in ["fanout_messages", "fanout_deliveries"] {
            sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE received_at >= $1 AND received_at < $2"
            )))
            .bind(start)
            .bind(end)
            .execute(&mut *tx)
            .await
            .storage()?;
        }
        tx.commit().await.storage()?;
        pass.dropped(family, start, None, messages + webhooks);
    }
    Ok(())
}

/// Why a day whose last message is at `last` has not been read by every destination.
async fn unread(
    tx: &mut Transaction<'static, Postgres>,
    last: i64,
) -> outbox_core::Result<Option<KeptBecause>> {
    let slowest: Option<(String, i64)> = sqlx::query_as(SLOWEST_DESTINATION)
        .fetch_optional(&mut **tx)
        .await
        .storage()?;
    Ok(match slowest {
        None => Some(KeptBecause::NoDestination),
        Some((destination, position)) if position < last => Some(KeptBecause::DestinationBehind {
            destination,
            read_through: position.max(0) as u64,
            last: last as u64,
        }),
        Some(_) => None,
    })
}

pub(super) async fn run_dead_letters(
    pool: &PgPool,
    pass: &mut Pass<'_>,
) -> outbox_core::Result<()> {
    let family = RetentionFamily::FanoutDeadLetters;
    // Each group whose newest record is past retention, oldest first.
    let groups: Vec<(String, String)> = sqlx::query_as(
        "SELECT destination, account FROM (
             SELECT destination, account, dead_lettered_at AS at FROM fanout_dead_letters
             UNION ALL SELECT destination, account, requested_at FROM fanout_replay_requests) r
         GROUP BY destination, account HAVING max(at) < $1 ORDER BY max(at)",
    )
    .bind(pass.horizon)
    .fetch_all(pool)
    .await
    .storage()?;
    for (destination, account) in groups {
        let mut tx = Pass::begin(pool).await?;
        let (newest, rows): (Option<DateTime<Utc>>, i64) = sqlx::query_as(
            "SELECT max(at), count(*) FROM (
                 SELECT dead_lettered_at AS at FROM fanout_dead_letters WHERE destination = $1 AND account = $2
                 UNION ALL SELECT requested_at FROM fanout_replay_requests WHERE destination = $1 AND account = $2) r",
        )
        .bind(&destination)
        .bind(&account)
        .fetch_one(&mut *tx)
        .await
        .storage()?;
        // Gone (another pass), or a record written since the groups were listed.
        let Some(newest) = newest.filter(|at| *at < pass.horizon) else {
            continue;
        };
        let start: DateTime<Utc> = sqlx::query_scalar("SELECT outbox_utc_day($1)")
            .bind(newest)
            .fetch_one(&mut *tx)
            .await
            .storage()?;
        let row = sqlx::query(AssertSqlSafe(format!(
            "{GROUP_STATE} (SELECT $1::text AS destination, $2::text AS account) g"
        )))
        .bind(&destination)
        .bind(&account)
        .fetch_one(&mut *tx)
        .await
        .storage()?;
        let group = Group::read(&row);
        let label = Some(group.label());
        let behind = (group.cursor < group.last_position).then(|| KeptBecause::DestinationBehind {
            destination: destination.clone(),
            read_through: group.cursor.max(0) as u64,
            last: group.last_position as u64,
        });
        if let Some(reason) = group.unreleased()?.or(behind) {
            pass.kept(family, start, label, reason);
            continue;
        }
        pass.grant(&mut tx, family, start, Some((&destination, &account)), rows)
            .await?;
        for table in ["fanout_dead_letters", "fanout_replay_requests"] {
            sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE destination = $1 AND account = $2"
            )))
            .bind(&destination)
            .bind(&account)
            .execute(&mut *tx)
            .await
            .storage()?;
        }
        tx.commit().await.storage()?;
        pass.dropped(family, start, label, rows);
    }
    Ok(())
}
