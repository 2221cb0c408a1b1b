//! The ledger conformance suite: what every `outbox_core::Ledger` adapter must do with
//! the real ledger behind it (the contract on the trait, docs/ADAPTERS.md#ledger).
//! See [`crate::ledger_suite!`] for running it from an adapter's own crate.
//!
//! Bodies are built as the relay stores them (`Payload::encode`, then the body split
//! out), so the adapter sees exactly the bytes it will see in production. What a case
//! needs beyond the trait goes through [`LedgerHarness`].

use std::time::Duration;

use chrono::Utc;
use outbox_core::dispatch::notice::{rejection_notice_key, rejection_notice_metadata};
use outbox_core::{
    Account, Amount, Asset, Balances, BulkItem, ErrorKind, EventId, Ledger, LedgerCommand,
    Metadata, OUTBOX_ACCOUNT_KEY, OUTBOX_EVENT_ID_KEY, OUTBOX_SEQUENCE_KEY, OutboxEvent, Payload,
    Position, PostBody, PostCommand, PostOutcome, Posting, Result, Retry, RevertCommand,
    RunOutcome,
};

use crate::ledger_harness::{LedgerFault, LedgerHarness};

/// The asset of every case but the balances one.
pub const USD: &str = "USD/2";

/// `address` as an account; panics on an invalid one (suite addresses are valid).
pub fn account(address: &str) -> Account {
    Account::parse(address).expect("valid account address")
}

/// `amount` of `asset` from `source` to `destination`.
pub fn posting(source: &str, destination: &str, amount: u64, asset: &str) -> Posting {
    Posting {
        source: account(source),
        destination: account(destination),
        amount: Amount::new(amount),
        asset: Asset::parse(asset).expect("valid asset"),
    }
}

/// The body bytes the relay sends for `event` carrying `command` on aggregate
/// `aggregate` at `sequence`: the payload encoded at enqueue, split.
pub fn post_body(event: EventId, aggregate: &str, sequence: u64, command: PostCommand) -> Vec<u8> {
    let payload = Payload::encode(
        event,
        &account(aggregate),
        sequence,
        &LedgerCommand::Post(command),
    )
    .expect("a valid command encodes");
    let (_, body) = payload.split().expect("an encoded payload splits");
    body.to_vec()
}

/// The body of a plain transfer in [`USD`], on the aggregate of its non-`world` side.
pub fn transfer(event: EventId, source: &str, destination: &str, amount: u64) -> Vec<u8> {
    let aggregate = if source == "world" {
        destination
    } else {
        source
    };
    post_body(
        event,
        aggregate,
        1,
        PostCommand {
            body: PostBody::Postings(vec![posting(source, destination, amount, USD)]),
            reference: None,
            metadata: Metadata::new(),
        },
    )
}

fn usd() -> Asset {
    Asset::parse(USD).expect("valid asset")
}

fn accepted(outcome: Result<PostOutcome>, what: &str) -> u64 {
    match outcome {
        Ok(PostOutcome::Accepted { transaction_id }) => transaction_id,
        other => panic!("{what}: expected Accepted, got {other:?}"),
    }
}

fn rejected(outcome: Result<PostOutcome>, what: &str) -> String {
    match outcome {
        Ok(PostOutcome::Rejected { code, .. }) => code,
        other => panic!("{what}: expected Rejected, got {other:?}"),
    }
}

fn skip(case: &str, why: &str) {
    eprintln!("skipped {case}: {why}");
}

async fn committed_id(ledger: &impl Ledger, event: EventId) -> Option<u64> {
    ledger
        .transaction_by_event_id(event)
        .await
        .expect("lookup by event id")
        .map(|tx| tx.id)
}

async fn balances(ledger: &impl Ledger, address: &str) -> Balances {
    ledger
        .aggregate_balances(address)
        .await
        .unwrap_or_else(|e| panic!("aggregate balances of {address}: {e}"))
}

async fn usd_balance(ledger: &impl Ledger, address: &str) -> Option<i128> {
    balances(ledger, address).await.get(&usd()).copied()
}

fn items(bodies: &[(EventId, Vec<u8>)]) -> Vec<BulkItem<'_>> {
    bodies
        .iter()
        .map(|(key, body)| BulkItem { key: *key, body })
        .collect()
}

