//! Steps 1, 2, 3, 4 and 6 of the probe: what the ledger answers to the payload's own
//! bytes under a fresh key, the same key again, one key twice at once, the same key
//! with a changed body, and the reference under a new key.

use std::collections::HashMap;

use outbox_core::{EventId, Result};

use super::ledger::{Answer, ProbeLedger};
use super::payload::{ProbePayload, Request};
use super::report::{StepResult, Verdict};

/// The probe's ledgers on one server: steps 1, 2, 4 and 6 share `main`; step 3
/// needs one where the payload's reference is still free.
#[derive(Debug, Clone)]
pub struct Ledgers {
    pub client: ProbeLedger,
    pub main: String,
    pub concurrent: String,
}

/// Transactions the probe posted per event id, so a revert finds its target.
#[derive(Debug, Default)]
pub struct Posted {
    main: HashMap<EventId, u64>,
    concurrent: HashMap<EventId, u64>,
}

fn fresh_key() -> String {
    format!("outbox-probe-{}", EventId::new())
}

/// Where a request goes in one ledger: `transactions`, or the revert of the
/// transaction the target posted there (`None`: the target was not posted there).
fn segments(request: &Request, targets: &HashMap<EventId, u64>) -> Option<Vec<String>> {
    match request {
        Request::Post { .. } => Some(vec!["transactions".into()]),
        Request::Revert { target, .. } => targets
            .get(target)
            .map(|id| vec!["transactions".into(), id.to_string(), "revert".into()]),
    }
}

async fn send(
    ledgers: &Ledgers,
    ledger: &str,
    segments: &[String],
    key: &str,
    body: &[u8],
) -> Result<Answer> {
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    ledgers
        .client
        .write(ledger, &segments, Some(key), body)
        .await
}

fn list(ids: &[u64]) -> String {
    match ids {
        [] => "no transaction carries the event".into(),
        [one] => format!("1 transaction carries the event ({one})"),
        many => format!("{} transactions carry the event {many:?}", many.len()),
    }
}

/// Runs steps 1, 2, 3, 4 and 6 on `payload`; returns them in order.
///
/// # Errors
/// Only when a ledger cannot be reached; every answer is a step result.
pub async fn idempotency_steps(
    ledgers: &Ledgers,
    payload: &ProbePayload,
    posted: &mut Posted,
) -> Result<Vec<StepResult>> {
    let event = payload.event.event_id;
    let Some(path) = segments(&payload.request, &posted.main) else {
        let why = "not probed: it reverts a payload that was not posted in the probe ledger";
        return Ok([1, 2, 3, 4, 6]
            .map(|step| StepResult::new(step, Verdict::NotApplicable, why))
            .into());
    };
    let body = payload.body();
    let main = ledgers.main.as_str();
    let mut steps = Vec::new();

    // 1. A fresh key: a new transaction.
    let key = fresh_key();
    let first = send(ledgers, main, &path, &key, body).await?;
    let carrying = ledgers.client.carrying(main, event).await?;
    let original = match (&first, first.transaction_id) {
        (a, Some(id)) if a.is_new() && carrying == [id] => {
            steps.push(
                StepResult::new(1, Verdict::Pass, format!("{a}: a new transaction"))
                    .answers(vec![first.clone()])
                    .transactions(carrying),
            );
            id
        }
        (a, _) if !a.is_success() && a.status < 500 => {
            let code = a.code().unwrap_or("no error code");
            steps.push(
                StepResult::new(
                    1,
                    Verdict::Refused,
                    format!(
                        "the ledger refused the payload: {a}{}",
                        a.error_message
                            .as_deref()
                            .map(|m| format!(" ({m})"))
                            .unwrap_or_default()
                    ),
                )
                .answers(vec![first.clone()]),
            );
            let skipped = format!("skipped: the ledger refused the payload ({code})");
            steps.extend([2, 3, 4, 6].map(|n| StepResult::new(n, Verdict::Skipped, &skipped)));
            return Ok(steps);
        }
        (a, _) => {
            steps.push(
                StepResult::new(
                    1,
                    Verdict::Fail,
                    format!("expected a new transaction, got {a}; {}", list(&carrying)),
                )
                .answers(vec![first.clone()])
                .transactions(carrying),
            );
            let skipped = "skipped: the first post did not give one new transaction";
            steps.extend([2, 3, 4, 6].map(|n| StepResult::new(n, Verdict::Skipped, skipped)));
            return Ok(steps);
        }
    };
    posted.main.insert(event, original);

    // 2. The same request again: the original, as a hit, and nothing new.
    let again = send(ledgers, main, &path, &key, body).await?;
    let after = ledgers.client.carrying(main, event).await?;
    let verdict = if again.is_hit() && again.transaction_id == Some(original) && after == [original]
    {
        (Verdict::Pass, format!("{again}; still {}", list(&after)))
    } else if again.is_new() {
        (
            Verdict::Fail,
            format!(
                "the replay was posted as a new transaction ({again}): the ledger does not honour Idempotency-Key, so every relay re-send after a crash pays out again; {}",
                list(&after)
            ),
        )
    } else if let Some(guard) = second_guard(&payload.request, again.code()) {
        (
            Verdict::Fail,
            format!(
                "the replay was answered {again} instead of transaction {original} with Idempotency-Hit: the key was ignored and only {guard}; {}",
                list(&after)
            ),
        )
    } else {
        (
            Verdict::Fail,
            format!(
                "expected Idempotency-Hit: true with transaction {original}, got {again}; {}",
                list(&after)
            ),
        )
    };
    steps.push(
        StepResult::new(2, verdict.0, verdict.1)
            .answers(vec![again])
            .transactions(after),
    );

    // 3. Two identical requests with another fresh key at the same moment.
    steps.push(concurrent_step(ledgers, payload, posted).await?);

    // 4. The same key with the body changed: refused, nothing posted.
    let (changed, what) = payload.changed_body()?;
    let mismatch = send(ledgers, main, &path, &key, &changed).await?;
    let after = ledgers.client.carrying(main, event).await?;
    let verdict = if mismatch.status == 400
        && mismatch.code() == Some("VALIDATION")
        && after == [original]
    {
        (
            Verdict::Pass,
            format!(
                "{what}: {mismatch} (idempotency mismatch), nothing posted; {}",
                list(&after)
            ),
        )
    } else if mismatch.is_hit() {
        (
            Verdict::Fail,
            format!(
                "{what}: answered {mismatch}, the stored transaction: the ledger does not compare the body under the key, so a payload changed after a crash would be dropped silently instead of refused"
            ),
        )
    } else if mismatch.is_new() {
        (
            Verdict::Fail,
            format!(
                "{what}: the changed body was posted as a new transaction ({mismatch}); {}",
                list(&after)
            ),
        )
    } else {
        (
            Verdict::Fail,
            format!(
                "{what}: expected 400 VALIDATION (idempotency mismatch), got {mismatch}; {}",
                list(&after)
            ),
        )
    };
    steps.push(
        StepResult::new(4, verdict.0, verdict.1)
            .answers(vec![mismatch])
            .transactions(after),
    );

    // 6. The reference (for a revert: the reverted transaction) under a new key.
    steps.push(second_line_of_defence(ledgers, payload, &path, original).await?);
    Ok(steps)
}

