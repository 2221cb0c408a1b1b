//! Hop 2 over real HTTP on loopback: `HttpPublisher` → `HttpSubscriber` round trips
//! with every field intact; refusals at the subscriber; and the publisher's retry
//! class for each endpoint fault.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use outbox_core::fanout::headers;
use outbox_core::{
    Error, ErrorKind, FanoutMessage, MessageSink, Publisher, Result, Retry, Subscriber,
};
use outbox_transport_http::{
    HttpPublisher, HttpSubscriber, MESSAGES_PATH, PublisherConfig, SubscriberConfig,
};
use tokio::sync::{Barrier, watch};
use tokio::task::JoinHandle;

use common::{HOP2_SECRET, TRACEPARENT, committed, now, post_hop2_signed, rejection};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Answer {
    #[default]
    Apply,
    Transient,
    Permanent,
}

/// The consumer's sink: records what it applied.
#[derive(Default)]
struct Recorder {
    got: Mutex<Vec<(String, FanoutMessage)>>,
    calls: Mutex<usize>,
    answer: Mutex<Answer>,
}

impl Recorder {
    fn got(&self) -> Vec<(String, FanoutMessage)> {
        self.got.lock().unwrap().clone()
    }

    fn calls(&self) -> usize {
        *self.calls.lock().unwrap()
    }

    fn answer(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }
}

#[async_trait]
impl MessageSink for Recorder {
    async fn accept(&self, delivery_id: &str, messages: Vec<FanoutMessage>) -> Result<()> {
        *self.calls.lock().unwrap() += 1;
        let answer = *self.answer.lock().unwrap();
        match answer {
            Answer::Apply => {
                let mut got = self.got.lock().unwrap();
                got.extend(messages.into_iter().map(|m| (delivery_id.to_owned(), m)));
                Ok(())
            }
            Answer::Transient => {
                Err(Error::new(ErrorKind::Storage, "inbox database is busy").transient(None))
            }
            Answer::Permanent => Err(Error::new(ErrorKind::Handler, "impact refused")),
        }
    }
}

struct Running {
    subscriber: Arc<HttpSubscriber>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<()>>,
}

impl Running {
    async fn stop(self) {
        self.stop.send(true).unwrap();
        let result = tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the subscriber stopped in time")
            .unwrap();
        assert!(result.is_ok(), "{result:?}");
    }
}

async fn subscriber(sink: Arc<Recorder>) -> Running {
    let subscriber = Arc::new(
        HttpSubscriber::bind(SubscriberConfig::new(
            ([127, 0, 0, 1], 0).into(),
            HOP2_SECRET,
        ))
        .await
        .unwrap(),
    );
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn({
        let subscriber = subscriber.clone();
        async move { subscriber.run(sink, stopped).await }
    });
    Running {
        subscriber,
        stop,
        task,
    }
}

fn publisher(url: &str, secret: &str) -> HttpPublisher {
    let mut config = PublisherConfig::new(url, secret);
    config.timeout = Duration::from_secs(5);
    HttpPublisher::new(config).unwrap()
}

#[tokio::test]
async fn round_trip_keeps_every_field() {
    let sink = Arc::new(Recorder::default());
    let running = subscriber(sink.clone()).await;
    let url = running.subscriber.url();
    assert_eq!(
        url,
        format!("http://{}{MESSAGES_PATH}", running.subscriber.local_addr())
    );
    let publisher = publisher(&url, HOP2_SECRET);
    assert!(!publisher.capabilities().ordered_pipeline);
    assert_eq!(publisher.name(), url);

    let traced = FanoutMessage {
        traceparent: Some(TRACEPARENT.into()),
        tracestate: Some("vendor=abc,other=1".into()),
        ..committed("merchants:4471", 7, 41)
    };
    let reversal = FanoutMessage {
        kind: outbox_core::MessageKind::Reverted,
        ..committed("merchants:4472", 2, 42)
    };
    let notice = rejection("merchants:9", 3);
    let sent = vec![traced, reversal, notice];

    let results = publisher.publish(&sent).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    let mut got = sink.got();
    got.sort_by_key(|(_, m)| m.account.as_str().to_owned());
    assert_eq!(got.len(), 3);
    for ((delivery_id, received), sent) in got.iter().zip(&sent) {
        assert_eq!(received, sent, "the message arrived unchanged");
        assert_eq!(
            delivery_id,
            &sent.dedup_key(),
            "delivery id is the dedup key"
        );
    }
    assert_eq!(
        got[2].1.ledger_tx_id, None,
        "a rejection notice has no tx id"
    );

    // A retry of the same message carries the same delivery id, fresh signature.
    assert!(publisher.publish(&sent[..1]).await[0].is_ok());
    assert_eq!(sink.got().last().unwrap().0, sent[0].dedup_key());
    running.stop().await;
}