/// Consecutive payouts of one account to `banks:clearing`, as the relay sends a run.
fn payouts(from: &str, amounts: &[u64]) -> Vec<(EventId, Vec<u8>)> {
    amounts
        .iter()
        .enumerate()
        .map(|(i, amount)| {
            let event = EventId::new();
            let body = post_body(
                event,
                from,
                i as u64 + 1,
                PostCommand {
                    body: PostBody::Postings(vec![posting(from, "banks:clearing", *amount, USD)]),
                    reference: None,
                    metadata: Metadata::new(),
                },
            );
            (event, body)
        })
        .collect()
}

/// Whether the adapter takes runs of `len`; says why not when it does not.
fn runs_of(h: &impl LedgerHarness, case: &str, len: usize) -> bool {
    let capabilities = h.ledger().capabilities();
    if !capabilities.ordered_runs {
        skip(case, "the adapter declares no ordered runs");
        return false;
    }
    if capabilities.max_bulk < len {
        skip(
            case,
            &format!("the case posts runs of {len}, above max_bulk"),
        );
        return false;
    }
    true
}

/// The same key and body posted three times: one transaction, one movement.
pub async fn a_repeated_post_creates_one_transaction(h: &impl LedgerHarness) {
    let ledger = h.ledger();
    let event = EventId::new();
    let body = transfer(event, "world", "merchants:1:available", 48_500_000);
    let first = accepted(ledger.post(event, &body).await, "the first post");
    for _ in 0..2 {
        assert_eq!(
            ledger.post(event, &body).await.expect("a repeat"),
            PostOutcome::Replayed {
                transaction_id: first
            },
            "a repeat of the same key and body is a replay"
        );
    }
    let tx = ledger
        .transaction_by_event_id(event)
        .await
        .expect("lookup")
        .expect("the post is in the ledger");
    assert_eq!(tx.id, first);
    assert_eq!(tx.metadata[OUTBOX_EVENT_ID_KEY], event.to_string());
    assert_eq!(
        tx.postings,
        [posting("world", "merchants:1:available", 48_500_000, USD)]
    );
    assert_eq!(
        usd_balance(ledger, "merchants:1:available").await,
        Some(48_500_000),
        "exactly one movement"
    );
    assert_eq!(usd_balance(ledger, "world").await, Some(-48_500_000));
}

/// A replay answers the id of the first post, not of the latest transaction.
pub async fn a_replay_answers_the_original_transaction_id(h: &impl LedgerHarness) {
    let ledger = h.ledger();
    let posted: Vec<(EventId, Vec<u8>, u64)> = {
        let mut posted = Vec::new();
        for i in 0..3u64 {
            let event = EventId::new();
            let body = transfer(event, "world", &format!("merchants:{i}:available"), 10 + i);
            let id = accepted(ledger.post(event, &body).await, "a first post");
            posted.push((event, body, id));
        }
        posted
    };
    let ids: Vec<u64> = posted.iter().map(|(_, _, id)| *id).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(unique, ids, "three posts, three transactions");
    // Oldest first: the answer must be the stored one, not the newest id.
    for (event, body, id) in &posted {
        assert_eq!(
            ledger.post(*event, body).await.expect("a repeat"),
            PostOutcome::Replayed {
                transaction_id: *id
            }
        );
    }
}

/// The same key with another body: a permanent mismatch, the original untouched.
pub async fn the_same_key_with_another_body_is_a_permanent_mismatch(h: &impl LedgerHarness) {
    let ledger = h.ledger();
    let event = EventId::new();
    let body = transfer(event, "world", "merchants:1:available", 100);
    let first = accepted(ledger.post(event, &body).await, "the first post");

    let changed = transfer(event, "world", "merchants:1:available", 200);
    let err = ledger
        .post(event, &changed)
        .await
        .expect_err("another body under a used key is an error");
    assert_eq!(err.kind(), &ErrorKind::IdempotencyMismatch, "{err}");
    assert_eq!(err.retry(), Retry::Permanent, "{err}");

    let tx = ledger
        .transaction_by_event_id(event)
        .await
        .expect("lookup")
        .expect("the first post stays");
    assert_eq!(tx.id, first);
    assert_eq!(
        tx.postings,
        [posting("world", "merchants:1:available", 100, USD)]
    );
    assert_eq!(
        usd_balance(ledger, "merchants:1:available").await,
        Some(100)
    );
    // The key still holds the first body.
    assert_eq!(
        ledger
            .post(event, &body)
            .await
            .expect("the first body again"),
        PostOutcome::Replayed {
            transaction_id: first
        }
    );
}

