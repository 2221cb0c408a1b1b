//! RabbitMQ behaviour of the publisher and subscriber, against the broker at
//! `OUTBOX_AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`). Each test
//! has its own exchange and queues. The broker-restart test lives in
//! `broker_restart.rs` (its own binary) because it stops the shared broker.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lapin::BasicProperties;
use lapin::options::{BasicGetOptions, BasicPublishOptions};
use lapin::types::{AMQPValue, FieldTable};
use outbox_core::fanout::headers;
use outbox_core::{
    ErrorKind, FanoutMessage, MessageKind, MessageSink, Publisher, Retry, Subscriber,
};
use outbox_transport_amqp::{AmqpPublisher, AmqpSubscriber, Topology};

use common::{Cleanup, RecordingSink};

const WAIT: Duration = Duration::from_secs(20);

fn sorted(mut messages: Vec<FanoutMessage>) -> Vec<FanoutMessage> {
    messages.sort_by(|a, b| {
        (a.instruction_id.as_str(), a.kind.as_str())
            .cmp(&(b.instruction_id.as_str(), b.kind.as_str()))
    });
    messages
}

/// Every field survives the trip, through `Arc<dyn …>`: trace context, a reverted
/// transaction, a rejection notice without a ledger transaction id, raw bytes.
#[tokio::test]
async fn round_trip_keeps_payload_and_headers() {
    let url = require_broker!();
    let config = common::fresh_config(&url, "roundtrip", 4);
    let _cleanup = Cleanup::new(&config);
    let publisher: Arc<dyn Publisher> = Arc::new(AmqpPublisher::new(config.clone()).unwrap());
    assert_eq!(publisher.name(), config.destination_name().unwrap());
    assert!(
        publisher
            .name()
            .ends_with(&format!("?exchange={}", config.exchange)),
        "{}",
        publisher.name()
    );
    assert!(!publisher.capabilities().ordered_pipeline);

    let committed = FanoutMessage {
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        tracestate: Some("vendor=opaque,other=1".into()),
        payload: br#"{"id":41,"postings":[{"amount":"100","asset":"EUR/2"}]}"#.to_vec(),
        ..common::message("merchants:4471", 1)
    };
    let reverted = FanoutMessage {
        kind: MessageKind::Reverted,
        ledger_tx_id: Some(42),
        payload: vec![0, 159, 146, 150, b'{', 255],
        ..common::message("merchants:77", 2)
    };
    let notice = FanoutMessage {
        kind: MessageKind::Rejected,
        ledger_tx_id: None,
        payload: br#"{"error_code":"INSUFFICIENT_FUND"}"#.to_vec(),
        ..common::message("merchants:9", 3)
    };
    let sent = vec![committed, reverted, notice];
    let results = publisher.publish(&sent).await;
    assert_eq!(results.len(), 3);
    for r in &results {
        assert!(r.is_ok(), "{r:?}");
    }

    let sink = RecordingSink::new();
    let subscriber: Arc<dyn Subscriber> = Arc::new(AmqpSubscriber::new(config.clone()).unwrap());
    let running = common::spawn(subscriber, sink.clone() as Arc<dyn MessageSink>);
    let all = common::eventually(WAIT, || async { sink.accepted().len() >= 3 }).await;
    running.stop().await.expect("clean shutdown");
    assert!(all, "received {:?}", sink.calls());
    assert_eq!(sorted(sink.accepted()), sorted(sent.clone()));

    let topology = Topology::new(config.exchange.clone(), config.queue_count);
    for (delivery_id, m) in sink.accepted_with_ids() {
        let queue = topology.queue_name(topology.queue_index(&m.account));
        assert!(
            delivery_id.starts_with(&format!("{queue}/")),
            "{delivery_id} should name {queue}"
        );
    }
}

