//! `FleetLayout`: how many partitions a fleet relay spreads its accounts over, kept in
//! the database (`relay_fleet_layouts`, one insert-only row per generation) so that
//! every member agrees on it and a change of N is never silent.
//!
//! Partition cursors are named `<relay>:g<generation>:p<k>`. A member started with
//! another N than the stored layout is refused, unless it asks to re-partition and no
//! other member runs: then a new generation begins, and each new partition's cursor
//! starts at the lowest cursor of the old partitions its accounts come from, with an
//! "@attempted" horizon at the highest of theirs. Events in between are looked up in
//! the delivery records by the new dispatchers: those with a terminal record are
//! skipped, the others are sent alone (after a look for a rejection notice), so
//! nothing is skipped and nothing refused is re-posted. A plain relay of the same name
//! moves into a fleet the same way (its single cursor is "generation 0" with one
//! partition).

use outbox_core::store::attempted_cursor;
use outbox_core::{Error, ErrorKind, Position, Result, Store};
use sqlx::{Acquire, PgConnection};

use crate::error::PgResultExt;
use crate::position::PgPosition;
use crate::store::PgStore;

/// Where every partition starts when a fleet's first layout is created: before every
/// row (real xids start at 3).
fn origin() -> Position {
    PgPosition::Snapshot { txid: 0, row: 0 }.encode()
}

/// A fleet's layout: partition count and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetLayout {
    pub partitions: u32,
    /// 0 for a plain relay (one partition, its cursor named after the relay).
    pub generation: i64,
}

impl FleetLayout {
    /// The cursor name of partition `partition` in this layout.
    pub fn cursor_name(&self, relay: &str, partition: u32) -> String {
        if self.generation == 0 {
            relay.to_owned()
        } else {
            format!("{relay}:g{}:p{partition}", self.generation)
        }
    }

    /// The old partitions whose accounts partition `partition` of `next` holds.
    /// Accounts go to `abs(hash % N)`: when N divides the old count only the old
    /// partitions congruent to it merge; when the old count divides N, one old
    /// partition splits; otherwise any old partition may contribute.
    fn sources(&self, next: u32, partition: u32) -> Vec<u32> {
        let old = self.partitions;
        if old.is_multiple_of(next) {
            (0..old).filter(|p| p % next == partition).collect()
        } else if next.is_multiple_of(old) {
            vec![partition % old]
        } else {
            (0..old).collect()
        }
    }
}

/// What a starting member asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutRequest {
    pub partitions: u32,
    /// Start a new generation when the stored layout has another partition count.
    pub repartition: bool,
    /// Fleet members running besides this one (holders of the relay name's shared
    /// lock other than this process); a re-partition needs none.
    pub other_members: u32,
}

/// Returns the layout a member of fleet `relay` runs with, creating or changing it as
/// `request` allows (see the module docs).
///
/// # Errors
/// `Config` naming the stored layout when the member's N differs and it may not
/// re-partition, when other members run during a re-partition, or when the relay
/// has no cursor but the outbox already has delivery records; storage errors.
pub async fn establish_layout(
    store: &PgStore,
    relay: &str,
    request: LayoutRequest,
) -> Result<FleetLayout> {
    if request.partitions == 0 {
        return Err(Error::invalid(
            "partitions",
            "at least one partition is required",
        ));
    }
    let mut conn = store.pool().acquire().await.storage()?;
    let mut tx = conn.begin().await.storage()?;
    // One member at a time decides the layout.
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtext('outbox-fleet-layout:' || current_schema()), hashtext($1))",
    )
    .bind(relay)
    .execute(&mut *tx)
    .await
    .storage()?;
    let current = current_layout(&mut tx, relay).await?;
    let old = match current {
        Some(layout) if layout.partitions == request.partitions => return Ok(layout),
        Some(layout) => layout,
        None => match store.load_cursor(relay).await? {
            Some(_) => FleetLayout {
                partitions: 1,
                generation: 0,
            },
            None => {
                if store.has_deliveries().await? {
                    return Err(missing_cursor(relay));
                }
                let first = FleetLayout {
                    partitions: request.partitions,
                    generation: 1,
                };
                insert_layout(&mut tx, relay, first).await?;
                for partition in 0..first.partitions {
                    store
                        .save_cursor(&first.cursor_name(relay, partition), origin())
                        .await?;
                }
                tx.commit().await.storage()?;
                tracing::info!(relay, partitions = first.partitions, "fleet layout created");
                return Ok(first);
            }
        },
    };
    if !request.repartition {
        return Err(refused(relay, old, request.partitions));
    }
    if request.other_members > 0 {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "relay {relay:?}: cannot re-partition while {} other fleet member(s) run; stop every member first",
                request.other_members
            ),
        )
        .with("relay", relay));
    }
    let next = FleetLayout {
        partitions: request.partitions,
        generation: old.generation + 1,
    };
    insert_layout(&mut tx, relay, next).await?;
    for partition in 0..next.partitions {
        let (cursor, attempted) = merged_frontier(store, relay, old, next, partition).await?;
        let name = next.cursor_name(relay, partition);
        store.save_cursor(&name, cursor).await?;
        if let Some(attempted) = attempted {
            store
                .save_cursor(&attempted_cursor(&name), attempted)
                .await?;
        }
    }
    tx.commit().await.storage()?;
    tracing::warn!(
        relay,
        from = old.partitions,
        to = next.partitions,
        generation = next.generation,
        "fleet re-partitioned; the new partitions resume at the lowest cursor they merge"
    );
    Ok(next)
}