/// An overdraft is refused, and the refusal keeps no key: sent again it is evaluated
/// again, and once the account is funded it commits.
pub async fn insufficient_funds_is_rejected_and_keeps_no_key(h: &impl LedgerHarness) {
    let ledger = h.ledger();
    let code = h.insufficient_funds_code().to_owned();
    let event = EventId::new();
    let body = transfer(
        event,
        "merchants:1:available",
        "merchants:1:payouts:pending",
        48_500_000,
    );
    assert_eq!(
        rejected(ledger.post(event, &body).await, "an overdraft"),
        code
    );
    assert_eq!(
        committed_id(ledger, event).await,
        None,
        "a refusal commits nothing"
    );
    // Evaluated again, not replayed: still short of funds, still refused.
    assert_eq!(
        rejected(ledger.post(event, &body).await, "the overdraft again"),
        code
    );

    h.fund(&account("merchants:1:available"), &usd(), 48_500_000)
        .await;
    let id = accepted(
        ledger.post(event, &body).await,
        "the refused body once funded",
    );
    assert_eq!(committed_id(ledger, event).await, Some(id));
    assert_eq!(
        usd_balance(ledger, "merchants:1:payouts:pending").await,
        Some(48_500_000)
    );
}

/// Every other refusal the harness names: `Rejected` with its code, nothing
/// committed, evaluated again when re-sent, and the key free for another body.
pub async fn every_refusal_the_ledger_names_is_rejected_and_keeps_no_key(h: &impl LedgerHarness) {
    let refusals = h.refusals().await;
    if refusals.is_empty() {
        skip(
            "every_refusal_the_ledger_names_is_rejected_and_keeps_no_key",
            "the harness names no refusal besides insufficient funds",
        );
        return;
    }
    let ledger = h.ledger();
    for refusal in refusals {
        let what = format!("the {} refusal", refusal.code);
        let outcome = ledger.post(refusal.event, &refusal.body).await;
        assert_eq!(rejected(outcome, &what), refusal.code);
        assert_eq!(committed_id(ledger, refusal.event).await, None, "{what}");
        let again = ledger.post(refusal.event, &refusal.body).await;
        assert_eq!(rejected(again, &what), refusal.code, "{what} re-sent");
        // A kept key would make this a mismatch.
        let other = transfer(refusal.event, "world", "merchants:1:available", 1);
        let id = accepted(
            ledger.post(refusal.event, &other).await,
            &format!("another body under the key of {what}"),
        );
        assert_eq!(committed_id(ledger, refusal.event).await, Some(id));
    }
}

/// One bulk call with a refusal among credits: one result per item, in item order,
/// and the refusal stops none of the others.
pub async fn bulk_items_are_independent(h: &impl LedgerHarness) {
    let ledger = h.ledger();
    let max = ledger.capabilities().max_bulk;
    if max < 2 {
        skip(
            "bulk_items_are_independent",
            "the adapter declares no bulk (max_bulk below 2)",
        );
        return;
    }
    let n = max.min(5);
    let refused_at = (n - 1) / 2;
    let bodies: Vec<(EventId, Vec<u8>)> = (0..n)
        .map(|i| {
            let event = EventId::new();
            let body = if i == refused_at {
                transfer(event, "merchants:empty:available", "banks:clearing", 1)
            } else {
                transfer(
                    event,
                    "world",
                    &format!("merchants:{i}:available"),
                    100 + i as u64,
                )
            };
            (event, body)
        })
        .collect();

    let results = ledger.post_bulk(&items(&bodies)).await.expect("bulk call");
    assert_eq!(results.len(), n, "one result per item");
    let mut ids = Vec::new();
    for (i, (result, (event, _))) in results.into_iter().zip(&bodies).enumerate() {
        if i == refused_at {
            assert_eq!(
                rejected(result, "the overdraft in the bulk"),
                h.insufficient_funds_code()
            );
            assert_eq!(committed_id(ledger, *event).await, None);
            continue;
        }
        let id = accepted(result, &format!("bulk item {i}"));
        assert_eq!(
            committed_id(ledger, *event).await,
            Some(id),
            "result {i} is item {i}'s transaction"
        );
        assert_eq!(
            usd_balance(ledger, &format!("merchants:{i}:available")).await,
            Some(100 + i as i128)
        );
        ids.push(id);
    }
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "one transaction per item: {ids:?}");
}