/// What stopped a duplicate when the key did not: the reference's 409, or the
/// ledger's refusal to revert a transaction twice.
fn second_guard(request: &Request, code: Option<&str>) -> Option<&'static str> {
    match (request, code) {
        (Request::Post { .. }, Some("CONFLICT")) => {
            Some("the payload's reference stopped a second payout")
        }
        (Request::Revert { .. }, Some("ALREADY_REVERT")) => {
            Some("the ledger's refusal to revert twice stopped a second revert")
        }
        _ => None,
    }
}

async fn concurrent_step(
    ledgers: &Ledgers,
    payload: &ProbePayload,
    posted: &mut Posted,
) -> Result<StepResult> {
    let event = payload.event.event_id;
    let ledger = ledgers.concurrent.as_str();
    let Some(path) = segments(&payload.request, &posted.concurrent) else {
        return Ok(StepResult::new(
            3,
            Verdict::NotApplicable,
            "not probed: its target was not posted in the step-3 ledger",
        ));
    };
    let key = fresh_key();
    let body = payload.body();
    let (a, b) = tokio::join!(
        send(ledgers, ledger, &path, &key, body),
        send(ledgers, ledger, &path, &key, body)
    );
    let answers = vec![a?, b?];
    let after = ledgers.client.carrying(ledger, event).await?;
    let shown = format!("{} / {}", answers[0], answers[1]);
    let result = match after.as_slice() {
        [one] => {
            posted.concurrent.insert(event, *one);
            // The loser may see the key as a hit, or (Formance) hit the reference
            // index first and answer 409: either way nothing was posted twice.
            StepResult::new(3, Verdict::Pass, format!("{shown}; {}", list(&after)))
        }
        [] => StepResult::new(
            3,
            Verdict::Fail,
            format!("neither request was posted: {shown}"),
        ),
        _ => StepResult::new(
            3,
            Verdict::Fail,
            format!(
                "two identical requests racing under one key were both posted: {shown}; {}",
                list(&after)
            ),
        ),
    };
    Ok(result.answers(answers).transactions(after))
}

async fn second_line_of_defence(
    ledgers: &Ledgers,
    payload: &ProbePayload,
    path: &[String],
    original: u64,
) -> Result<StepResult> {
    let event = payload.event.event_id;
    let main = ledgers.main.as_str();
    let expected = match &payload.request {
        Request::Post {
            reference: None, ..
        } => {
            return Ok(StepResult::new(
                6,
                Verdict::NotApplicable,
                "the payload has no reference: only the idempotency key stands between a re-send and a second payout",
            ));
        }
        Request::Post { .. } => (409, "CONFLICT"),
        // A reverted transaction cannot be reverted again: a revert's "reference".
        Request::Revert { .. } => (400, "ALREADY_REVERT"),
    };
    let answer = send(ledgers, main, path, &fresh_key(), payload.body()).await?;
    let after = ledgers.client.carrying(main, event).await?;
    let result = if answer.status == expected.0
        && answer.code() == Some(expected.1)
        && after == [original]
    {
        StepResult::new(
            6,
            Verdict::Pass,
            format!(
                "{answer}: {}; nothing posted",
                if expected.1 == "CONFLICT" {
                    "the reference is already used"
                } else {
                    "the transaction is already reverted"
                }
            ),
        )
    } else {
        StepResult::new(
            6,
            Verdict::Fail,
            format!(
                "expected {} {}, got {answer}; {}",
                expected.0,
                expected.1,
                list(&after)
            ),
        )
    };
    Ok(result.answers(vec![answer]).transactions(after))
}
