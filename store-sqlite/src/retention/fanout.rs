//! The fan-out families: messages with their webhook ids, by the UTC day received;
//! and the dead letters with the replay requests of one destination and account,
//! which leave together.

use outbox_core::{Account, KeptBecause, RetentionFamily};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{DAY, Pass, days};
use crate::error::SqliteResultExt;

/// Cursors that are not destinations: the catch-up checkpoint (`ledger-log:<ledger>`)
/// and replay progress (`<destination>@replayed:<account>`).
const DESTINATIONS: &str = "SELECT transport, position FROM fanout_cursors
     WHERE substr(transport, 1, 11) <> 'ledger-log:' AND instr(transport, '@replayed:') = 0
     ORDER BY position, transport";

/// Where one destination's dead letters of one account stand, the way
/// `FanoutStore::dead_letter_accounts` reads them. `?1`/`?2` select the groups as
/// `(destination, account)` rows.
const GROUP_STATE: &str = "SELECT g.destination, g.account,
        coalesce((SELECT max(id) FROM fanout_dead_letters r
                  WHERE r.destination = g.destination AND r.account = g.account AND r.reason = 'refused'), 0),
        (SELECT max(refusal_id) FROM fanout_replay_requests q
         WHERE q.destination = g.destination AND q.account = g.account),
        (SELECT max(position) FROM fanout_dead_letters x
         WHERE x.destination = g.destination AND x.account = g.account),
        coalesce((SELECT position FROM fanout_cursors c
                  WHERE c.transport = g.destination || '@replayed:' || g.account), 0),
        coalesce((SELECT position FROM fanout_cursors c WHERE c.transport = g.destination), 0)
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
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            destination: row.get(0)?,
            account: row.get(1)?,
            refusal: row.get(2)?,
            covered: row.get(3)?,
            last_position: row.get::<_, Option<i64>>(4)?.unwrap_or(0),
            replayed_through: row.get(5)?,
            cursor: row.get(6)?,
        })
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

pub(super) fn run_messages(conn: &mut Connection, pass: &mut Pass<'_>) -> outbox_core::Result<()> {
    let days = days(
        conn,
        "SELECT day FROM (
             SELECT received_at - received_at % ?1 AS day FROM fanout_messages WHERE received_at < ?2
             UNION SELECT received_at - received_at % ?1 FROM fanout_deliveries WHERE received_at < ?2)
         ORDER BY day",
        pass.horizon,
    )?;
    let family = RetentionFamily::Fanout;
    for start in days {
        let bounds = params![start, start + DAY];
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .storage()?;
        let (messages, last): (i64, Option<i64>) = tx
            .query_row(
                "SELECT count(*), max(position) FROM fanout_messages
                 WHERE received_at >= ?1 AND received_at < ?2",
                bounds,
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .storage()?;
        if let Some(last) = last {
            if let Some(reason) = unread(&tx, last)? {
                pass.kept(family, start, None, reason);
                continue;
            }
            let blocked = {
                let mut stmt = tx
                    .prepare(&format!(
                        "{GROUP_STATE} (SELECT DISTINCT d.destination, d.account
                             FROM fanout_dead_letters d JOIN fanout_messages m ON m.position = d.position
                             WHERE m.received_at >= ?1 AND m.received_at < ?2) g"
                    ))
                    .storage()?;
                let groups = stmt.query_map(bounds, Group::read).storage()?;
                let mut blocked = None;
                for group in groups {
                    if let Some(reason) = group.storage()?.unreleased()? {
                        blocked = Some(reason);
                        break;
                    }
                }
                blocked
            };
            if let Some(reason) = blocked {
                pass.kept(family, start, None, reason);
                continue;
            }
        }
        let webhooks: i64 = tx
            .query_row(
                "SELECT count(*) FROM fanout_deliveries WHERE received_at >= ?1 AND received_at < ?2",
                bounds,
                |row| row.get(0),
            )
            .storage()?;
        pass.grant(&tx, family, start, None, messages + webhooks)?;
        tx.execute(
            "DELETE FROM fanout_messages WHERE received_at >= ?1 AND received_at < ?2",
            bounds,
        )
        .storage()?;
        tx.execute(
            "DELETE FROM fanout_deliveries WHERE received_at >= ?1 AND received_at < ?2",
            bounds,
        )
        .storage()?;
        tx.commit().storage()?;
        pass.dropped(family, start, None, messages + webhooks);
    }
    Ok(())
}

/// Why a day whose last message is at `last` has not been read by every destination.
fn unread(conn: &Connection, last: i64) -> outbox_core::Result<Option<KeptBecause>> {
    let slowest: Option<(String, i64)> = conn
        .query_row(DESTINATIONS, [], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
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

pub(super) fn run_dead_letters(
    conn: &mut Connection,
    pass: &mut Pass<'_>,
) -> outbox_core::Result<()> {
    // Each group with the time of its newest record, groups entirely past retention.
    let groups: Vec<(String, String)> = {
        let mut stmt = conn
            .prepare(
                "SELECT destination, account FROM (
                     SELECT destination, account, dead_lettered_at AS at FROM fanout_dead_letters
                     UNION ALL SELECT destination, account, requested_at FROM fanout_replay_requests)
                 GROUP BY destination, account HAVING max(at) < ?1 ORDER BY max(at)",
            )
            .storage()?;
        let rows = stmt
            .query_map([pass.horizon], |row| Ok((row.get(0)?, row.get(1)?)))
            .storage()?;
        rows.collect::<rusqlite::Result<_>>().storage()?
    };
    let family = RetentionFamily::FanoutDeadLetters;
    for (destination, account) in groups {
        let key = params![destination, account];
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .storage()?;
        let newest: i64 = tx
            .query_row(
                "SELECT max(at) FROM (
                     SELECT dead_lettered_at AS at FROM fanout_dead_letters WHERE destination = ?1 AND account = ?2
                     UNION ALL SELECT requested_at FROM fanout_replay_requests WHERE destination = ?1 AND account = ?2)",
                key,
                |row| row.get(0),
            )
            .storage()?;
        let start = newest - newest.rem_euclid(DAY);
        let group = tx
            .query_row(
                &format!("{GROUP_STATE} (SELECT ?1 AS destination, ?2 AS account) g"),
                key,
                Group::read,
            )
            .storage()?;
        let label = Some(group.label());
        if newest >= pass.horizon {
            // A record written since the candidates were listed.
            continue;
        }
        let behind = (group.cursor < group.last_position).then(|| KeptBecause::DestinationBehind {
            destination: destination.clone(),
            read_through: group.cursor.max(0) as u64,
            last: group.last_position as u64,
        });
        if let Some(reason) = group.unreleased()?.or(behind) {
            pass.kept(family, start, label, reason);
            continue;
        }
        let rows: i64 = tx
            .query_row(
                "SELECT (SELECT count(*) FROM fanout_dead_letters WHERE destination = ?1 AND account = ?2)
                      + (SELECT count(*) FROM fanout_replay_requests WHERE destination = ?1 AND account = ?2)",
                key,
                |row| row.get(0),
            )
            .storage()?;
        pass.grant(&tx, family, start, Some((&destination, &account)), rows)?;
        tx.execute(
            "DELETE FROM fanout_dead_letters WHERE destination = ?1 AND account = ?2",
            key,
        )
        .storage()?;
        tx.execute(
            "DELETE FROM fanout_replay_requests WHERE destination = ?1 AND account = ?2",
            key,
        )
        .storage()?;
        tx.commit().storage()?;
        pass.dropped(family, start, label, rows);
    }
    Ok(())
}
