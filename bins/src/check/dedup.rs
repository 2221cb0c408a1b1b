//! Check 3, Dedup: the consumer's inbox is keyed on the instruction id, and a
//! redelivered message is absorbed without reaching the impact.

use std::collections::BTreeSet;

use outbox_core::Accepted;

use super::db::Db;
use super::report::{Check, Part};

const KEY: &str = "inbox keyed on (consumer, instruction_id)";
const REDELIVERY: &str = "a redelivery is absorbed without touching the impact";

pub async fn check(consumer: Option<&dyn Db>) -> Check {
    let Some(db) = consumer else {
        let why = "no --consumer-database given";
        return Check::new(
            3,
            "Dedup",
            vec![
                Part::not_checked(KEY, why),
                Part::not_checked(REDELIVERY, why),
            ],
        );
    };
    let key = key(db).await;
    let redelivery = if key.status == super::report::Status::Pass {
        redelivery(db).await
    } else {
        Part::not_checked(REDELIVERY, "the inbox's key is not the instruction id")
    };
    Check::new(3, "Dedup", vec![key, redelivery])
}

async fn key(db: &dyn Db) -> Part {
    let tables = match db.tables().await {
        Ok(t) => t,
        Err(e) => {
            return Part::fail(
                KEY,
                format!("cannot list the tables: {e}"),
                "fix the consumer database and check again",
            );
        }
    };
    if !tables.contains("inbox_messages") {
        return Part::fail(
            KEY,
            format!(
                "{} has no inbox_messages table: nothing dedupes what Hop 2 redelivers",
                db.name()
            ),
            "give the consumer an inbox (run `outbox migrate` on its database) written in the same transaction as its impact",
        );
    }
    let keys = match db.unique_keys("inbox_messages").await {
        Ok(keys) => keys,
        Err(e) => {
            return Part::fail(
                KEY,
                format!("cannot read the keys of inbox_messages: {e}"),
                "fix the consumer database and check again",
            );
        }
    };
    let wanted: BTreeSet<String> = ["consumer", "instruction_id"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    if keys.contains(&wanted) {
        return Part::pass(
            KEY,
            "inbox_messages has the unique key (consumer, instruction_id)",
        );
    }
    let shown: Vec<String> = keys
        .iter()
        .map(|k| format!("({})", k.iter().cloned().collect::<Vec<_>>().join(", ")))
        .collect();
    Part::fail(
        KEY,
        format!(
            "inbox_messages is keyed on {}, not on the instruction id",
            if shown.is_empty() {
                "nothing unique".to_owned()
            } else {
                shown.join(" and ")
            }
        ),
        "key the inbox on (consumer, instruction_id): an amount, a destination or a sequence is not an instruction — a second genuine payout of the same amount to the same merchant is a new instruction, and a redelivery must be known by its id",
    )
}

async fn redelivery(db: &dyn Db) -> Part {
    let redeliveries = match db.redeliveries().await {
        Ok(r) => r,
        Err(e) => {
            return Part::fail(
                REDELIVERY,
                format!("the redelivery could not be tried: {e}"),
                "fix the consumer database (see the error) and check again",
            );
        }
    };
    let mut seen = Vec::new();
    for r in &redeliveries {
        let first_ok = r
            .first
            .as_ref()
            .is_none_or(|f| matches!(f, Accepted::Applied { .. }));
        if !first_ok || r.again != Accepted::Duplicate || r.impact_calls_on_redelivery != 0 {
            return Part::fail(
                REDELIVERY,
                format!(
                    "consumer {}: instruction {} redelivered was {:?} and reached the impact {} time(s)",
                    r.consumer, r.instruction_id, r.again, r.impact_calls_on_redelivery
                ),
                "write the inbox marker and the impact in one transaction, and look the instruction up before applying",
            );
        }
        seen.push(match r.first {
            Some(_) => format!(
                "consumer {}: the check's own message applied, then redelivered → duplicate",
                r.consumer
            ),
            None => format!(
                "consumer {}: its latest applied instruction {} redelivered → duplicate",
                r.consumer, r.instruction_id
            ),
        });
    }
    Part::pass(
        REDELIVERY,
        format!(
            "{}; the impact was never reached (all in one transaction, rolled back)",
            seen.join("; ")
        ),
    )
}
