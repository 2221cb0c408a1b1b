//! The inbox suite: the inbox engine's behaviours on a real store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use outbox_core::{Accepted, ExceptionKind, InboxEngine, MessageKind};

use crate::fixtures::message;
use crate::harness::InboxHarness;

const C: &str = "treasury";
const ACCT: &str = "merchants:4471";

fn engine() -> InboxEngine {
    InboxEngine::new(C)
}

async fn accept_ok<H: InboxHarness>(
    h: &H,
    id: &str,
    seq: u64,
    kind: MessageKind,
    amount: i64,
) -> Accepted {
    h.accept(&engine(), message(id, ACCT, seq, kind, amount), false)
        .await
        .unwrap_or_else(|e| panic!("accept {id}: {e}"))
}

fn applied_ids(applied: &[(String, String, u64)]) -> Vec<(&str, u64)> {
    applied
        .iter()
        .map(|(id, _, seq)| (id.as_str(), *seq))
        .collect()
}

pub async fn next_sequence_is_applied<H: InboxHarness>(h: &H) {
    assert_eq!(
        accept_ok(h, "i-1", 1, MessageKind::Committed, 500).await,
        Accepted::Applied { released: vec![] }
    );
    assert_eq!(
        accept_ok(h, "i-2", 2, MessageKind::Committed, 300).await,
        Accepted::Applied { released: vec![] }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 800)]);
    assert_eq!(
        applied_ids(&h.applied(C).await),
        vec![("i-1", 1), ("i-2", 2)]
    );
}

pub async fn duplicate_instruction_has_no_effect<H: InboxHarness>(h: &H) {
    accept_ok(h, "i-1", 1, MessageKind::Committed, 500).await;
    assert_eq!(
        accept_ok(h, "i-1", 1, MessageKind::Committed, 500).await,
        Accepted::Duplicate
    );
    // A redelivery is recognised by its instruction id even if it claims another sequence.
    assert_eq!(
        accept_ok(h, "i-1", 2, MessageKind::Committed, 500).await,
        Accepted::Duplicate
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 500)]);
    assert_eq!(h.applied(C).await.len(), 1);
    assert!(h.exceptions().await.is_empty());
}

pub async fn stale_sequence_has_no_effect_and_is_recorded<H: InboxHarness>(h: &H) {
    accept_ok(h, "i-1", 1, MessageKind::Committed, 500).await;
    accept_ok(h, "i-2", 2, MessageKind::Committed, 100).await;
    assert_eq!(
        accept_ok(h, "i-x", 2, MessageKind::Committed, 900).await,
        Accepted::Stale { last_applied: 2 }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 600)]);
    let exceptions = h.exceptions().await;
    assert_eq!(exceptions.len(), 1);
    assert_eq!(exceptions[0].kind, ExceptionKind::StaleSequence);
    assert_eq!(
        (exceptions[0].account.as_str(), exceptions[0].sequence),
        (ACCT, 2)
    );
    assert!(
        exceptions[0].detail.contains("i-x"),
        "{}",
        exceptions[0].detail
    );
}

pub async fn skipped_number_is_held_then_released_in_order<H: InboxHarness>(h: &H) {
    accept_ok(h, "i-1", 1, MessageKind::Committed, 1).await;
    assert_eq!(
        accept_ok(h, "i-4", 4, MessageKind::Committed, 40).await,
        Accepted::Held { waiting_for: 2 }
    );
    assert_eq!(
        accept_ok(h, "i-3", 3, MessageKind::Committed, 30).await,
        Accepted::Held { waiting_for: 2 }
    );
    assert_eq!(
        h.treasury(C).await,
        vec![(ACCT.to_owned(), 1)],
        "a held message had an impact"
    );
    assert_eq!(
        h.held(C).await,
        vec![(ACCT.to_owned(), 3), (ACCT.to_owned(), 4)]
    );
    assert_eq!(
        accept_ok(h, "i-2", 2, MessageKind::Committed, 20).await,
        Accepted::Applied {
            released: vec![3, 4]
        }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 91)]);
    assert!(h.held(C).await.is_empty());
    assert_eq!(
        applied_ids(&h.applied(C).await),
        vec![("i-1", 1), ("i-2", 2), ("i-3", 3), ("i-4", 4)]
    );
    // Next after the released run continues normally.
    assert_eq!(
        accept_ok(h, "i-5", 5, MessageKind::Committed, 5).await,
        Accepted::Applied { released: vec![] }
    );
}