/// The cursor (lowest) and "@attempted" horizon (highest) of the old partitions that
/// feed new partition `partition`.
async fn merged_frontier(
    store: &PgStore,
    relay: &str,
    old: FleetLayout,
    next: FleetLayout,
    partition: u32,
) -> Result<(Position, Option<Position>)> {
    let mut cursor: Option<Position> = None;
    let mut attempted: Option<Position> = None;
    for source in old.sources(next.partitions, partition) {
        let name = old.cursor_name(relay, source);
        // A partition without a cursor has delivered nothing: from the origin.
        let saved = store.load_cursor(&name).await?.unwrap_or_else(origin);
        cursor = Some(cursor.map_or(saved, |c| c.min(saved)));
        let horizon = store.load_cursor(&attempted_cursor(&name)).await?;
        attempted = attempted.max(horizon).max(Some(saved));
    }
    Ok((cursor.unwrap_or_else(origin), attempted))
}

async fn current_layout(conn: &mut PgConnection, relay: &str) -> Result<Option<FleetLayout>> {
    let row: Option<(i32, i64)> = sqlx::query_as(
        "SELECT partitions, generation FROM relay_fleet_layouts
         WHERE relay = $1 ORDER BY generation DESC LIMIT 1",
    )
    .bind(relay)
    .fetch_optional(&mut *conn)
    .await
    .storage()?;
    Ok(row.map(|(partitions, generation)| FleetLayout {
        partitions: u32::try_from(partitions).unwrap_or(0),
        generation,
    }))
}

async fn insert_layout(conn: &mut PgConnection, relay: &str, layout: FleetLayout) -> Result<()> {
    sqlx::query(
        "INSERT INTO relay_fleet_layouts (relay, generation, partitions) VALUES ($1, $2, $3)",
    )
    .bind(relay)
    .bind(layout.generation)
    .bind(
        i32::try_from(layout.partitions).map_err(|_| {
            Error::invalid("partitions", format!("{} is too large", layout.partitions))
        })?,
    )
    .execute(&mut *conn)
    .await
    .storage()
    .map(drop)
}

fn refused(relay: &str, stored: FleetLayout, requested: u32) -> Error {
    let what = if stored.generation == 0 {
        format!("relay {relay:?} runs as a single relay (cursor {relay:?})")
    } else {
        format!(
            "fleet relay {relay:?} is laid out in {} partitions (generation {})",
            stored.partitions, stored.generation
        )
    };
    Error::new(
        ErrorKind::Config,
        format!(
            "{what}; this member was started with --partitions {requested}. Start it with the stored layout{}, \
             or stop every member and start one with --partitions {requested} --repartition \
             (its partitions resume at the lowest cursor they merge: nothing is skipped)",
            if stored.generation == 0 {
                String::from(" (without --partitions)")
            } else {
                format!(" (--partitions {})", stored.partitions)
            }
        ),
    )
    .with("relay", relay)
    .with("partitions", requested)
}

fn missing_cursor(relay: &str) -> Error {
    Error::new(
        ErrorKind::Config,
        format!(
            "relay {relay:?} has no saved cursor, but this outbox already has delivery records: \
             another relay name has been delivering it. Starting fresh would send every event again \
             and re-evaluate the ones the ledger refused; run the fleet under the name that delivered them (--name)"
        ),
    )
    .with("relay", relay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_partitions_come_from_the_congruent_old_ones() {
        let eight = FleetLayout {
            partitions: 8,
            generation: 1,
        };
        assert_eq!(eight.sources(4, 1), vec![1, 5]);
        assert_eq!(eight.sources(2, 0), vec![0, 2, 4, 6]);
        assert_eq!(eight.sources(16, 13), vec![5]);
        assert_eq!(eight.sources(3, 0), (0..8).collect::<Vec<_>>());
        let plain = FleetLayout {
            partitions: 1,
            generation: 0,
        };
        assert_eq!(plain.sources(4, 3), vec![0]);
        assert_eq!(plain.cursor_name("relay", 0), "relay");
        assert_eq!(eight.cursor_name("relay", 5), "relay:g1:p5");
    }
}
