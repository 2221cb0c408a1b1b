//! Check 2, Relay: progress lives apart from the events, and the ledger answers the
//! most recent stored payloads (their exact bytes) as the relay needs: steps 1–4 and 6
//! of the probe, in a fresh probe ledger, never the production one.

use std::collections::BTreeSet;

use super::db::Db;
use super::report::{Check, Part};
use crate::probe::{self, Funding, Posted, ProbePayload, Session, Target, Verdict};

/// The outbox row's own columns on either store (`txid` is PostgreSQL's): anything
/// more is state that somebody means to update.
const EVENT_COLUMNS: [&str; 7] = [
    "position",
    "event_id",
    "account",
    "sequence",
    "payload",
    "created_at",
    "txid",
];
const FANOUT_COLUMNS: [&str; 12] = [
    "position",
    "dedup_key",
    "instruction_id",
    "account",
    "sequence",
    "kind",
    "ledger",
    "ledger_tx_id",
    "traceparent",
    "tracestate",
    "payload",
    "received_at",
];

pub async fn check(db: &dyn Db, fanout: Option<&dyn Db>, ledger: &Target, sample: usize) -> Check {
    let mut parts = vec![
        apart(
            db,
            "relay progress in relay_cursors, not on outbox_events",
            "outbox_events",
            &EVENT_COLUMNS,
            "relay_cursors",
        )
        .await,
    ];
    if let Some(fanout) = fanout {
        parts.push(
            apart(
                fanout,
                "fan-out progress in fanout_cursors, not on fanout_messages",
                "fanout_messages",
                &FANOUT_COLUMNS,
                "fanout_cursors",
            )
            .await,
        );
    }
    parts.push(idempotency(db, ledger, sample).await);
    Check::new(2, "Relay", parts)
}

async fn apart(db: &dyn Db, control: &str, rows: &str, own: &[&str], cursors: &str) -> Part {
    let tables = match db.tables().await {
        Ok(tables) => tables,
        Err(e) => {
            return Part::fail(
                control,
                format!("cannot list the tables: {e}"),
                "fix the database and check again",
            );
        }
    };
    if !tables.contains(rows) {
        return Part::fail(
            control,
            format!("{} has no {rows} table", db.name()),
            "point the check at the right database (and run `outbox migrate` on it)",
        );
    }
    let columns = match db.columns(rows).await {
        Ok(columns) => columns,
        Err(e) => {
            return Part::fail(
                control,
                format!("cannot read the columns of {rows}: {e}"),
                "fix the database and check again",
            );
        }
    };
    let own: BTreeSet<&str> = own.iter().copied().collect();
    let extra: Vec<&str> = columns
        .iter()
        .map(String::as_str)
        .filter(|c| !own.contains(c))
        .collect();
    if !extra.is_empty() {
        return Part::fail(
            control,
            format!(
                "{rows} has column(s) the outbox never writes: {} — progress (a sent flag, a status, a cursor) kept on the rows means updating them",
                extra.join(", ")
            ),
            format!(
                "keep progress in {cursors} only and drop the extra column(s); the rows stay as they were written"
            ),
        );
    }
    if !tables.contains(cursors) {
        return Part::fail(
            control,
            format!("there is no {cursors} table: progress is not kept apart"),
            "run `outbox migrate` on the database, and keep progress in its cursor table",
        );
    }
    Part::pass(
        control,
        format!(
            "{rows} holds only its own columns ({}); progress is in {cursors}",
            columns.join(", ")
        ),
    )
}

async fn idempotency(db: &dyn Db, target: &Target, sample: usize) -> Part {
    let control = "the ledger's idempotency on the most recent stored payloads";
    let fail = |detail: String| {
        Part::fail(
            control,
            detail,
            "fix what stops the probe (see the error) and check again; until then nothing shows that a re-send is harmless",
        )
    };
    let mut events = match db.recent_events(sample).await {
        Ok(events) => events,
        Err(e) => return fail(format!("cannot read the outbox: {e}")),
    };
    if events.is_empty() {
        return Part::not_checked(control, "the outbox holds no payload yet");
    }
    // Oldest first, so a revert finds the transaction its target posted.
    events.reverse();
    let mut payloads = Vec::new();
    for event in events {
        let label = format!("position {}", event.position);
        match ProbePayload::new(label, None, event) {
            Ok(payload) => payloads.push(payload),
            Err(e) => return fail(format!("a stored payload is not a ledger command: {e}")),
        }
    }
    let session = match Session::open(target, false).await {
        Ok(session) => session,
        Err(e) => return fail(format!("cannot open a probe ledger: {e}")),
    };
    let part = probe_sample(&session, &payloads, control).await;
    session.close().await;
    part.unwrap_or_else(|e| fail(format!("the probe stopped: {e}")))
}

async fn probe_sample(
    session: &Session,
    payloads: &[ProbePayload],
    control: &str,
) -> outbox_core::Result<Part> {
    let mut funding = Funding::default();
    for payload in payloads {
        funding.add(&payload.label, &payload.command);
    }
    session.fund(&funding).await?;
    let mut posted = Posted::default();
    let (mut probed, mut refused, mut failures) = (0, Vec::new(), Vec::new());
    for payload in payloads {
        let steps = probe::idempotency_steps(&session.ledgers, payload, &mut posted).await?;
        if steps.iter().any(|s| s.verdict == Verdict::Refused) {
            let code = steps[0].answers.first().and_then(|a| a.error_code.clone());
            refused.push(format!(
                "{} ({})",
                payload.label,
                code.unwrap_or_else(|| "no code".into())
            ));
            continue;
        }
        for step in steps.iter().filter(|s| s.verdict == Verdict::Fail) {
            failures.push(format!(
                "{} ({} {}): step {}: {}",
                payload.label,
                payload.event.account,
                payload.event.event_id,
                step.step,
                step.detail
            ));
        }
        if steps
            .iter()
            .filter(|s| s.step <= 4)
            .all(|s| s.verdict == Verdict::Pass)
        {
            probed += 1;
        }
    }
    let refusals = if refused.is_empty() {
        String::new()
    } else {
        format!("; refused by the probe ledger: {}", refused.join(", "))
    };
    let place = format!(
        "in fresh probe ledgers {} and {} on {}",
        session.ledgers.main, session.ledgers.concurrent, session.target
    );
    if !failures.is_empty() {
        return Ok(Part::fail(
            control,
            format!("{place}: {}{refusals}", failures.join("; ")),
            "hold the batch: this ledger does not keep one transaction per idempotency key (run `outbox probe` on the batch for all six steps); a retry loop is not a control",
        ));
    }
    if probed == 0 {
        return Ok(Part::not_checked(
            control,
            format!(
                "none of the {} most recent payloads could be probed {place}{refusals}",
                payloads.len()
            ),
        ));
    }
    Ok(Part::pass(
        control,
        format!(
            "{probed} of the {} most recent payloads {place}: a fresh key posts one transaction, the same request replays it (Idempotency-Hit), two at once post one, a changed body is refused, the reference is guarded{refusals}",
            payloads.len()
        ),
    ))
}
