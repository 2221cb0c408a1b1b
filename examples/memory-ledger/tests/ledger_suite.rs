//! testkit's ledger suite on `MemoryLedger`, run from this crate as any adapter's own
//! crate would: implement `LedgerHarness`, then `ledger_suite!`.

use std::collections::BTreeMap;

use outbox_core::{
    Account, Asset, EventId, Ledger, Metadata, OUTBOX_EVENT_ID_KEY, PostBody, PostCommand,
    PostOutcome, Script,
};
use outbox_example_memory_ledger::books::{CONFLICT, NO_POSTINGS, SCRIPT_UNSUPPORTED};
use outbox_example_memory_ledger::{Fault, MemoryLedger};
use outbox_testkit::ledger_cases::{USD, post_body, posting};
use outbox_testkit::{LedgerFault, LedgerHarness, PreparedRefusal};

struct Memory(MemoryLedger);

fn body(event: EventId, postings: PostBody, reference: Option<&str>) -> Vec<u8> {
    post_body(
        event,
        "merchants:4471",
        1,
        PostCommand {
            body: postings,
            reference: reference.map(str::to_owned),
            metadata: Metadata::new(),
        },
    )
}

fn accepted(outcome: outbox_core::Result<PostOutcome>, what: &str) {
    assert!(
        matches!(outcome, Ok(PostOutcome::Accepted { .. })),
        "{what}: {outcome:?}"
    );
}

#[async_trait::async_trait]
impl LedgerHarness for Memory {
    type Ledger = MemoryLedger;

    async fn new() -> Self {
        Self(MemoryLedger::new())
    }

    fn ledger(&self) -> &MemoryLedger {
        &self.0
    }

    async fn fund(&self, account: &Account, asset: &Asset, amount: u64) {
        let event = EventId::new();
        let credit = PostBody::Postings(vec![posting(
            "world",
            account.as_str(),
            amount,
            asset.as_str(),
        )]);
        accepted(
            self.0.post(event, &body(event, credit, None)).await,
            "funding",
        );
    }

    async fn refusals(&self) -> Vec<PreparedRefusal> {
        let no_postings = EventId::new();
        let script = EventId::new();
        let program = Script {
            plain: "send [USD/2 100] (\n  source = @world\n  destination = @merchants:4471:available\n)\n".into(),
            vars: BTreeMap::new(),
        };
        let holder = EventId::new();
        let reference = "payout:settlement-2026-10-07:4471";
        let credit =
            || PostBody::Postings(vec![posting("world", "merchants:4471:available", 100, USD)]);
        accepted(
            self.0
                .post(holder, &body(holder, credit(), Some(reference)))
                .await,
            "the reference holder",
        );
        let intruder = EventId::new();
        vec![
            PreparedRefusal {
                code: NO_POSTINGS.into(),
                event: no_postings,
                body: format!(r#"{{"metadata":{{"{OUTBOX_EVENT_ID_KEY}":"{no_postings}"}}}}"#)
                    .into_bytes(),
            },
            PreparedRefusal {
                code: SCRIPT_UNSUPPORTED.into(),
                event: script,
                body: body(script, PostBody::Script(program), None),
            },
            PreparedRefusal {
                code: CONFLICT.into(),
                event: intruder,
                body: body(intruder, credit(), Some(reference)),
            },
        ]
    }

    async fn inject(&self, fault: LedgerFault) -> bool {
        self.0.inject(match fault {
            LedgerFault::Unavailable { retry_after } => Fault::Unavailable { retry_after },
            LedgerFault::Throttled { retry_after } => Fault::Throttled { retry_after },
            LedgerFault::AnswerLostAfterCommit => Fault::AnswerLostAfterCommit,
        });
        true
    }
}

outbox_testkit::ledger_suite!(Memory);

/// The suite skips bulk and run cases an adapter does not declare: this one has both.
#[test]
fn the_memory_ledger_declares_bulk_and_ordered_runs() {
    let capabilities = MemoryLedger::new().capabilities();
    assert!(capabilities.ordered_runs);
    assert!(capabilities.max_bulk >= 5, "{capabilities:?}");
}