/// In a bulk call, an element already posted answers its original id, and another
/// body under a used key is that element's permanent mismatch.
pub async fn a_bulk_replay_answers_the_original_id_and_a_bulk_mismatch_is_permanent(
    h: &impl LedgerHarness,
) {
    let ledger = h.ledger();
    if ledger.capabilities().max_bulk < 3 {
        skip(
            "a_bulk_replay_answers_the_original_id_and_a_bulk_mismatch_is_permanent",
            "the case posts a bulk of 3, above max_bulk",
        );
        return;
    }
    let (a, b, c) = (EventId::new(), EventId::new(), EventId::new());
    let body_a = transfer(a, "world", "merchants:1:available", 100);
    let body_b = transfer(b, "world", "merchants:2:available", 200);
    let id_a = accepted(ledger.post(a, &body_a).await, "post a");
    let id_b = accepted(ledger.post(b, &body_b).await, "post b");

    let changed_b = transfer(b, "world", "merchants:2:available", 999);
    let body_c = transfer(c, "world", "merchants:3:available", 300);
    let bodies = vec![(a, body_a), (b, changed_b), (c, body_c)];
    let mut results = ledger.post_bulk(&items(&bodies)).await.expect("bulk call");
    assert_eq!(results.len(), 3);
    let third = results.pop().expect("three results");
    let second = results.pop().expect("three results");
    let first = results.pop().expect("three results");

    // A bulk answer may have no hit flag: either reading, with the original id.
    match first {
        Ok(PostOutcome::Accepted { transaction_id } | PostOutcome::Replayed { transaction_id }) => {
            assert_eq!(
                transaction_id, id_a,
                "the replay answers the first post's id"
            );
        }
        other => panic!("the replayed element: {other:?}"),
    }
    let err = second.expect_err("the changed body is an error");
    assert_eq!(err.kind(), &ErrorKind::IdempotencyMismatch, "{err}");
    assert_eq!(err.retry(), Retry::Permanent, "{err}");
    let id_c = accepted(third, "the new element");
    assert_eq!(committed_id(ledger, c).await, Some(id_c));
    assert_eq!(committed_id(ledger, b).await, Some(id_b));
    assert_eq!(
        usd_balance(ledger, "merchants:2:available").await,
        Some(200)
    );
    assert_eq!(
        usd_balance(ledger, "merchants:1:available").await,
        Some(100)
    );
}

/// An ordered run commits every element, in item order. Without ordered runs,
/// `post_run` answers `Unsupported` and commits nothing.
pub async fn a_run_commits_every_element_in_order(h: &impl LedgerHarness) {
    let ledger = h.ledger();
    if !ledger.capabilities().ordered_runs {
        let bodies = payouts("merchants:hot:available", &[1, 2]);
        let err = ledger
            .post_run(&items(&bodies))
            .await
            .expect_err("post_run without ordered runs");
        assert_eq!(err.kind(), &ErrorKind::Unsupported, "{err}");
        for (event, _) in &bodies {
            assert_eq!(committed_id(ledger, *event).await, None);
        }
    }
    if !runs_of(h, "a_run_commits_every_element_in_order", 4) {
        return;
    }
    h.fund(&account("merchants:hot:available"), &usd(), 1_000)
        .await;
    let bodies = payouts("merchants:hot:available", &[100, 200, 300, 400]);
    let outcome = ledger.post_run(&items(&bodies)).await.expect("run call");
    let RunOutcome::Committed(ids) = outcome else {
        panic!("expected Committed, got {outcome:?}")
    };
    assert_eq!(ids.len(), 4, "one id per element");
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "committed in item order: {ids:?}"
    );
    for ((event, _), id) in bodies.iter().zip(&ids) {
        assert_eq!(committed_id(ledger, *event).await, Some(*id));
    }
    assert_eq!(
        usd_balance(ledger, "merchants:hot:available").await,
        Some(0)
    );
    assert_eq!(usd_balance(ledger, "banks:clearing").await, Some(1_000));
}

