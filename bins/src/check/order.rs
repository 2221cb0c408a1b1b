//! Check 4, Order: every account's outbox sequence is gapless from 1, no consumer is
//! ahead of the outbox, and no held gap is older than the alarm.

use std::collections::BTreeMap;
use std::time::Duration;

use super::db::Db;
use super::report::{Check, Part};

const GAPLESS: &str = "every account's outbox sequence gapless from 1";
const MARKS: &str = "consumer high-water marks never above the outbox's";
const HELD: &str = "no held gap older than the alarm";

pub async fn check(outbox: &dyn Db, consumer: Option<&dyn Db>, alarm: Duration) -> Check {
    let highest = outbox.max_sequences().await;
    let mut parts = vec![gapless(outbox, highest.as_ref().ok().map(BTreeMap::len)).await];
    match (consumer, highest) {
        (None, _) => {
            let why = "no --consumer-database given";
            parts.push(Part::not_checked(MARKS, why));
            parts.push(Part::not_checked(HELD, why));
        }
        (Some(db), Ok(highest)) => {
            parts.push(marks(db, &highest).await);
            parts.push(held(db, alarm).await);
        }
        (Some(db), Err(e)) => {
            parts.push(Part::fail(
                MARKS,
                format!("cannot read the outbox's sequences: {e}"),
                "fix the outbox database and check again",
            ));
            parts.push(held(db, alarm).await);
        }
    }
    Check::new(4, "Order", parts)
}

async fn gapless(db: &dyn Db, accounts: Option<usize>) -> Part {
    let (holes, dropped) = match (db.sequence_holes().await, db.retention_dropped().await) {
        (Ok(holes), Ok(dropped)) => (holes, dropped),
        (Err(e), _) | (_, Err(e)) => {
            return Part::fail(
                GAPLESS,
                format!("cannot read the sequences: {e}"),
                "fix the outbox database and check again",
            );
        }
    };
    // Below an account's lowest stored number is retention's, once it dropped periods.
    let holes: Vec<_> = holes
        .into_iter()
        .filter(|h| !(dropped && h.from == 1))
        .collect();
    if holes.is_empty() {
        return Part::pass(
            GAPLESS,
            format!(
                "{} account(s), no number missing{}",
                accounts.unwrap_or(0),
                if dropped {
                    " (from the oldest period retention kept)"
                } else {
                    ""
                }
            ),
        );
    }
    let shown: Vec<String> = holes
        .iter()
        .take(10)
        .map(|h| {
            if h.from == h.to {
                format!("{} is missing sequence {}", h.account, h.from)
            } else {
                format!("{} is missing sequences {}..={}", h.account, h.from, h.to)
            }
        })
        .collect();
    Part::fail(
        GAPLESS,
        format!(
            "{}{}",
            shown.join("; "),
            if holes.len() > 10 {
                format!("; and {} more", holes.len() - 10)
            } else {
                String::new()
            }
        ),
        "a missing number is an event that was lost or enqueued outside the caller's transaction; every consumer holds the account's later events until it arrives: find it, never skip it",
    )
}

async fn marks(db: &dyn Db, highest: &BTreeMap<String, u64>) -> Part {
    let marks = match db.high_water_marks().await {
        Ok(marks) => marks,
        Err(e) => {
            return Part::fail(
                MARKS,
                format!("cannot read inbox_accounts: {e}"),
                "fix the consumer database and check again",
            );
        }
    };
    let ahead: Vec<String> = marks
        .iter()
        .filter_map(|m| {
            let outbox = highest.get(&m.account).copied().unwrap_or(0);
            (m.last_applied > outbox).then(|| {
                format!(
                    "consumer {} applied {} up to {}, the outbox's highest is {outbox}",
                    m.consumer, m.account, m.last_applied
                )
            })
        })
        .collect();
    if ahead.is_empty() {
        return Part::pass(
            MARKS,
            format!(
                "{} consumer account mark(s), none above the outbox",
                marks.len()
            ),
        );
    }
    Part::fail(
        MARKS,
        ahead.join("; "),
        "the consumer saw sequences this outbox never issued: it is fed by another outbox, or the outbox was restored from an older copy and will reissue numbers the consumer drops as stale; stop and reconcile before the batch",
    )
}

async fn held(db: &dyn Db, alarm: Duration) -> Part {
    let gaps = match db.held_gaps().await {
        Ok(gaps) => gaps,
        Err(e) => {
            return Part::fail(
                HELD,
                format!("cannot read inbox_held: {e}"),
                "fix the consumer database and check again",
            );
        }
    };
    let now = chrono::Utc::now();
    let mut old = Vec::new();
    for gap in &gaps {
        let age = (now - gap.held_at).to_std().unwrap_or_default();
        if age > alarm {
            old.push(format!(
                "consumer {}, {}: sequence {} has been missing for {}s (held since {}, sequence {} waits)",
                gap.consumer,
                gap.account,
                gap.last_applied + 1,
                age.as_secs(),
                gap.held_at.format("%Y-%m-%dT%H:%M:%SZ"),
                gap.lowest_held
            ));
        }
    }
    if old.is_empty() {
        return Part::pass(
            HELD,
            format!(
                "{} held gap(s), none older than {}s",
                gaps.len(),
                alarm.as_secs()
            ),
        );
    }
    Part::fail(
        HELD,
        old.join("; "),
        "a message is missing upstream: fill it from the ledger's log (`outbox fanout catch-up`) and let the inbox release what it holds; never skip the gap",
    )
}
