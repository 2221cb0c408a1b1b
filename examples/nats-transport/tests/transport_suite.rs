//! testkit's transport suite, unchanged, on NATS JetStream: `NatsPublisher` → stream
//! → durable pull consumer → `NatsSubscriber`, with testkit's probe (the real SQLite
//! inbox) behind it. The harness implements only `new` and `destination`: the
//! database side is testkit's default. Non-restartable destinations use the shared
//! server (`OUTBOX_NATS_URL`, default nats://127.0.0.1:4222); the restart case gets a
//! `nats-server` of its own, which it stops and starts.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{ErrorKind, MessageKind, Publisher, Subscriber};
use outbox_example_nats_transport::{NatsConfig, NatsPublisher, NatsSubscriber};
use outbox_testkit::transport_cases::message;
use outbox_testkit::{Destination, InjectedFault, TransportHarness};
use support::server::OwnServer;
use tokio::sync::Mutex;

/// The default `max_payload` of a NATS server (1 MiB): a larger message is refused.
const SERVER_MAX_PAYLOAD: usize = 1024 * 1024;

struct NatsHarness;

struct NatsDestination {
    config: NatsConfig,
    /// Set for a restartable destination: the server the case may stop.
    own: Option<Mutex<OwnServer>>,
}

fn shared_url() -> String {
    std::env::var("OUTBOX_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

/// Short bounds, so that a fault or a restart costs the case seconds, not minutes.
fn quick(url: &str, id: u64) -> NatsConfig {
    let mut config = NatsConfig::new(
        url,
        format!("OUTBOX_SUITE_{id:016x}"),
        format!("outbox.suite.{id:016x}"),
    );
    config.connect_timeout = Duration::from_secs(2);
    config.ack_timeout = Duration::from_secs(2);
    config.ack_wait = Duration::from_secs(10);
    config.fetch_wait = Duration::from_millis(500);
    config.backoff.initial = Duration::from_millis(100);
    config.backoff.max = Duration::from_secs(1);
    config
}

#[async_trait]
impl Destination for NatsDestination {
    fn publisher(&self) -> Arc<dyn Publisher> {
        Arc::new(NatsPublisher::new(self.config.clone()).unwrap())
    }

    async fn subscriber(&self) -> Arc<dyn Subscriber> {
        Arc::new(NatsSubscriber::new(self.config.clone()).unwrap())
    }

    async fn stop_broker(&self) {
        let own = self.own.as_ref().expect("a restartable destination");
        own.lock().await.stop().await;
    }

    async fn start_broker(&self) {
        let own = self.own.as_ref().expect("a restartable destination");
        own.lock().await.resume().await;
    }

    async fn faults(&self) -> Vec<InjectedFault> {
        let down = quick(
            &format!("nats://127.0.0.1:{}", outbox_testkit::ports::free_port()),
            fastrand::u64(..),
        );
        // The stream captures exactly its subject: a subject beside it has no stream.
        let mut unbound = self.config.clone();
        unbound.subject = format!("{}.unbound", self.config.subject);
        unbound.declare = false;
        let mut large = message("merchants:3", 1, MessageKind::Committed);
        large.payload = vec![b' '; SERVER_MAX_PAYLOAD + 1];
        vec![
            InjectedFault {
                name: "server unreachable",
                publisher: Arc::new(NatsPublisher::new(down).unwrap()),
                message: message("merchants:1", 1, MessageKind::Committed),
                kind: ErrorKind::Transport,
                transient: true,
                after: None,
            },
            InjectedFault {
                name: "no stream for the subject (no responders)",
                publisher: Arc::new(NatsPublisher::new(unbound).unwrap()),
                message: message("merchants:2", 1, MessageKind::Committed),
                kind: ErrorKind::Transport,
                transient: false,
                after: None,
            },
            InjectedFault {
                name: "message over the server's max_payload",
                publisher: self.publisher(),
                message: large,
                kind: ErrorKind::Transport,
                transient: false,
                after: None,
            },
        ]
    }

    async fn cleanup(&self) {
        // Streams are file-backed and named per case: delete this one so runs leave
        // nothing on the shared server (an own server goes with its directory).
        if self.own.is_some() {
            return;
        }
        let work = async {
            let client = async_nats::connect(self.config.url.as_str()).await.ok()?;
            let context = async_nats::jetstream::new(client);
            context.delete_stream(&self.config.stream).await.ok()?;
            Some(())
        };
        let done = tokio::time::timeout(Duration::from_secs(10), work).await;
        assert!(
            matches!(done, Ok(Some(()))),
            "cleanup of stream {} failed",
            self.config.stream
        );
    }
}

#[async_trait]
impl TransportHarness for NatsHarness {
    async fn new() -> Self {
        Self
    }

    async fn destination(&self, restartable: bool) -> Result<Box<dyn Destination>, String> {
        let id = fastrand::u64(..);
        if restartable {
            let own = OwnServer::start().await?;
            return Ok(Box::new(NatsDestination {
                config: quick(&own.url(), id),
                own: Some(Mutex::new(own)),
            }));
        }
        let url = shared_url();
        let connect = async_nats::connect(url.as_str());
        let reachable = matches!(
            tokio::time::timeout(Duration::from_secs(5), connect).await,
            Ok(Ok(_))
        );
        if !reachable {
            return Err(format!("no NATS server at {url}"));
        }
        Ok(Box::new(NatsDestination {
            config: quick(&url, id),
            own: None,
        }))
    }
}

outbox_testkit::transport_suite!(NatsHarness);
