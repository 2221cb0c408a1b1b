//! The transport conformance suite on RabbitMQ: `AmqpPublisher` → exchange → queues →
//! `AmqpSubscriber`, with the real SQLite inbox behind it. The restart case stops and
//! starts the shared broker's app (`rabbitmqctl stop_app` / `start_app`); the suite
//! keeps it away from this binary's other cases.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
use lapin::{Connection, ConnectionProperties};
use outbox_core::{ErrorKind, MessageKind, Publisher, Subscriber};
use outbox_testkit::transport_cases::message;
use outbox_testkit::{Destination, InjectedFault, TransportHarness};
use outbox_transport_amqp::{AmqpConfig, AmqpPublisher, AmqpSubscriber, Topology};

struct AmqpHarness;

struct AmqpDestination {
    config: AmqpConfig,
    restartable: bool,
}

fn url() -> String {
    std::env::var("OUTBOX_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

fn rabbitmqctl(args: &[&str]) {
    let status = Command::new("rabbitmqctl")
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run rabbitmqctl");
    assert!(status.success(), "rabbitmqctl {args:?} failed: {status}");
}

fn quick(mut config: AmqpConfig) -> AmqpConfig {
    config.queue_count = 4;
    config.connect_timeout_ms = 2_000;
    config.confirm_timeout_ms = 5_000;
    config.backoff_initial_ms = 100;
    config.backoff_max_ms = 1_000;
    config
}

#[async_trait]
impl Destination for AmqpDestination {
    fn publisher(&self) -> Arc<dyn Publisher> {
        Arc::new(AmqpPublisher::new(self.config.clone()).unwrap())
    }

    async fn subscriber(&self) -> Arc<dyn Subscriber> {
        Arc::new(AmqpSubscriber::new(self.config.clone()).unwrap())
    }

    async fn stop_broker(&self) {
        assert!(self.restartable);
        rabbitmqctl(&["stop_app"]);
    }

    async fn start_broker(&self) {
        rabbitmqctl(&["start_app"]);
        rabbitmqctl(&["await_startup", "--timeout", "60"]);
    }

    async fn faults(&self) -> Vec<InjectedFault> {
        let down = quick(AmqpConfig::new(
            "amqp://guest:guest@127.0.0.1:1/%2f",
            &self.config.exchange,
        ));
        // The same exchange with more queues than were bound: some routing keys have
        // no queue, so a mandatory publish comes back unroutable.
        let mut unbound = self.config.clone();
        unbound.queue_count = 64;
        unbound.declare_topology = false;
        let topology = Topology::new(&unbound.exchange, 64);
        let account = (0..10_000)
            .map(|i| format!("merchants:{i}"))
            .find(|a| topology.queue_index(&outbox_core::Account::parse(a).unwrap()) >= 4)
            .expect("an account routed past the bound queues");
        vec![
            InjectedFault {
                name: "broker unreachable",
                publisher: Arc::new(AmqpPublisher::new(down).unwrap()),
                message: message("merchants:1", 1, MessageKind::Committed),
                kind: ErrorKind::Transport,
                transient: true,
                after: None,
            },
            InjectedFault {
                name: "unroutable (mandatory return)",
                publisher: Arc::new(AmqpPublisher::new(unbound).unwrap()),
                message: message(&account, 1, MessageKind::Committed),
                kind: ErrorKind::Transport,
                transient: false,
                after: None,
            },
        ]
    }

    async fn cleanup(&self) {
        // Queues are durable and named per case: delete them and the exchange so runs
        // leave nothing on the shared broker.
        let work = async {
            let connection = Connection::connect(&self.config.uri, ConnectionProperties::default())
                .await
                .ok()?;
            let channel = connection.create_channel().await.ok()?;
            let topology = Topology::new(&self.config.exchange, self.config.queue_count);
            for queue in topology.queue_names() {
                let _ = channel
                    .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                    .await;
            }
            let _ = channel
                .exchange_delete(
                    self.config.exchange.as_str().into(),
                    ExchangeDeleteOptions::default(),
                )
                .await;
            let _ = connection.close(200, "cleanup".into()).await;
            Some(())
        };
        let done = tokio::time::timeout(Duration::from_secs(10), work).await;
        assert!(
            matches!(done, Ok(Some(()))),
            "cleanup of {} failed",
            self.config.exchange
        );
    }
}

#[async_trait]
impl TransportHarness for AmqpHarness {
    async fn new() -> Self {
        Self
    }

    async fn destination(&self, restartable: bool) -> Result<Box<dyn Destination>, String> {
        let url = url();
        let reachable = std::net::TcpStream::connect_timeout(
            &"127.0.0.1:5672".parse().unwrap(),
            Duration::from_secs(2),
        )
        .is_ok();
        if !reachable {
            return Err(format!("no RabbitMQ at {url}"));
        }
        let exchange = format!("outbox-suite-{:x}", fastrand::u64(..));
        Ok(Box::new(AmqpDestination {
            config: quick(AmqpConfig::new(url, exchange)),
            restartable,
        }))
    }
}

outbox_testkit::transport_suite!(AmqpHarness);
