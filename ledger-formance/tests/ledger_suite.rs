//! testkit's ledger suite on `FormanceLedger`, against `outbox-ledger-dev` (a local
//! Formance-v2-compatible ledger) over real HTTP on loopback: one dev ledger per case,
//! faults injected through the dev ledger's fault plan.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use axum::http::StatusCode;
use outbox_core::{
    Account, Asset, EventId, Ledger, Metadata, OUTBOX_EVENT_ID_KEY, PostBody, PostCommand,
    PostOutcome, Script,
};
use outbox_ledger_dev::{DevLedger, DevLedgerConfig, RunningDevLedger};
use outbox_ledger_formance::{FormanceConfig, FormanceLedger};
use outbox_testkit::ledger_cases::{USD, post_body, posting};
use outbox_testkit::{LedgerFault, LedgerHarness, PreparedRefusal};

const LEDGER: &str = "main";

/// How long the client waits for an answer, and how long the dev ledger holds a
/// committed answer to make it lost: past the timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
const HOLD: Duration = Duration::from_secs(4);

struct Formance {
    dev: RunningDevLedger,
    ledger: FormanceLedger,
}

fn post(event: EventId, aggregate: &str, body: PostBody, reference: Option<&str>) -> Vec<u8> {
    post_body(
        event,
        aggregate,
        1,
        PostCommand {
            body,
            reference: reference.map(str::to_owned),
            metadata: Metadata::new(),
        },
    )
}

impl Formance {
    fn ok(outcome: outbox_core::Result<PostOutcome>, what: &str) {
        assert!(
            matches!(outcome, Ok(PostOutcome::Accepted { .. })),
            "{what}: {outcome:?}"
        );
    }
}

#[async_trait]
impl LedgerHarness for Formance {
    type Ledger = FormanceLedger;

    async fn new() -> Self {
        let dev = DevLedger::start(DevLedgerConfig {
            create_ledgers: vec![LEDGER.into()],
            ..DevLedgerConfig::default()
        })
        .await
        .expect("dev ledger starts");
        let mut config = FormanceConfig::new(dev.url(), LEDGER);
        config.request_timeout_ms = REQUEST_TIMEOUT.as_millis() as u64;
        let ledger = FormanceLedger::new(&config).expect("valid config");
        Self { dev, ledger }
    }

    fn ledger(&self) -> &FormanceLedger {
        &self.ledger
    }

    async fn fund(&self, account: &Account, asset: &Asset, amount: u64) {
        let event = EventId::new();
        let body = post(
            event,
            account.as_str(),
            PostBody::Postings(vec![posting(
                "world",
                account.as_str(),
                amount,
                asset.as_str(),
            )]),
            None,
        );
        Self::ok(self.ledger.post(event, &body).await, "funding");
    }

    async fn refusals(&self) -> Vec<PreparedRefusal> {
        let aggregate = "merchants:4471";
        let mut refusals = Vec::new();

        let event = EventId::new();
        let script = Script {
            plain: "vars {\n  monetary $amount\n}\nsend $amount (\n  source = @world\n  destination = $nowhere\n)\n".into(),
            vars: BTreeMap::from([("amount".into(), "USD/2 100".into())]),
        };
        refusals.push(PreparedRefusal {
            code: "COMPILATION_FAILED".into(),
            event,
            body: post(event, aggregate, PostBody::Script(script), None),
        });

        // Neither postings nor a script: a body the outbox itself would never encode.
        let event = EventId::new();
        refusals.push(PreparedRefusal {
            code: "NO_POSTINGS".into(),
            event,
            body: format!(r#"{{"metadata":{{"{OUTBOX_EVENT_ID_KEY}":"{event}"}}}}"#).into_bytes(),
        });

        // The script sets a metadata key the request sets to another value.
        let event = EventId::new();
        let script = Script {
            plain: "send [USD/2 100] (\n  source = @world\n  destination = @merchants:4471:available\n)\nset_tx_meta(\"event_type\", \"payout.requested\")\n".into(),
            vars: BTreeMap::new(),
        };
        let body = post_body(
            event,
            aggregate,
            1,
            PostCommand {
                body: PostBody::Script(script),
                reference: None,
                metadata: Metadata::from([("event_type".to_owned(), "payout.other".to_owned())]),
            },
        );
        refusals.push(PreparedRefusal {
            code: "METADATA_OVERRIDE".into(),
            event,
            body,
        });

        // A reference another event's transaction holds (docs/LEDGER.md#references-and-the-409).
        let reference = "payout:settlement-2026-10-07:4471";
        let transfer =
            || PostBody::Postings(vec![posting("world", "merchants:4471:available", 100, USD)]);
        let holder = EventId::new();
        let held = post(holder, aggregate, transfer(), Some(reference));
        Self::ok(
            self.ledger.post(holder, &held).await,
            "the reference holder",
        );
        let event = EventId::new();
        refusals.push(PreparedRefusal {
            code: "CONFLICT".into(),
            event,
            body: post(event, aggregate, transfer(), Some(reference)),
        });
        refusals
    }

    async fn inject(&self, fault: LedgerFault) -> bool {
        let faults = self.dev.faults();
        match fault {
            LedgerFault::Unavailable { retry_after } => {
                faults.push_status(StatusCode::SERVICE_UNAVAILABLE, Some(retry_after), 1);
            }
            LedgerFault::Throttled { retry_after } => {
                faults.push_status(StatusCode::TOO_MANY_REQUESTS, Some(retry_after), 1);
            }
            LedgerFault::AnswerLostAfterCommit => faults.timeout_after_commit(1, HOLD),
        }
        true
    }
}

outbox_testkit::ledger_suite!(Formance);

/// The suite's bulk and run cases skip an adapter without them: the Formance client
/// has both, so none of them is skipped here.
#[tokio::test]
async fn formance_declares_bulk_and_ordered_runs() {
    let harness = Formance::new().await;
    let capabilities = harness.ledger().capabilities();
    assert!(capabilities.ordered_runs);
    assert!(capabilities.max_bulk >= 5, "{capabilities:?}");
}
