//! Check 5, Audit: the database itself refuses UPDATE and DELETE of the outbox
//! events and delivery records, and the outbox keeps its records as long as the
//! ledger keeps its own.

use outbox_core::retention::{Keep, RetentionPolicy};

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
/// ledger keeps its own ("was this event emitted" must have an answer for as long as
/// "was this posting made" does). Read from the policy `outbox retention set` stored.
pub async fn retention_check(outbox: &dyn Db) -> Part {
    match outbox.retention_policy().await {
        Ok(policy) => judge_retention(policy.as_ref().map(|p| &p.policy)),
        Err(e) => Part::fail(
            RETENTION,
            format!("the stored retention policy could not be read: {e}"),
            "fix the database (see the error) and check again",
        ),
    }
}

const RETENTION: &str = "outbox retention at least the ledger's";

/// PASS when the policy keeps at least as long as the ledger; FAIL otherwise; NOT
/// CHECKED without a policy (nothing is then ever removed, but the ledger's
/// retention was never declared, so there is nothing to compare with).
pub fn judge_retention(policy: Option<&RetentionPolicy>) -> Part {
    let Some(policy) = policy else {
        return Part::not_checked(
            RETENTION,
            "no retention policy is stored: nothing is ever removed, so records stay at least as long as the ledger's; declare the ledger's retention with `outbox retention set --keep … --ledger-keeps …` to have it checked",
        );
    };
    let (keep, ledger) = (policy.keep(), policy.ledger_keeps());
    if keep_at_least(keep, ledger) {
        Part::pass(
            RETENTION,
            format!("the outbox keeps {keep}; the ledger keeps {ledger}"),
        )
    } else {
        Part::fail(
            RETENTION,
            format!(
                "the outbox keeps {keep}, less than the ledger's {ledger}: an event could be gone while its posting is still there"
            ),
            format!(
                "store a policy that keeps at least {ledger}: `outbox retention set --keep {ledger} --ledger-keeps {ledger}`"
            ),
        )
    }
}

/// `Forever` outlasts every duration.
fn keep_at_least(keep: Keep, ledger: Keep) -> bool {
    match (keep.seconds(), ledger.seconds()) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(keep), Some(ledger)) => keep >= ledger,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::report::Status;

    fn keep(text: &str) -> Keep {
        Keep::parse_field("keep", text).unwrap()
    }

    #[test]
    fn retention_passes_only_when_the_outbox_keeps_at_least_the_ledgers() {
        assert!(keep_at_least(keep("400d"), keep("400d")));
        assert!(keep_at_least(keep("forever"), keep("forever")));
        assert!(keep_at_least(keep("forever"), keep("30d")));
        assert!(!keep_at_least(keep("30d"), keep("forever")));
        assert!(!keep_at_least(keep("29d"), keep("30d")));
        assert_eq!(judge_retention(None).status, Status::NotChecked);
    }
}