/// A refusal inside a run rolls the whole run back, names the element, and keeps
/// no element's key.
pub async fn a_refusal_inside_a_run_rolls_it_back_and_keeps_no_key(h: &impl LedgerHarness) {
    if !runs_of(
        h,
        "a_refusal_inside_a_run_rolls_it_back_and_keeps_no_key",
        4,
    ) {
        return;
    }
    let ledger = h.ledger();
    h.fund(&account("merchants:hot:available"), &usd(), 100)
        .await;
    // The third payout overdraws: nothing of the run may stay.
    let bodies = payouts("merchants:hot:available", &[30, 30, 60, 10]);
    let outcome = ledger.post_run(&items(&bodies)).await.expect("run call");
    let RunOutcome::RolledBack { index, reason } = outcome else {
        panic!("expected RolledBack, got {outcome:?}")
    };
    assert_eq!(index, 2, "the element that overdrew");
    assert!(
        reason.starts_with(h.insufficient_funds_code()),
        "the reason starts with the ledger's code: {reason}"
    );
    for (event, _) in &bodies {
        assert_eq!(committed_id(ledger, *event).await, None);
    }
    assert_eq!(
        usd_balance(ledger, "merchants:hot:available").await,
        Some(100)
    );
    // The first element's key was not kept: sent alone, it is a first post.
    let (event, body) = &bodies[0];
    accepted(ledger.post(*event, body).await, "the first element alone");
}

/// A run whose first element was posted before answers that element's original id
/// and moves it once.
pub async fn a_run_replays_an_element_already_posted(h: &impl LedgerHarness) {
    if !runs_of(h, "a_run_replays_an_element_already_posted", 3) {
        return;
    }
    let ledger = h.ledger();
    h.fund(&account("merchants:hot:available"), &usd(), 100)
        .await;
    let bodies = payouts("merchants:hot:available", &[10, 20, 30]);
    let first = accepted(
        ledger.post(bodies[0].0, &bodies[0].1).await,
        "the first element alone",
    );
    let outcome = ledger.post_run(&items(&bodies)).await.expect("run call");
    let RunOutcome::Committed(ids) = outcome else {
        panic!("expected Committed, got {outcome:?}")
    };
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], first, "the posted element answers its original id");
    assert_eq!(
        usd_balance(ledger, "merchants:hot:available").await,
        Some(40)
    );
}

/// A run call that fails is a transient error, and all or nothing: refused before
/// it ran, nothing committed; answer lost after the commit, every element committed.
pub async fn a_failed_run_call_leaves_all_or_nothing(h: &impl LedgerHarness) {
    let case = "a_failed_run_call_leaves_all_or_nothing";
    if !runs_of(h, case, 3) {
        return;
    }
    let ledger = h.ledger();
    h.fund(&account("merchants:hot:available"), &usd(), 1_000)
        .await;
    let bodies = payouts("merchants:hot:available", &[1, 2, 3]);

    let unavailable = LedgerFault::Unavailable {
        retry_after: Duration::from_secs(1),
    };
    if h.inject(unavailable).await {
        let err = ledger
            .post_run(&items(&bodies))
            .await
            .expect_err("a run refused as unavailable");
        assert!(err.is_transient(), "{err}");
        for (event, _) in &bodies {
            assert_eq!(committed_id(ledger, *event).await, None);
        }
    } else {
        skip(case, "the harness cannot make the ledger unavailable");
    }

    if h.inject(LedgerFault::AnswerLostAfterCommit).await {
        let err = ledger
            .post_run(&items(&bodies))
            .await
            .expect_err("a run whose answer is lost");
        assert!(err.is_transient(), "{err}");
        for (event, body) in &bodies {
            let id = committed_id(ledger, *event)
                .await
                .expect("every element committed");
            assert_eq!(
                ledger.post(*event, body).await.expect("re-sent alone"),
                PostOutcome::Replayed { transaction_id: id }
            );
        }
    } else {
        skip(case, "the harness cannot lose an answer after commit");
    }
}

/// The metadata the relay sends with a revert by `revert_event` of `target`.
fn revert_metadata(revert_event: EventId, aggregate: &str, target: EventId) -> Metadata {
    let command = LedgerCommand::Revert(RevertCommand {
        event_id: target,
        metadata: Metadata::from([("event_type".to_owned(), "payout.reversed".to_owned())]),
    });
    Payload::encode(revert_event, &account(aggregate), 2, &command)
        .and_then(|payload| payload.command())
        .expect("a revert encodes")
        .metadata()
        .clone()
}

