//! Campaign scenario: a hostile Hop 2 stream into the real `outbox consume` (issue 15,
//! "Hostile Hop 2 stream").
//!
//! The messages are real: payouts, refusals (insufficient funds) and reversals go
//! through the relay and the dev ledger, whose webhooks fill a fan-out store. They
//! are then sent to an `outbox consume` process over signed HTTP the way no honest
//! fan-out would: 30 % sent twice, shuffled across and within accounts (a reversal
//! often ahead of the payout it reverses, a refusal ahead of what precedes it), by 8
//! concurrent senders. At the end the auditor, from the outbox alone: the consumer
//! applied each instruction exactly once at its sequence, holds nothing, and its
//! balances are the ledger's — the in-order, exactly-once application.
//!
//! `OUTBOX_CHAOS_PROFILE=long` runs the long sizes; `OUTBOX_TEST_SEED` replays a run.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::process::Process;
use common::*;
use outbox_core::{FanoutMessage, FanoutStore, Publisher, Wakeup};
use outbox_ledger_formance::{FormanceWebhookDecoder, WebhookVerifier};
use outbox_store_sqlite::{SqliteConfig, SqliteFanoutStore, SqliteStore};
use outbox_testkit::auditor::{ConsumerView, audit};
use outbox_testkit::ports::free_port;
use outbox_transport_http::{HttpPublisher, PublisherConfig, ReceiverConfig, start_intake};

const PUBLISH_SECRET: &str = "chaos-hostile-secret";
const SENDERS: usize = 8;