pub async fn reversal_before_posting_is_held_then_applied<H: InboxHarness>(h: &H) {
    // docs/ARCHITECTURE.md#the-reference-scenario: the reversal (sequence 2) of the $485,000 payout (sequence 1) arrives first.
    assert_eq!(
        accept_ok(h, "rev-1", 2, MessageKind::Reverted, 48_500_000).await,
        Accepted::Held { waiting_for: 1 }
    );
    assert!(
        h.treasury(C).await.is_empty(),
        "the reversal was applied before its posting"
    );
    assert_eq!(
        accept_ok(h, "pay-1", 1, MessageKind::Committed, 48_500_000).await,
        Accepted::Applied { released: vec![2] }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 0)]);
    assert_eq!(
        applied_ids(&h.applied(C).await),
        vec![("pay-1", 1), ("rev-1", 2)]
    );
}

pub async fn rejected_notice_consumes_sequence_without_impact<H: InboxHarness>(h: &H) {
    accept_ok(h, "i-1", 1, MessageKind::Committed, 10).await;
    assert_eq!(
        accept_ok(h, "i-3", 3, MessageKind::Committed, 30).await,
        Accepted::Held { waiting_for: 2 }
    );
    // Sequence 2 was refused by the ledger (INSUFFICIENT_FUND): the notice unblocks 3.
    assert_eq!(
        accept_ok(h, "i-2", 2, MessageKind::Rejected, 999).await,
        Accepted::Applied { released: vec![3] }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 40)]);
    assert_eq!(
        applied_ids(&h.applied(C).await),
        vec![("i-1", 1), ("i-2", 2), ("i-3", 3)]
    );
}

pub async fn handler_failure_marks_nothing<H: InboxHarness>(h: &H) {
    accept_ok(h, "i-1", 1, MessageKind::Committed, 10).await;
    accept_ok(h, "i-3", 3, MessageKind::Committed, 30).await;
    let err = h
        .accept(
            &engine(),
            message("i-2", ACCT, 2, MessageKind::Committed, 20),
            true,
        )
        .await
        .expect_err("a failing handler succeeded");
    assert!(err.to_string().contains("handler"), "{err}");
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 10)]);
    assert_eq!(
        applied_ids(&h.applied(C).await),
        vec![("i-1", 1)],
        "a failed message was marked"
    );
    assert_eq!(
        h.held(C).await,
        vec![(ACCT.to_owned(), 3)],
        "the held successor was lost"
    );
    // The same message succeeds on redelivery.
    assert_eq!(
        accept_ok(h, "i-2", 2, MessageKind::Committed, 20).await,
        Accepted::Applied { released: vec![3] }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 60)]);
}

pub async fn same_amount_new_instruction_is_applied<H: InboxHarness>(h: &H) {
    // Two genuine $485,000 payouts to the same merchant: two instructions, two impacts.
    accept_ok(h, "payout-a", 1, MessageKind::Committed, 48_500_000).await;
    assert_eq!(
        accept_ok(h, "payout-b", 2, MessageKind::Committed, 48_500_000).await,
        Accepted::Applied { released: vec![] }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 97_000_000)]);
}