/// What a non-Rust consumer sees on the queue: persistent, JSON, message id, string
/// headers, routed to `<exchange>.<fnv1a64(account) % N>` with that routing key.
#[tokio::test]
async fn wire_format_and_routing() {
    let url = require_broker!();
    let config = common::fresh_config(&url, "wire", 4);
    let _cleanup = Cleanup::new(&config);
    let publisher = AmqpPublisher::new(config.clone()).unwrap();
    let m = FanoutMessage {
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        ..common::message("merchants:4471", 7)
    };
    assert!(publisher.publish(std::slice::from_ref(&m)).await[0].is_ok());

    let index = outbox_transport_amqp::stable_hash("merchants:4471") % 4;
    let queue = format!("{}.{index}", config.exchange);
    for other in (0..4).filter(|i| *i != index) {
        let other = format!("{}.{other}", config.exchange);
        assert_eq!(common::ready_count(&url, &other).await, 0, "{other}");
    }
    let (connection, channel) = common::connect(&url).await;
    let got = channel
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("the message is on the account's queue");
    let _ = connection.close(200, "done".into()).await;
    assert_eq!(got.delivery.exchange.as_str(), config.exchange);
    assert_eq!(got.delivery.routing_key.as_str(), index.to_string());
    assert_eq!(got.delivery.data, m.payload);
    let p = &got.delivery.properties;
    assert_eq!(*p.delivery_mode(), Some(2));
    assert_eq!(
        p.content_type().as_ref().map(|c| c.as_str()),
        Some("application/json")
    );
    assert_eq!(
        p.message_id().as_ref().map(|c| c.as_str()),
        Some(m.instruction_id.as_str())
    );
    let table = p.headers().as_ref().expect("headers");
    for (name, value) in headers::encode(&m) {
        match table.inner().get(name) {
            Some(AMQPValue::LongString(v)) => assert_eq!(v.as_bytes(), value.as_bytes(), "{name}"),
            other => panic!("header {name}: {other:?}"),
        }
    }
    assert!(table.inner().get(headers::TRACESTATE).is_none());
}

/// Six accounts over three queues (two per queue, interleaved), fifteen sequences
/// each, published like the fan-out loop (one per account per call): each account
/// is received exactly in sequence order.
#[tokio::test]
async fn per_account_order_with_interleaved_accounts() {
    let url = require_broker!();
    let config = common::fresh_config(&url, "order", 3);
    let _cleanup = Cleanup::new(&config);
    let publisher = AmqpPublisher::new(config.clone()).unwrap();
    let accounts: Vec<String> = (1..=6).map(|i| format!("merchants:{i}")).collect();
    let topology = publisher.topology();
    let mut per_queue: BTreeMap<u16, usize> = BTreeMap::new();
    for a in &accounts {
        *per_queue
            .entry(topology.queue_index(&common::account(a)))
            .or_default() += 1;
    }
    assert!(
        per_queue.len() >= 2,
        "accounts spread over queues: {per_queue:?}"
    );
    assert!(
        per_queue.values().any(|n| *n >= 2),
        "some queue interleaves accounts: {per_queue:?}"
    );

    let sink = RecordingSink::new();
    let running = common::spawn(
        Arc::new(AmqpSubscriber::new(config.clone()).unwrap()),
        sink.clone(),
    );
    const LAST: u64 = 15;
    for sequence in 1..=LAST {
        let batch: Vec<FanoutMessage> = accounts
            .iter()
            .map(|a| common::message(a, sequence))
            .collect();
        for r in publisher.publish(&batch).await {
            r.expect("confirmed");
        }
    }
    let total = accounts.len() * LAST as usize;
    let all = common::eventually(WAIT, || async { sink.accepted().len() >= total }).await;
    running.stop().await.expect("clean shutdown");
    assert!(all, "got {} of {total}", sink.accepted().len());

    let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for m in sink.accepted() {
        seen.entry(m.account.as_str().to_owned())
            .or_default()
            .push(m.sequence);
    }
    let expected: Vec<u64> = (1..=LAST).collect();
    for a in &accounts {
        assert_eq!(seen.get(a), Some(&expected), "order of {a}");
    }
}

