//! Check 5, Audit: the database itself refuses UPDATE and DELETE of the outbox
//! events and delivery records, and the outbox keeps its records as long as the
//! ledger keeps its own.

use super::db::{Attempt, Db};
use super::report::{Check, Part};

pub async fn check(outbox: &dyn Db, fanout: Option<&dyn Db>) -> Check {
    let mut parts = Vec::new();
    for table in ["outbox_events", "outbox_deliveries"] {
        parts.push(append_only(outbox, table).await);
    }
    if let Some(fanout) = fanout {
        for table in ["fanout_messages", "fanout_deliveries"] {
            parts.push(append_only(fanout, table).await);
        }
    }
    parts.push(retention_check(outbox).await);
    Check::new(5, "Audit", parts)
}

async fn append_only(db: &dyn Db, table: &'static str) -> Part {
    let control = format!("UPDATE and DELETE of {table} refused by the database");
    let changes = match db.try_changes(table).await {
        Ok(changes) => changes,
        Err(e) => {
            return Part::fail(
                control,
                format!("could not be tried: {e}"),
                "fix the database (see the error) and check again",
            );
        }
    };
    let allowed: Vec<&str> = [("UPDATE", &changes.update), ("DELETE", &changes.delete)]
        .into_iter()
        .filter(|(_, a)| **a == Attempt::Allowed)
        .map(|(what, _)| what)
        .collect();
    if allowed.is_empty() {
        let said = |a: &Attempt| match a {
            Attempt::Refused(message) => message.clone(),
            Attempt::Allowed => String::new(),
        };
        return Part::pass(
            control,
            format!(
                "tried on a row of the check's own, rolled back: UPDATE → {}; DELETE → {}",
                said(&changes.update),
                said(&changes.delete)
            ),
        );
    }
    Part::fail(
        control,
        format!(
            "{} succeeded on a row of {table} (the check's own, rolled back): the audit trail can be rewritten",
            allowed.join(" and ")
        ),
        format!(
            "restore the append-only triggers on {table} (the outbox migrations create them; a fresh `outbox migrate` shows them) — immutability by convention is not a control"
        ),
    )
}

/// The retention part: the outbox must keep its records at least as long as the
/// ledger keeps its own. No retention is stored anywhere yet, so there is nothing to
/// compare; this is filled in once the stored retention policy exists.
pub async fn retention_check(_outbox: &dyn Db) -> Part {
    Part::not_checked(
        "outbox retention at least the ledger's",
        "neither the outbox's nor the ledger's retention is stored where the check can read it yet; compare them by hand until it is",
    )
}