#[tokio::test]
async fn a_bad_signature_is_refused_before_the_sink() {
    let sink = Arc::new(Recorder::default());
    let running = subscriber(sink.clone()).await;
    let url = running.subscriber.url();

    let results = publisher(&url, "not-our-secret")
        .publish(&[committed("merchants:4471", 1, 1)])
        .await;
    let err = results[0].as_ref().unwrap_err();
    assert_eq!(
        (err.kind(), err.retry(), err.context("status")),
        (&ErrorKind::Transport, Retry::Permanent, Some("401"))
    );

    let unsigned = reqwest::Client::new()
        .post(&url)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 401);

    let body = br#"{"id":1}"#;
    let (status, json) = post_hop2_signed(
        &url,
        "payouts:tx:1:committed",
        now() - 600,
        HOP2_SECRET,
        body,
        body.to_vec(),
        &[],
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (401, Some("outbox-timestamp"))
    );
    assert_eq!(sink.calls(), 0, "the sink saw a refused message");
    running.stop().await;
}

#[tokio::test]
async fn a_missing_identity_header_is_named_and_never_applied() {
    let sink = Arc::new(Recorder::default());
    let running = subscriber(sink.clone()).await;
    let url = running.subscriber.url();
    let message = committed("merchants:4471", 1, 1);
    let encoded: Vec<(&str, String)> = headers::encode(&message)
        .into_iter()
        .filter(|(name, _)| *name != headers::SEQUENCE)
        .collect();
    let extra: Vec<(&str, &str)> = encoded.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let (status, json) = post_hop2_signed(
        &url,
        &message.dedup_key(),
        now(),
        HOP2_SECRET,
        &message.payload,
        message.payload.clone(),
        &extra,
    )
    .await;
    assert_eq!(
        (status, json["field"].as_str()),
        (400, Some("header outbox-sequence")),
        "{json}"
    );
    assert_eq!(sink.calls(), 0);
    running.stop().await;
}

/// A correctly signed message that does not say it is JSON is refused 415 naming the
/// header, and never reaches the sink.
#[tokio::test]
async fn a_message_not_sent_as_json_is_refused_415_and_never_applied() {
    let sink = Arc::new(Recorder::default());
    let running = subscriber(sink.clone()).await;
    let url = running.subscriber.url();
    let message = committed("merchants:4471", 1, 1);
    let encoded = headers::encode(&message);
    for content_type in ["text/plain", ""] {
        let mut extra: Vec<(&str, &str)> = encoded.iter().map(|(n, v)| (*n, v.as_str())).collect();
        extra.push(("content-type", content_type));
        let (status, json) = post_hop2_signed(
            &url,
            &message.dedup_key(),
            now(),
            HOP2_SECRET,
            &message.payload,
            message.payload.clone(),
            &extra,
        )
        .await;
        assert_eq!(
            (status, json["field"].as_str()),
            (415, Some("header content-type")),
            "content-type {content_type:?}: {json}"
        );
    }
    assert_eq!(sink.calls(), 0, "the sink saw a refused message");
    running.stop().await;
}

#[tokio::test]
async fn sink_failures_come_back_to_the_publisher_as_retryable() {
    let sink = Arc::new(Recorder::default());
    let running = subscriber(sink.clone()).await;
    let publisher = publisher(&running.subscriber.url(), HOP2_SECRET);
    let message = committed("merchants:4471", 1, 1);

    sink.answer(Answer::Transient);
    let err = publisher
        .publish(std::slice::from_ref(&message))
        .await
        .remove(0)
        .unwrap_err();
    assert_eq!(
        (err.retry(), err.context("status")),
        (Retry::Transient { after: None }, Some("503"))
    );
    assert_eq!(err.context("account"), Some("merchants:4471"));

    sink.answer(Answer::Permanent);
    let err = publisher
        .publish(std::slice::from_ref(&message))
        .await
        .remove(0)
        .unwrap_err();
    assert_eq!(err.context("status"), Some("500"));
    assert!(err.is_transient(), "a 5xx is retried: {err}");

    sink.answer(Answer::Apply);
    assert!(publisher.publish(&[message]).await[0].is_ok());
    assert_eq!(sink.got().len(), 1);
    running.stop().await;
}