/// A sink refusing transiently three times: the same delivery is handed again (same
/// delivery id), nothing behind it on the queue overtakes it, and it is acked only
/// after the `Ok` (the queue ends empty).
#[tokio::test]
async fn transient_sink_error_is_retried_not_skipped() {
    let url = require_broker!();
    let config = common::fresh_config(&url, "retry", 1);
    let _cleanup = Cleanup::new(&config);
    let publisher = AmqpPublisher::new(config.clone()).unwrap();
    let first = common::message("merchants:1", 1);
    let second = common::message("merchants:1", 2);
    let other = common::message("merchants:2", 1);
    for m in [&first, &second, &other] {
        assert!(publisher.publish(std::slice::from_ref(m)).await[0].is_ok());
    }
    let sink = RecordingSink::new();
    sink.fail_transiently(&first.instruction_id, 3);
    let running = common::spawn(
        Arc::new(AmqpSubscriber::new(config.clone()).unwrap()),
        sink.clone(),
    );
    let all = common::eventually(WAIT, || async { sink.accepted().len() >= 3 }).await;
    running.stop().await.expect("clean shutdown");
    assert!(all, "calls: {:?}", sink.calls());

    let calls = sink.calls();
    let ids: Vec<&str> = calls.iter().map(|(_, id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        [
            first.instruction_id.as_str(),
            &first.instruction_id,
            &first.instruction_id,
            &first.instruction_id,
            &second.instruction_id,
            &other.instruction_id
        ],
        "the refused message is re-handed before anything behind it"
    );
    let verdicts: Vec<bool> = calls.iter().map(|(_, _, ok)| *ok).collect();
    assert_eq!(verdicts, [false, false, false, true, true, true]);
    assert!(
        calls[..4].iter().all(|(d, _, _)| *d == calls[0].0),
        "retried in hand, not redelivered: {calls:?}"
    );
    assert_eq!(
        common::ready_count(&url, &format!("{}.0", config.exchange)).await,
        0
    );
}

/// A delivery the sink never accepted is not acked: after shutdown it is back on
/// the queue and the next subscriber gets it.
#[tokio::test]
async fn unacked_delivery_goes_to_the_next_subscriber() {
    let url = require_broker!();
    let config = common::fresh_config(&url, "handover", 2);
    let _cleanup = Cleanup::new(&config);
    let publisher = AmqpPublisher::new(config.clone()).unwrap();
    let m = common::message("merchants:5", 1);
    assert!(publisher.publish(std::slice::from_ref(&m)).await[0].is_ok());
    let queue = publisher
        .topology()
        .queue_name(publisher.topology().queue_index(&m.account));

    let stubborn = RecordingSink::new();
    stubborn.fail_transiently(&m.instruction_id, u32::MAX);
    let running = common::spawn(
        Arc::new(AmqpSubscriber::new(config.clone()).unwrap()),
        stubborn.clone(),
    );
    let tried = common::eventually(WAIT, || async { stubborn.calls().len() >= 2 }).await;
    running
        .stop()
        .await
        .expect("shutdown during retries is clean");
    assert!(tried, "calls: {:?}", stubborn.calls());
    assert!(stubborn.accepted().is_empty());
    assert_eq!(
        common::ready_count(&url, &queue).await,
        1,
        "back on {queue}"
    );

    let sink = RecordingSink::new();
    let running = common::spawn(
        Arc::new(AmqpSubscriber::new(config.clone()).unwrap()),
        sink.clone(),
    );
    let got = common::eventually(WAIT, || async { !sink.accepted().is_empty() }).await;
    running.stop().await.expect("clean shutdown");
    assert!(got, "the next subscriber received nothing");
    assert_eq!(sink.accepted(), vec![m]);
    assert_eq!(common::ready_count(&url, &queue).await, 0);
}

/// A permanent sink error ends `run` with that error and leaves the message queued.
#[tokio::test]
async fn permanent_sink_error_ends_run_and_keeps_the_message() {
    let url = require_broker!();
    let config = common::fresh_config(&url, "permanent", 1);
    let _cleanup = Cleanup::new(&config);
    let publisher = AmqpPublisher::new(config.clone()).unwrap();
    let m = common::message("merchants:8", 4);
    assert!(publisher.publish(std::slice::from_ref(&m)).await[0].is_ok());
    let sink = RecordingSink::new();
    sink.fail_permanently(&m.instruction_id);
    let running = common::spawn(
        Arc::new(AmqpSubscriber::new(config.clone()).unwrap()),
        sink.clone(),
    );
    let err = running
        .finished(WAIT)
        .await
        .expect_err("run ends with the sink's error");
    assert_eq!(err.kind(), &ErrorKind::Handler);
    assert_eq!(err.retry(), Retry::Permanent);
    assert_eq!(
        err.context("queue"),
        Some(format!("{}.0", config.exchange).as_str())
    );
    assert_eq!(err.context("sequence"), Some("4"));
    assert_eq!(sink.calls().len(), 1);
    assert_eq!(
        common::ready_count(&url, &format!("{}.0", config.exchange)).await,
        1
    );
}

/// A delivery whose headers do not decode ends `run` with an error naming the
/// header; it is requeued, not lost and not acked.
#[tokio::test]
async fn undecodable_headers_end_run_naming_the_header() {
    let url = require_broker!();
    let config = common::fresh_config(&url, "poison", 1);
    let _cleanup = Cleanup::new(&config);
    let (connection, channel) = common::connect(&url).await;
    common::declare_like_the_crate(&channel, &config).await;
    let m = common::message("merchants:3", 1);
    let mut table = FieldTable::default();
    for (name, value) in headers::encode(&m) {
        if name != headers::SEQUENCE {
            table.insert(name.into(), AMQPValue::LongString(value.into()));
        }
    }
    channel
        .basic_publish(
            config.exchange.as_str().into(),
            "0".into(),
            BasicPublishOptions::default(),
            &m.payload,
            BasicProperties::default()
                .with_headers(table)
                .with_delivery_mode(2),
        )
        .await
        .unwrap();
    let _ = connection.close(200, "published".into()).await;

    let sink = RecordingSink::new();
    let running = common::spawn(
        Arc::new(AmqpSubscriber::new(config.clone()).unwrap()),
        sink.clone(),
    );
    let err = running
        .finished(WAIT)
        .await
        .expect_err("a poison message stops run");
    assert_eq!(err.field(), Some("header outbox-sequence"), "{err}");
    assert_eq!(
        err.context("queue"),
        Some(format!("{}.0", config.exchange).as_str())
    );
    assert!(sink.calls().is_empty(), "never handed to the sink");
    assert_eq!(
        common::ready_count(&url, &format!("{}.0", config.exchange)).await,
        1
    );
}

/// No queue bound for the account's routing key: the `mandatory` publish comes
/// back and is a permanent error naming exchange and routing key, and the
/// publisher keeps working for routable messages.
#[tokio::test]
async fn unroutable_is_a_permanent_error() {
    let url = require_broker!();
    let config = outbox_transport_amqp::AmqpConfig {
        declare_topology: false,
        ..common::fresh_config(&url, "unroutable", 2)
    };
    let _cleanup = Cleanup::new(&config);
    let topology = Topology::new(config.exchange.clone(), 2);
    let lost = common::message("merchants:1", 1);
    let routed = common::message("merchants:2", 1);
    let (lost_key, routed_key) = (
        topology.queue_index(&lost.account),
        topology.queue_index(&routed.account),
    );
    assert_ne!(
        lost_key, routed_key,
        "test accounts must use different queues"
    );
    let (connection, channel) = common::connect(&url).await;
    common::declare_like_the_crate(&channel, &config).await;
    channel
        .queue_unbind(
            topology.queue_name(lost_key).as_str().into(),
            config.exchange.as_str().into(),
            lost_key.to_string().into(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let _ = connection.close(200, "declared".into()).await;

    let publisher = AmqpPublisher::new(config.clone()).unwrap();
    let results = publisher.publish(&[lost.clone(), routed.clone()]).await;
    let err = results[0].clone().expect_err("unroutable");
    assert_eq!(err.kind(), &ErrorKind::Transport);
    assert_eq!(err.retry(), Retry::Permanent, "{err}");
    assert_eq!(err.context("exchange"), Some(config.exchange.as_str()));
    assert_eq!(
        err.context("routing_key"),
        Some(lost_key.to_string().as_str())
    );
    assert_eq!(err.context("account"), Some("merchants:1"));
    assert_eq!(err.context("sequence"), Some("1"));
    assert!(err.message().contains(&config.exchange), "{err}");
    assert!(results[1].is_ok(), "{:?}", results[1]);
    // Still unroutable on the same (healthy) connection, still permanent.
    let again = publisher.publish(std::slice::from_ref(&lost)).await;
    assert_eq!(again[0].as_ref().unwrap_err().retry(), Retry::Permanent);
    assert_eq!(
        common::ready_count(&url, &topology.queue_name(routed_key)).await,
        1,
        "only the routable message arrived"
    );
}

/// A full `reject-publish` queue makes RabbitMQ nack: a transient error for that
/// message, `Ok` for the next one of the same batch (results keep input order).
#[tokio::test]
async fn nack_is_a_transient_error() {
    let url = require_broker!();
    let config = outbox_transport_amqp::AmqpConfig {
        declare_topology: false,
        ..common::fresh_config(&url, "nack", 2)
    };
    let _cleanup = Cleanup::new(&config);
    let topology = Topology::new(config.exchange.clone(), 2);
    let full_account = "merchants:1";
    let free_account = "merchants:2";
    let full = topology.queue_index(&common::account(full_account));
    let free = topology.queue_index(&common::account(free_account));
    assert_ne!(full, free);
    let (connection, channel) = common::connect(&url).await;
    common::declare_exchange(&channel, &config.exchange).await;
    let mut bounded = FieldTable::default();
    bounded.insert("x-max-length".into(), AMQPValue::LongInt(1));
    bounded.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    common::bind_queue(&channel, &config, full, bounded).await;
    common::bind_queue(&channel, &config, free, FieldTable::default()).await;
    let _ = connection.close(200, "declared".into()).await;

    let publisher = AmqpPublisher::new(config.clone()).unwrap();
    let filler = common::message(full_account, 1);
    assert!(publisher.publish(&[filler]).await[0].is_ok());
    let refused = common::message(full_account, 2);
    let accepted = common::message(free_account, 1);
    let results = publisher.publish(&[refused, accepted]).await;
    let err = results[0].clone().expect_err("nacked");
    assert_eq!(err.kind(), &ErrorKind::Transport);
    assert!(err.is_transient(), "{err}");
    assert_eq!(err.context("routing_key"), Some(full.to_string().as_str()));
    assert_eq!(err.context("sequence"), Some("2"));
    assert!(results[1].is_ok(), "{:?}", results[1]);
    assert_eq!(
        common::ready_count(&url, &topology.queue_name(full)).await,
        1
    );
    assert_eq!(
        common::ready_count(&url, &topology.queue_name(free)).await,
        1
    );
}

/// No broker at the address: every message is a transient error with context, and
/// nothing hangs.
#[tokio::test]
async fn unreachable_broker_is_transient() {
    // Port 9 (discard) on loopback: nothing listens there in the test environment.
    let config = outbox_transport_amqp::AmqpConfig {
        connect_timeout_ms: 2_000,
        ..outbox_transport_amqp::AmqpConfig::new("amqp://guest:guest@127.0.0.1:9/%2f", "nowhere")
    };
    let publisher = AmqpPublisher::new(config).unwrap();
    let results = tokio::time::timeout(
        Duration::from_secs(10),
        publisher.publish(&[
            common::message("merchants:1", 1),
            common::message("merchants:2", 1),
        ]),
    )
    .await
    .expect("bounded");
    assert_eq!(results.len(), 2);
    for r in results {
        let e = r.expect_err("no broker");
        assert!(e.is_transient(), "{e}");
        assert_eq!(e.context("exchange"), Some("nowhere"));
        assert!(!e.to_string().contains("guest:guest"), "no secret in {e}");
    }
}

/// Unroutable and routable messages interleaved in large batches: each result
/// belongs to its own message even when RabbitMQ confirms several at once
/// (`multiple`), so a lost message is never reported `Ok`.
#[tokio::test]
async fn mixed_batches_attribute_returns_to_the_right_message() {
    let url = require_broker!();
    let config = outbox_transport_amqp::AmqpConfig {
        declare_topology: false,
        ..common::fresh_config(&url, "mixed", 2)
    };
    let _cleanup = Cleanup::new(&config);
    let topology = Topology::new(config.exchange.clone(), 2);
    let accounts: Vec<String> = (1..=40).map(|i| format!("merchants:{i}")).collect();
    let routed_key = topology.queue_index(&common::account(&accounts[0]));
    let (connection, channel) = common::connect(&url).await;
    common::declare_exchange(&channel, &config.exchange).await;
    common::bind_queue(&channel, &config, routed_key, FieldTable::default()).await;
    let _ = connection.close(200, "declared".into()).await;

    let publisher = AmqpPublisher::new(config.clone()).unwrap();
    let mut routed_total = 0;
    for round in 1..=10 {
        let batch: Vec<FanoutMessage> =
            accounts.iter().map(|a| common::message(a, round)).collect();
        let results = publisher.publish(&batch).await;
        assert_eq!(results.len(), batch.len());
        for (m, r) in batch.iter().zip(&results) {
            if topology.queue_index(&m.account) == routed_key {
                routed_total += 1;
                assert!(r.is_ok(), "{} should be Ok: {r:?}", m.account);
            } else {
                let e = r.as_ref().expect_err("unroutable must not be Ok");
                assert_eq!(e.retry(), Retry::Permanent, "{e}");
                assert_eq!(e.context("account"), Some(m.account.as_str()));
            }
        }
    }
    assert!(routed_total > 0 && routed_total < 400, "{routed_total}");
    assert_eq!(
        common::ready_count(&url, &topology.queue_name(routed_key)).await,
        routed_total
    );
}
