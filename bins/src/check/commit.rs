//! Check 1, Commit: the outbox schema is current, and an enqueue that rolls back
//! with the caller's transaction leaves neither a row nor a sequence gap.

use super::db::{Db, check_event, synthetic};
use super::report::{Check, Part};

pub async fn check(db: &dyn Db, database: &str) -> Check {
    let mut parts = vec![schema(db, database).await];
    parts.push(rollback(db).await);
    Check::new(1, "Commit", parts)
}

async fn schema(db: &dyn Db, database: &str) -> Part {
    let control = "outbox schema at the current migration";
    match db.migration().await {
        Ok(m) if m.applied == m.current => {
            Part::pass(control, format!("migration {} of {}", m.applied, m.current))
        }
        Ok(m) if m.applied < m.current => Part::fail(
            control,
            format!(
                "the schema is at migration {}, this release's is {}",
                m.applied, m.current
            ),
            format!("run `outbox migrate --database {database}` (it only adds) and check again"),
        ),
        Ok(m) => Part::not_checked(
            control,
            format!(
                "the schema is at migration {}, newer than this release's {}: run the check of the release that migrated it",
                m.applied, m.current
            ),
        ),
        Err(e) => Part::fail(
            control,
            format!("cannot read the schema version: {e}"),
            format!("run `outbox migrate --database {database}` on the outbox database"),
        ),
    }
}

async fn rollback(db: &dyn Db) -> Part {
    let control = "a rolled-back enqueue leaves no row and no sequence gap";
    let first = check_event();
    let second = synthetic(first.account.clone());
    match db.rolled_back_enqueues(first, second).await {
        Ok(r) if r.rows_left == 0 && r.first_sequence == r.second_sequence => Part::pass(
            control,
            format!(
                "enqueued twice on the check's own account {}, each time rolled back: sequence {} both times, no row left",
                r.account, r.first_sequence
            ),
        ),
        Ok(r) if r.rows_left > 0 => Part::fail(
            control,
            format!(
                "{} row(s) of {} survived the rollback",
                r.rows_left, r.account
            ),
            "enqueue must write in the caller's open transaction, with the payout intent, never in a transaction of its own",
        ),
        Ok(r) => Part::fail(
            control,
            format!(
                "after a rolled-back enqueue got sequence {}, the next got {}: the rollback left a gap",
                r.first_sequence, r.second_sequence
            ),
            "allocate the per-account sequence inside the enqueuing transaction (a counter row locked until commit), never from a database sequence",
        ),
        Err(e) => Part::fail(
            control,
            format!("the rolled-back enqueue failed: {e}"),
            "fix the outbox database (see the error) and check again",
        ),
    }
}