/// A revert of the target's transaction id: accepted (a new, reversing transaction),
/// replayed under its key, and a second revert under another key is a refusal.
pub async fn revert_is_accepted_replayed_then_already_reverted(h: &impl LedgerHarness) {
    let ledger = h.ledger();
    let target = EventId::new();
    let original = accepted(
        ledger
            .post(
                target,
                &transfer(target, "world", "merchants:1:available", 1_000),
            )
            .await,
        "the target",
    );
    let revert_event = EventId::new();
    let metadata = revert_metadata(revert_event, "merchants:1:available", target);

    let reversal = accepted(
        ledger.revert(revert_event, original, &metadata).await,
        "the revert",
    );
    assert_ne!(reversal, original, "a revert is a new transaction");
    assert_eq!(
        ledger
            .revert(revert_event, original, &metadata)
            .await
            .expect("the revert again"),
        PostOutcome::Replayed {
            transaction_id: reversal
        }
    );
    let other = EventId::new();
    let outcome = ledger
        .revert(
            other,
            original,
            &revert_metadata(other, "merchants:1:available", target),
        )
        .await;
    assert_eq!(
        rejected(outcome, "a second revert"),
        h.already_reverted_code()
    );
    assert_eq!(committed_id(ledger, other).await, None);

    let reversed = ledger
        .transaction_by_event_id(revert_event)
        .await
        .expect("lookup")
        .expect("the reversal carries the revert's event id");
    assert_eq!(reversed.id, reversal);
    assert_eq!(
        reversed.postings,
        [posting("merchants:1:available", "world", 1_000, USD)],
        "the postings swapped"
    );
    assert_eq!(reversed.metadata["event_type"], "payout.reversed");
    let target_tx = ledger
        .transaction_by_event_id(target)
        .await
        .expect("lookup")
        .expect("the target stays");
    assert_eq!(target_tx.id, original);
    assert!(target_tx.reverted, "the target reads as reverted");
    assert_eq!(
        usd_balance(ledger, "merchants:1:available")
            .await
            .unwrap_or(0),
        0
    );
}

/// A revert of a transaction id the ledger does not have is a permanent `NotFound`.
pub async fn reverting_an_unknown_transaction_is_a_permanent_not_found(h: &impl LedgerHarness) {
    let ledger = h.ledger();
    let event = EventId::new();
    let known = accepted(
        ledger
            .post(event, &transfer(event, "world", "merchants:1:available", 1))
            .await,
        "a transaction",
    );
    let revert_event = EventId::new();
    let err = ledger
        .revert(
            revert_event,
            known + 9_999,
            &revert_metadata(revert_event, "merchants:1:available", event),
        )
        .await
        .expect_err("a revert of an unknown id");
    assert_eq!(err.kind(), &ErrorKind::NotFound, "{err}");
    assert_eq!(err.retry(), Retry::Permanent, "{err}");
    assert_eq!(committed_id(ledger, revert_event).await, None);
}

/// A transaction is found by the event id in its metadata, with what was posted;
/// an event the ledger never saw is `None`.
pub async fn a_transaction_is_found_by_its_event_id_and_an_unknown_one_is_none(
    h: &impl LedgerHarness,
) {
    let ledger = h.ledger();
    assert_eq!(
        committed_id(ledger, EventId::new()).await,
        None,
        "empty ledger"
    );

    let with_reference = EventId::new();
    let body = post_body(
        with_reference,
        "merchants:4471",
        7,
        PostCommand {
            body: PostBody::Postings(vec![posting("world", "merchants:4471:available", 5, USD)]),
            reference: Some("payout:settlement-2026-10-07:4471".into()),
            metadata: Metadata::from([("payout_id".to_owned(), "p-1".to_owned())]),
        },
    );
    let id = accepted(ledger.post(with_reference, &body).await, "with a reference");
    let plain = EventId::new();
    let plain_id = accepted(
        ledger
            .post(plain, &transfer(plain, "world", "merchants:9:available", 6))
            .await,
        "without a reference",
    );

    let tx = ledger
        .transaction_by_event_id(with_reference)
        .await
        .expect("lookup")
        .expect("found");
    assert_eq!(tx.id, id);
    assert_eq!(
        tx.postings,
        [posting("world", "merchants:4471:available", 5, USD)]
    );
    assert_eq!(
        tx.reference.as_deref(),
        Some("payout:settlement-2026-10-07:4471")
    );
    assert_eq!(tx.metadata[OUTBOX_EVENT_ID_KEY], with_reference.to_string());
    assert_eq!(tx.metadata[OUTBOX_ACCOUNT_KEY], "merchants:4471");
    assert_eq!(tx.metadata[OUTBOX_SEQUENCE_KEY], "7");
    assert_eq!(tx.metadata["payout_id"], "p-1");
    assert!(!tx.reverted);

    let tx = ledger
        .transaction_by_event_id(plain)
        .await
        .expect("lookup")
        .expect("found");
    assert_eq!(tx.id, plain_id);
    assert_eq!(tx.reference, None);
    assert_eq!(committed_id(ledger, EventId::new()).await, None);
}