pub async fn gap_older_than_alarm_age_raises_one_alarm_and_is_not_skipped<H: InboxHarness>(h: &H) {
    let fired = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&fired);
    let engine = engine().gap_alarm_after(Duration::ZERO).on_alarm(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    h.accept(
        &engine,
        message("i-1", ACCT, 1, MessageKind::Committed, 1),
        false,
    )
    .await
    .expect("accept");
    h.accept(
        &engine,
        message("i-3", ACCT, 3, MessageKind::Committed, 3),
        false,
    )
    .await
    .expect("accept");
    h.accept(
        &engine,
        message("j-5", "merchants:77", 5, MessageKind::Committed, 5),
        false,
    )
    .await
    .expect("accept");
    let alarms = h.check_gaps(&engine).await.expect("check");
    let mut named: Vec<(String, u64, u64)> = alarms
        .iter()
        .map(|a| (a.account.to_string(), a.missing, a.held))
        .collect();
    named.sort();
    assert_eq!(
        named,
        vec![(ACCT.to_owned(), 2, 3), ("merchants:77".to_owned(), 1, 5)]
    );
    assert_eq!(fired.load(Ordering::SeqCst), 2);
    // Once per gap: a second check raises nothing new.
    assert!(h.check_gaps(&engine).await.expect("check").is_empty());
    assert_eq!(fired.load(Ordering::SeqCst), 2);
    let gaps: Vec<(String, u64)> = h
        .exceptions()
        .await
        .into_iter()
        .filter(|e| e.kind == ExceptionKind::Gap)
        .map(|e| (e.account.to_string(), e.sequence))
        .collect();
    assert_eq!(gaps.len(), 2);
    assert!(gaps.contains(&(ACCT.to_owned(), 2)));
    // Never skipped: the held message stays held, with no impact, until 2 arrives.
    assert_eq!(
        h.held(C).await,
        vec![
            ("merchants:4471".to_owned(), 3),
            ("merchants:77".to_owned(), 5)
        ]
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 1)]);
    h.accept(
        &engine,
        message("i-2", ACCT, 2, MessageKind::Committed, 2),
        false,
    )
    .await
    .expect("accept");
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 6)]);
}

pub async fn young_gap_raises_no_alarm<H: InboxHarness>(h: &H) {
    let engine = engine().gap_alarm_after(Duration::from_secs(3600));
    h.accept(
        &engine,
        message("i-2", ACCT, 2, MessageKind::Committed, 2),
        false,
    )
    .await
    .expect("accept");
    assert!(h.check_gaps(&engine).await.expect("check").is_empty());
    assert!(h.exceptions().await.is_empty());
    assert_eq!(h.held(C).await, vec![(ACCT.to_owned(), 2)]);
}

pub async fn duplicate_of_held_message_is_absorbed<H: InboxHarness>(h: &H) {
    assert_eq!(
        accept_ok(h, "i-2", 2, MessageKind::Committed, 2).await,
        Accepted::Held { waiting_for: 1 }
    );
    assert_eq!(
        accept_ok(h, "i-2", 2, MessageKind::Committed, 2).await,
        Accepted::Duplicate
    );
    assert_eq!(
        accept_ok(h, "i-1", 1, MessageKind::Committed, 1).await,
        Accepted::Applied { released: vec![2] }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 3)]);
    assert!(h.exceptions().await.is_empty());
}

pub async fn conflicting_instruction_for_held_sequence_is_recorded<H: InboxHarness>(h: &H) {
    accept_ok(h, "i-2", 2, MessageKind::Committed, 2).await;
    assert_eq!(
        accept_ok(h, "other", 2, MessageKind::Committed, 7).await,
        Accepted::Conflict {
            holder: "i-2".to_owned()
        }
    );
    let exceptions = h.exceptions().await;
    assert_eq!(exceptions.len(), 1);
    assert_eq!(exceptions[0].kind, ExceptionKind::ConflictingSequence);
    assert_eq!(exceptions[0].sequence, 2);
    assert_eq!(h.held(C).await, vec![(ACCT.to_owned(), 2)]);
}

pub async fn consumers_are_isolated<H: InboxHarness>(h: &H) {
    let other = InboxEngine::new("ledger-mirror");
    accept_ok(h, "i-1", 1, MessageKind::Committed, 10).await;
    // The same instruction is new to another consumer.
    assert_eq!(
        h.accept(
            &other,
            message("i-1", ACCT, 1, MessageKind::Committed, 10),
            false
        )
        .await
        .expect("accept"),
        Accepted::Applied { released: vec![] }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 10)]);
    assert_eq!(
        h.treasury("ledger-mirror").await,
        vec![(ACCT.to_owned(), 10)]
    );
}

/// The one exception recorded, which must be a `ConflictingOutcome` naming the
/// account, the sequence, the instruction and both outcomes.
async fn assert_one_conflicting_outcome<H: InboxHarness>(
    h: &H,
    id: &str,
    seq: u64,
    kinds: [MessageKind; 2],
) {
    let exceptions = h.exceptions().await;
    assert_eq!(exceptions.len(), 1, "{exceptions:?}");
    let e = &exceptions[0];
    assert_eq!(e.kind, ExceptionKind::ConflictingOutcome, "{e:?}");
    assert_eq!((e.account.as_str(), e.sequence), (ACCT, seq));
    assert!(e.detail.contains(id), "{}", e.detail);
    for kind in kinds {
        assert!(e.detail.contains(kind.as_str()), "{}", e.detail);
    }
}