/// An endpoint whose answer depends on the account of the message.
async fn faulty_endpoint() -> (String, JoinHandle<()>) {
    let barrier = Arc::new(Barrier::new(3));
    let app = Router::new()
        .route(
            "/faults",
            post(|headers: HeaderMap| async move {
                match headers[headers::ACCOUNT].to_str().unwrap() {
                    "merchants:503" => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                    "merchants:429" => {
                        (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "2")]).into_response()
                    }
                    "merchants:400" => (StatusCode::BAD_REQUEST, "unknown account").into_response(),
                    "merchants:slow" => {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        StatusCode::NO_CONTENT.into_response()
                    }
                    _ => StatusCode::NO_CONTENT.into_response(),
                }
            }),
        )
        .route(
            "/together",
            // Answers only once three requests are in flight at the same time.
            post(move || {
                let barrier = barrier.clone();
                async move {
                    barrier.wait().await;
                    StatusCode::NO_CONTENT
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (base, task)
}

#[tokio::test]
async fn endpoint_faults_are_classified_per_message_in_input_order() {
    let (base, server) = faulty_endpoint().await;
    let publisher = publisher(&format!("{base}/faults"), HOP2_SECRET);
    let messages = [
        committed("merchants:503", 1, 1),
        committed("merchants:429", 1, 2),
        committed("merchants:400", 1, 3),
        committed("merchants:ok", 1, 4),
    ];
    let results = publisher.publish(&messages).await;
    assert_eq!(results.len(), 4);

    let e503 = results[0].as_ref().unwrap_err();
    assert_eq!(
        (e503.kind(), e503.retry(), e503.context("status")),
        (
            &ErrorKind::Transport,
            Retry::Transient { after: None },
            Some("503")
        )
    );
    let e429 = results[1].as_ref().unwrap_err();
    assert_eq!(
        (e429.retry(), e429.context("status")),
        (
            Retry::Transient {
                after: Some(Duration::from_secs(2))
            },
            Some("429")
        )
    );
    let e400 = results[2].as_ref().unwrap_err();
    assert_eq!(
        (e400.kind(), e400.retry(), e400.context("status")),
        (&ErrorKind::Transport, Retry::Permanent, Some("400"))
    );
    assert!(e400.message().contains("unknown account"), "{e400}");
    assert_eq!(
        e400.context("endpoint"),
        Some(format!("{base}/faults").as_str())
    );
    assert!(results[3].is_ok());
    server.abort();
}

#[tokio::test]
async fn a_closed_port_and_a_timeout_are_transient() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let results = publisher(&format!("http://{closed}{MESSAGES_PATH}"), HOP2_SECRET)
        .publish(&[committed("merchants:4471", 1, 1)])
        .await;
    let err = results[0].as_ref().unwrap_err();
    assert_eq!(
        (err.kind(), err.retry()),
        (&ErrorKind::Transport, Retry::Transient { after: None }),
        "{err}"
    );

    let (base, server) = faulty_endpoint().await;
    let mut config = PublisherConfig::new(format!("{base}/faults"), HOP2_SECRET);
    config.timeout = Duration::from_millis(200);
    let results = HttpPublisher::new(config)
        .unwrap()
        .publish(&[committed("merchants:slow", 1, 1)])
        .await;
    let err = results[0].as_ref().unwrap_err();
    assert_eq!(
        (err.kind(), err.retry()),
        (&ErrorKind::Transport, Retry::Transient { after: None }),
        "{err}"
    );
    assert!(err.message().contains("no answer in time"), "{err}");
    server.abort();
}

#[tokio::test]
async fn messages_of_one_call_are_sent_concurrently() {
    let (base, server) = faulty_endpoint().await;
    let mut config = PublisherConfig::new(format!("{base}/together"), HOP2_SECRET);
    // Sent one after the other, the first would wait for the other two and time out.
    config.timeout = Duration::from_secs(2);
    let results = HttpPublisher::new(config)
        .unwrap()
        .publish(&[
            committed("merchants:1", 1, 1),
            committed("merchants:2", 1, 2),
            committed("merchants:3", 1, 3),
        ])
        .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    server.abort();
}

#[tokio::test]
async fn run_can_serve_again_after_a_shutdown() {
    let sink = Arc::new(Recorder::default());
    let running = subscriber(sink.clone()).await;
    let subscriber = running.subscriber.clone();
    running.stop().await;

    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn({
        let subscriber = subscriber.clone();
        let sink = sink.clone();
        async move { subscriber.run(sink, stopped).await }
    });
    // The second run binds the address again in its task: retry until it listens.
    let publisher = publisher(&subscriber.url(), HOP2_SECRET);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let result = publisher
            .publish(&[committed("merchants:4471", 1, 1)])
            .await
            .remove(0);
        match result {
            Ok(()) => break,
            Err(e) if e.is_transient() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(sink.got().len(), 1);
    stop.send(true).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_oversized_message_is_refused_before_the_sink() {
    let sink = Arc::new(Recorder::default());
    let running = subscriber(sink.clone()).await;
    let huge = FanoutMessage {
        payload: vec![b' '; (1 << 20) + 1],
        ..committed("merchants:4471", 1, 1)
    };
    let err = publisher(&running.subscriber.url(), HOP2_SECRET)
        .publish(&[huge])
        .await
        .remove(0)
        .unwrap_err();
    assert_eq!(
        (err.retry(), err.context("status")),
        (Retry::Permanent, Some("413"))
    );
    assert_eq!(sink.calls(), 0);
    running.stop().await;
}

/// The last request a capture endpoint got: headers and body.
type Captured = Arc<Mutex<Option<(HeaderMap, Vec<u8>)>>>;

/// An endpoint that keeps the last request it got and answers 204.
async fn capture_endpoint() -> (String, Captured) {
    let captured: Captured = Arc::default();
    let keep = captured.clone();
    let app = Router::new().route(
        MESSAGES_PATH,
        post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let keep = keep.clone();
            async move {
                *keep.lock().unwrap() = Some((headers, body.to_vec()));
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}{MESSAGES_PATH}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, captured)
}

/// A message captured on the wire and replayed within the tolerance with another
/// instruction id, account, sequence, kind or transaction is refused: the signature
/// covers the identity headers, so a replay cannot make a consumer apply the same
/// payout again under a new instruction id (its inbox dedupes on that id).
#[tokio::test]
async fn a_replay_with_altered_identity_headers_is_refused() {
    let (capture_url, captured) = capture_endpoint().await;
    let message = committed("merchants:4471", 1, 1);
    let sent = publisher(&capture_url, HOP2_SECRET)
        .publish(std::slice::from_ref(&message))
        .await;
    assert!(sent[0].is_ok(), "{sent:?}");
    let (wire_headers, body) = captured.lock().unwrap().take().expect("captured");

    let sink = Arc::new(Recorder::default());
    let running = subscriber(sink.clone()).await;
    let url = running.subscriber.url();
    let replay = |altered: Option<(&'static str, &'static str)>| {
        let mut headers = wire_headers.clone();
        headers.remove("host");
        headers.remove("content-length");
        if let Some((name, value)) = altered {
            headers.insert(name, value.parse().unwrap());
        }
        let (url, body) = (url.clone(), body.clone());
        async move {
            let response = reqwest::Client::new()
                .post(&url)
                .headers(headers)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let json: serde_json::Value = response.json().await.unwrap_or_default();
            (status, json)
        }
    };
    assert_eq!(replay(None).await.0, 204, "the message as sent is taken");
    for altered in [
        (
            headers::INSTRUCTION_ID,
            "0190f2a0-7b1c-7cc2-8a4e-000000000999",
        ),
        (headers::ACCOUNT, "merchants:9999"),
        (headers::SEQUENCE, "2"),
        (headers::EVENT_TYPE, "reverted"),
        (headers::LEDGER, "other-ledger"),
        (headers::LEDGER_TX_ID, "77"),
    ] {
        let (status, json) = replay(Some(altered)).await;
        assert_eq!(
            (status, json["field"].as_str()),
            (401, Some("outbox-signature")),
            "{} altered to {:?} was taken: {json}",
            altered.0,
            altered.1
        );
    }
    assert_eq!(sink.got().len(), 1, "only the message as sent was applied");
    running.stop().await;
}