/// Aggregate balances are signed, per asset, over the accounts an address pattern
/// matches; an account whose moves cancel out is a zero, an address nothing matches
/// an empty answer.
pub async fn aggregate_balances_are_signed_per_asset_and_empty_when_nothing_matches(
    h: &impl LedgerHarness,
) {
    let ledger = h.ledger();
    let moves = [
        posting("world", "merchants:1:available", 1_000, USD),
        posting("world", "merchants:1:reserve", 50, USD),
        posting("world", "merchants:1:available", 7, "EUR/2"),
        posting(
            "merchants:1:available",
            "merchants:1:payouts:pending",
            1_000,
            USD,
        ),
        posting("world", "merchants:2:available", 3, USD),
    ];
    for posting in moves {
        let event = EventId::new();
        let body = post_body(
            event,
            "merchants:1",
            1,
            PostCommand {
                body: PostBody::Postings(vec![posting]),
                reference: None,
                metadata: Metadata::new(),
            },
        );
        accepted(ledger.post(event, &body).await, "a move");
    }
    let eur = Asset::parse("EUR/2").expect("valid asset");
    let of = |pairs: &[(&Asset, i128)]| -> Balances {
        pairs
            .iter()
            .map(|(asset, amount)| ((*asset).clone(), *amount))
            .collect()
    };
    let usd = usd();

    assert_eq!(
        balances(ledger, "merchants:1:available").await,
        of(&[(&usd, 0), (&eur, 7)]),
        "an emptied account is a zero, per asset"
    );
    assert_eq!(
        balances(ledger, "merchants:1:").await,
        of(&[(&usd, 50), (&eur, 7)]),
        "an empty last segment matches one segment: available and reserve"
    );
    assert_eq!(
        balances(ledger, "merchants:1:...").await,
        of(&[(&usd, 1_050), (&eur, 7)]),
        "`...` matches any depth: payouts:pending included"
    );
    assert_eq!(
        balances(ledger, "merchants::available").await,
        of(&[(&usd, 3), (&eur, 7)]),
        "an empty middle segment matches one segment"
    );
    assert_eq!(
        balances(ledger, "world").await,
        of(&[(&usd, -1_053), (&eur, -7)]),
        "world goes negative"
    );
    let nothing = balances(ledger, "merchants:never:used").await;
    assert!(
        nothing.is_empty(),
        "nothing matched is an empty answer, not zeros: {nothing:?}"
    );
}

/// A ledger that refuses before running (503, 429) is a transient error carrying
/// its `Retry-After`, and nothing was committed.
pub async fn unavailable_and_throttled_are_transient_with_retry_after(h: &impl LedgerHarness) {
    let case = "unavailable_and_throttled_are_transient_with_retry_after";
    let ledger = h.ledger();
    let event = EventId::new();
    let body = transfer(event, "world", "merchants:1:available", 100);
    let faults = [
        (
            LedgerFault::Unavailable {
                retry_after: Duration::from_secs(7),
            },
            Duration::from_secs(7),
        ),
        (
            LedgerFault::Throttled {
                retry_after: Duration::from_secs(2),
            },
            Duration::from_secs(2),
        ),
    ];
    let mut injected = 0;
    for (fault, retry_after) in faults {
        if !h.inject(fault).await {
            skip(case, &format!("the harness cannot inject {fault:?}"));
            continue;
        }
        injected += 1;
        let err = ledger
            .post(event, &body)
            .await
            .expect_err("a refused call is an error");
        assert_eq!(
            err.retry(),
            Retry::Transient {
                after: Some(retry_after)
            },
            "{fault:?}: {err}"
        );
        assert_eq!(committed_id(ledger, event).await, None, "{fault:?}");
    }
    if injected > 0 {
        // Refused before running: the retry is a first post.
        accepted(ledger.post(event, &body).await, "the retry");
    }
}

