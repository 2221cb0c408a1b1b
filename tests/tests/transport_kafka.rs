//! The transport conformance suite on Kafka (a real Tansu broker): `KafkaPublisher`
//! → topic → `KafkaSubscriber`, with the real SQLite inbox behind it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{ErrorKind, MessageKind, Publisher, Subscriber};
use outbox_testkit::tansu::OwnBroker;
use outbox_testkit::transport_cases::message;
use outbox_testkit::{Destination, InjectedFault, TransportHarness};
use outbox_transport_kafka::{
    KafkaPublisher, KafkaSubscriber, PublisherConfig, SubscriberConfig, create_topic,
};
use tokio::sync::Mutex;

const PARTITIONS: i32 = 4;

struct KafkaHarness;

struct KafkaDestination {
    brokers: String,
    topic: String,
    group: String,
    /// Set for a restartable destination: the broker the case may stop.
    own: Option<Mutex<OwnBroker>>,
}

fn shared_brokers() -> String {
    std::env::var("OUTBOX_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

fn publisher(brokers: &str, topic: &str, timeout: Duration) -> PublisherConfig {
    PublisherConfig::new(brokers, topic).with_message_timeout(timeout)
}

async fn make_topic(brokers: &str, topic: &str) -> Result<(), String> {
    // A broker that just started may refuse for a moment: bounded retries.
    let mut last = String::new();
    for _ in 0..50 {
        match create_topic(brokers, topic, PARTITIONS, None, Duration::from_secs(5)).await {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("no Kafka broker at {brokers}: {last}"))
}

#[async_trait]
impl Destination for KafkaDestination {
    fn publisher(&self) -> Arc<dyn Publisher> {
        let config = publisher(&self.brokers, &self.topic, Duration::from_secs(5));
        Arc::new(KafkaPublisher::new(config).unwrap())
    }

    async fn subscriber(&self) -> Arc<dyn Subscriber> {
        let mut config = SubscriberConfig::new(&self.brokers, &self.topic, &self.group);
        config.session_timeout_ms = 6_000;
        config.retry_initial_ms = 20;
        config.retry_max_ms = 500;
        Arc::new(KafkaSubscriber::new(config).unwrap())
    }

    async fn stop_broker(&self) {
        self.own
            .as_ref()
            .expect("a restartable destination")
            .lock()
            .await
            .kill();
    }

    async fn start_broker(&self) {
        let own = self.own.as_ref().expect("a restartable destination");
        // Memory storage: the topic is gone with the old process; it is recreated
        // before clients get through again.
        own.lock()
            .await
            .restart_with_topics(&[(&self.topic, PARTITIONS as u32)])
            .await;
    }

    fn consumers_survive_restart(&self) -> bool {
        // Tansu with memory storage: the group's offsets go with the process.
        false
    }

    async fn faults(&self) -> Vec<InjectedFault> {
        let closed = format!("127.0.0.1:{}", outbox_testkit::ports::free_port());
        let mut small = publisher(&self.brokers, &self.topic, Duration::from_secs(5));
        small
            .librdkafka
            .insert("message.max.bytes".into(), "1000".into());
        let mut oversize = message("merchants:1", 1, MessageKind::Committed);
        oversize.payload = format!("{{\"pad\":\"{}\"}}", "x".repeat(4000)).into_bytes();
        vec![
            InjectedFault {
                name: "broker unreachable (message timeout)",
                publisher: Arc::new(
                    KafkaPublisher::new(publisher(&closed, &self.topic, Duration::from_secs(2)))
                        .unwrap(),
                ),
                message: message("merchants:1", 1, MessageKind::Committed),
                kind: ErrorKind::Transport,
                transient: true,
                after: None,
            },
            InjectedFault {
                name: "message larger than message.max.bytes",
                publisher: Arc::new(KafkaPublisher::new(small).unwrap()),
                message: oversize,
                kind: ErrorKind::Transport,
                transient: false,
                after: None,
            },
        ]
    }

    async fn cleanup(&self) {
        if let Some(own) = &self.own {
            own.lock().await.kill();
        }
    }
}

#[async_trait]
impl TransportHarness for KafkaHarness {
    async fn new() -> Self {
        Self
    }

    async fn destination(&self, restartable: bool) -> Result<Box<dyn Destination>, String> {
        let (brokers, own) = if restartable {
            let own = OwnBroker::start().await?;
            (own.brokers(), Some(Mutex::new(own)))
        } else {
            (shared_brokers(), None)
        };
        let suffix = fastrand::u64(..);
        let topic = format!("outbox-suite-{suffix:x}");
        make_topic(&brokers, &topic).await?;
        Ok(Box::new(KafkaDestination {
            brokers,
            topic,
            group: format!("outbox-suite-group-{suffix:x}"),
            own,
        }))
    }
}

outbox_testkit::transport_suite!(KafkaHarness);