pub async fn committed_after_rejected_is_a_conflicting_outcome<H: InboxHarness>(h: &H) {
    accept_ok(h, "i-1", 1, MessageKind::Committed, 10).await;
    // The ledger refused sequence 2 (INSUFFICIENT_FUND) and the notice consumed it.
    accept_ok(h, "i-2", 2, MessageKind::Rejected, 500).await;
    // Later the same instruction arrives as committed: the ledger moved the money
    // Hop 2 had already reported as refused.
    assert_eq!(
        accept_ok(h, "i-2", 2, MessageKind::Committed, 500).await,
        Accepted::ConflictingOutcome {
            recorded: MessageKind::Rejected,
            received: MessageKind::Committed,
        }
    );
    assert_eq!(
        h.treasury(C).await,
        vec![(ACCT.to_owned(), 10)],
        "the conflicting commit was applied"
    );
    assert_eq!(
        applied_ids(&h.applied(C).await),
        vec![("i-1", 1), ("i-2", 2)]
    );
    assert_one_conflicting_outcome(h, "i-2", 2, [MessageKind::Rejected, MessageKind::Committed])
        .await;
}

pub async fn rejected_after_committed_is_a_conflicting_outcome<H: InboxHarness>(h: &H) {
    accept_ok(h, "i-1", 1, MessageKind::Committed, 500).await;
    assert_eq!(
        accept_ok(h, "i-1", 1, MessageKind::Rejected, 500).await,
        Accepted::ConflictingOutcome {
            recorded: MessageKind::Committed,
            received: MessageKind::Rejected,
        }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 500)]);
    assert_eq!(h.applied(C).await.len(), 1);
    assert_one_conflicting_outcome(h, "i-1", 1, [MessageKind::Committed, MessageKind::Rejected])
        .await;
}

pub async fn conflicting_outcome_of_a_held_message_is_recorded<H: InboxHarness>(h: &H) {
    // Sequence 2 waits for 1, as a rejection notice; then arrives again as committed.
    assert_eq!(
        accept_ok(h, "i-2", 2, MessageKind::Rejected, 700).await,
        Accepted::Held { waiting_for: 1 }
    );
    assert_eq!(
        accept_ok(h, "i-2", 2, MessageKind::Committed, 700).await,
        Accepted::ConflictingOutcome {
            recorded: MessageKind::Rejected,
            received: MessageKind::Committed,
        }
    );
    assert_eq!(h.held(C).await, vec![(ACCT.to_owned(), 2)]);
    assert_one_conflicting_outcome(h, "i-2", 2, [MessageKind::Rejected, MessageKind::Committed])
        .await;
    // The held original stays what it was: released as a notice, with no impact.
    assert_eq!(
        accept_ok(h, "i-1", 1, MessageKind::Committed, 10).await,
        Accepted::Applied { released: vec![2] }
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), 10)]);
}

pub async fn same_outcome_again_stays_a_plain_duplicate<H: InboxHarness>(h: &H) {
    // A rejection notice delivered twice, once applied and once while held.
    accept_ok(h, "i-1", 1, MessageKind::Rejected, 10).await;
    assert_eq!(
        accept_ok(h, "i-1", 1, MessageKind::Rejected, 10).await,
        Accepted::Duplicate
    );
    accept_ok(h, "i-3", 3, MessageKind::Rejected, 30).await;
    assert_eq!(
        accept_ok(h, "i-3", 3, MessageKind::Rejected, 30).await,
        Accepted::Duplicate
    );
    // A revert delivered twice.
    accept_ok(h, "r-2", 2, MessageKind::Reverted, 5).await;
    assert_eq!(
        accept_ok(h, "r-2", 2, MessageKind::Reverted, 5).await,
        Accepted::Duplicate
    );
    assert_eq!(h.treasury(C).await, vec![(ACCT.to_owned(), -5)]);
    assert!(h.held(C).await.is_empty());
    assert!(h.exceptions().await.is_empty());
}