/// An answer lost after the commit is a transient error; the write is in the ledger
/// and the retry is a replay of it.
pub async fn an_answer_lost_after_commit_is_transient_and_replays_on_retry(h: &impl LedgerHarness) {
    if !h.inject(LedgerFault::AnswerLostAfterCommit).await {
        skip(
            "an_answer_lost_after_commit_is_transient_and_replays_on_retry",
            "the harness cannot lose an answer after commit",
        );
        return;
    }
    let ledger = h.ledger();
    let event = EventId::new();
    let body = transfer(event, "world", "merchants:1:available", 100);
    let err = ledger
        .post(event, &body)
        .await
        .expect_err("the answer is lost");
    assert!(err.is_transient(), "{err}");
    let committed = committed_id(ledger, event)
        .await
        .expect("the write committed");
    assert_eq!(
        ledger.post(event, &body).await.expect("the retry"),
        PostOutcome::Replayed {
            transaction_id: committed
        }
    );
    assert_eq!(
        usd_balance(ledger, "merchants:1:available").await,
        Some(100)
    );
}

fn refused_event(aggregate: &str, sequence: u64) -> OutboxEvent {
    let event_id = EventId::new();
    let account = account(aggregate);
    let command = LedgerCommand::Post(PostCommand {
        body: PostBody::Postings(vec![posting(aggregate, "banks:clearing", 1, USD)]),
        reference: None,
        metadata: Metadata::new(),
    });
    OutboxEvent {
        position: Position::from_bytes(&sequence.to_be_bytes()).expect("short position"),
        event_id,
        payload: Payload::encode(event_id, &account, sequence, &command).expect("encodes"),
        account,
        sequence,
        created_at: Utc::now(),
    }
}

/// Rejection notices (account metadata under their own key, as the relay writes
/// them) are idempotent under that key, and `rejection_notice` finds each event's
/// code on its account, a later notice not hiding an earlier one.
pub async fn rejection_notices_are_idempotent_and_found_per_event(h: &impl LedgerHarness) {
    let ledger = h.ledger();
    let merchant = "merchants:4471";
    let first = refused_event(merchant, 1);
    let second = refused_event(merchant, 2);
    let save = |event: &OutboxEvent, code: &str| {
        let metadata = rejection_notice_metadata(event, code);
        let key = rejection_notice_key(event.event_id);
        let account = event.account.clone();
        async move {
            ledger
                .save_account_metadata(&key, &account, &metadata)
                .await
        }
    };
    save(&first, "INSUFFICIENT_FUND")
        .await
        .expect("the first notice");
    save(&first, "INSUFFICIENT_FUND")
        .await
        .expect("the same notice again is a replay");
    save(&second, "COMPILATION_FAILED")
        .await
        .expect("the second notice");

    let notice = |account: &str, event: EventId| {
        let account = self::account(account);
        async move {
            ledger
                .rejection_notice(&account, event)
                .await
                .expect("rejection notice lookup")
        }
    };
    assert_eq!(
        notice(merchant, first.event_id).await.as_deref(),
        Some("INSUFFICIENT_FUND"),
        "the later notice does not hide the earlier one"
    );
    assert_eq!(
        notice(merchant, second.event_id).await.as_deref(),
        Some("COMPILATION_FAILED")
    );
    assert_eq!(notice(merchant, EventId::new()).await, None);
    assert_eq!(notice("merchants:9", first.event_id).await, None);

    let err = save(&first, "NO_POSTINGS")
        .await
        .expect_err("other metadata under a used key");
    assert_eq!(err.kind(), &ErrorKind::IdempotencyMismatch, "{err}");
    assert_eq!(err.retry(), Retry::Permanent, "{err}");
    assert_eq!(
        notice(merchant, first.event_id).await.as_deref(),
        Some("INSUFFICIENT_FUND")
    );
}