fn sizes() -> (usize, usize) {
    match std::env::var("OUTBOX_CHAOS_PROFILE").as_deref() {
        Ok("long") => (200, 20_000),
        _ => (10, 300),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostile_stream_into_outbox_consume_ends_in_the_in_order_exactly_once_state() {
    let (merchants, total) = sizes();
    let (seed, mut rng) = seeded("hop2-hostile");

    // 1. Real messages: relay → dev ledger → webhooks → a fan-out store.
    let outbox = Outbox::new().await;
    let fanout = Arc::new(
        SqliteFanoutStore::open(SqliteConfig::new(outbox.dir().join("fanout.db")))
            .await
            .unwrap(),
    );
    let intake = start_intake(
        ReceiverConfig::new(([127, 0, 0, 1], 0).into()),
        Arc::new(FormanceWebhookDecoder::new(
            WebhookVerifier::new(SECRET).unwrap(),
        )),
        fanout.clone(),
        Some(Wakeup::new()),
    )
    .await
    .unwrap();
    let ledger = dev_ledger(Some(&intake)).await;
    let mut enqueued = 0;
    while enqueued < total {
        let merchant = format!("h{}", rng.usize(0..merchants));
        let aggregate = format!("merchants:{merchant}");
        let events = match rng.u8(0..10) {
            0..=3 => outbox.enqueue(&[fund(&merchant, rng.u64(1_000..50_000))]),
            4..=6 => outbox.enqueue(&[payout(&merchant, rng.u64(100..2_000))]),
            7 => outbox.enqueue(&[payout(&merchant, 900_000_000)]),
            _ => {
                // A payout and its reversal, both on the wire later in any order.
                let paid = outbox.enqueue(&[payout(&merchant, rng.u64(100..2_000))]);
                let reverted = outbox.enqueue(&[revert(&aggregate, paid[0].event_id)]);
                paid.into_iter().chain(reverted).collect()
            }
        };
        enqueued += events.len();
    }
    let summary = drain(
        &outbox,
        client(&ledger, Duration::from_secs(10)),
        quick_config(),
    )
    .await;
    assert!(summary.rejected > 0, "{summary:?}");
    let deadline = Instant::now() + Duration::from_secs(120);
    let messages: Vec<FanoutMessage> = loop {
        let stored = fanout.read_after(0, enqueued + 1).await.unwrap();
        if stored.len() == enqueued {
            break stored.into_iter().map(|s| s.message).collect();
        }
        assert!(
            Instant::now() < deadline,
            "{} of {enqueued} messages reached the fan-out store",
            stored.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // 2. The hostile stream: 30 % twice, shuffled, 8 senders at once.
    let consumer_port = free_port();
    let consumer = Process::start(
        "consume",
        &[
            "consume".into(),
            "--from".into(),
            format!("http://127.0.0.1:{consumer_port}"),
            "--secret".into(),
            PUBLISH_SECRET.into(),
            "--database".into(),
            format!("sqlite://{}", outbox.dir().join("treasury.db").display()),
        ],
        "consume: treasury",
    )
    .await;
    let mut stream: Vec<FanoutMessage> = messages.clone();
    for message in &messages {
        if rng.u8(0..10) < 3 {
            stream.push(message.clone());
        }
    }
    rng.shuffle(&mut stream);
    let kinds: BTreeMap<&str, usize> = messages.iter().fold(BTreeMap::new(), |mut m, msg| {
        *m.entry(msg.kind.as_str()).or_default() += 1;
        m
    });
    let sent = stream.len();
    let per_sender = sent.div_ceil(SENDERS);
    let mut senders = Vec::new();
    for share in stream.chunks(per_sender).map(<[FanoutMessage]>::to_vec) {
        let mut config = PublisherConfig::new(
            format!("http://127.0.0.1:{consumer_port}/hop2/messages"),
            PUBLISH_SECRET,
        );
        config.timeout = Duration::from_secs(30);
        let publisher = HttpPublisher::new(config).unwrap();
        senders.push(tokio::spawn(async move {
            for message in share {
                // A held message is accepted too; only a transient failure is sent again.
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    match publisher
                        .publish(std::slice::from_ref(&message))
                        .await
                        .remove(0)
                    {
                        Ok(()) => break,
                        Err(e) if e.is_transient() && attempts < 50 => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(e) => panic!("{} #{}: {e}", message.account, message.sequence),
                    }
                }
            }
        }));
    }
    for sender in senders {
        sender.await.unwrap();
    }

    // 3. The consumer's state is the in-order, exactly-once application.
    let treasury_db = outbox.dir().join("treasury.db");
    let applied = || {
        rusqlite::Connection::open(&treasury_db)
            .and_then(|c| {
                c.query_row("SELECT COUNT(*) FROM inbox_messages", [], |r| {
                    r.get::<_, i64>(0)
                })
            })
            .unwrap_or(0)
    };
    eventually(Duration::from_secs(60), "every instruction applied", || {
        applied() == messages.len() as i64
    })
    .await;
    let balances = treasury_balances(&treasury_db);
    let inbox = SqliteStore::open(SqliteConfig::new(&treasury_db))
        .await
        .unwrap();
    let reader = client(&ledger, Duration::from_secs(10));
    let consumers = [ConsumerView {
        name: "treasury".into(),
        inbox: &inbox,
        balances: Some(balances),
    }];
    let report = audit(&outbox.store, &reader, &consumers).await.unwrap();
    println!(
        "CHAOS hop2-hostile: seed={seed} events={} accounts={merchants} kinds={kinds:?} sent={sent} \
         (duplicates {}) senders={SENDERS} applied={} discrepancies={}",
        report.events,
        sent - messages.len(),
        report.applied,
        report.discrepancies.len()
    );
    report.assert_clean();
    assert_eq!((report.events, report.applied), (enqueued, enqueued));
    assert!(kinds.get("reverted").is_some_and(|n| *n > 0), "{kinds:?}");
    assert!(kinds.get("rejected").is_some_and(|n| *n > 0), "{kinds:?}");
    let out = consumer.terminate().await;
    let summary = out
        .iter()
        .find(|l| l.contains(": applied "))
        .expect("a summary");
    assert!(summary.contains("conflicts 0"), "{summary}");
    intake.shutdown().await;
    ledger.shutdown().await;
}
