//! The transport conformance suite on HTTP: `HttpPublisher` → (a forwarder that can
//! be cut) → `HttpSubscriber`, with the real SQLite inbox behind it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{ErrorKind, MessageKind, MessageSink, Publisher, Subscriber};
use outbox_testkit::forwarder::TcpForwarder;
use outbox_testkit::transport_cases::message;
use outbox_testkit::{Destination, InjectedFault, TransportHarness};
use outbox_transport_http::{
    HttpPublisher, HttpSubscriber, MESSAGES_PATH, PublisherConfig, SubscriberConfig,
};
use tokio::sync::watch;

const SECRET: &str = "hop2-test-secret";

struct HttpHarness;

struct HttpDestination {
    subscriber_addr: SocketAddr,
    forwarder: Arc<TcpForwarder>,
    /// Stops the subscriber the fault cases answer from.
    fault_server: std::sync::Mutex<Option<watch::Sender<bool>>>,
}

fn publisher_to(addr: SocketAddr, secret: &str) -> Arc<dyn Publisher> {
    let mut config = PublisherConfig::new(format!("http://{addr}{MESSAGES_PATH}"), secret);
    config.timeout = Duration::from_secs(5);
    Arc::new(HttpPublisher::new(config).unwrap())
}

#[async_trait]
impl Destination for HttpDestination {
    fn publisher(&self) -> Arc<dyn Publisher> {
        publisher_to(self.forwarder.listen, SECRET)
    }

    async fn subscriber(&self) -> Arc<dyn Subscriber> {
        // Bound here, served by `run`: the suite runs one subscriber at a time.
        let mut bound = None;
        for _ in 0..100 {
            match HttpSubscriber::bind(SubscriberConfig::new(self.subscriber_addr, SECRET)).await {
                Ok(s) => {
                    bound = Some(s);
                    break;
                }
                // The previous subscriber of this destination may still be releasing the port.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        Arc::new(bound.expect("bind the HTTP subscriber"))
    }

    async fn stop_broker(&self) {
        self.forwarder.cut();
    }

    async fn start_broker(&self) {
        self.forwarder.restore().await;
    }

    async fn faults(&self) -> Vec<InjectedFault> {
        let closed: SocketAddr = ([127, 0, 0, 1], outbox_testkit::ports::free_port()).into();
        // A live subscriber that checks signatures, for the 401 case.
        let live = HttpSubscriber::bind(SubscriberConfig::new(([127, 0, 0, 1], 0).into(), SECRET))
            .await
            .expect("bind the fault subscriber");
        let live_addr = live.local_addr();
        let (stop, shutdown) = watch::channel(false);
        let sink: Arc<dyn MessageSink> = outbox_testkit::SqliteProbe::new().await;
        tokio::spawn(async move { live.run(sink, shutdown).await });
        *self.fault_server.lock().unwrap() = Some(stop);
        vec![
            InjectedFault {
                name: "endpoint down (connection refused)",
                publisher: publisher_to(closed, SECRET),
                message: message("merchants:1", 1, MessageKind::Committed),
                kind: ErrorKind::Transport,
                transient: true,
                after: None,
            },
            InjectedFault {
                name: "signature refused (401)",
                publisher: publisher_to(live_addr, "not-the-shared-secret"),
                message: message("merchants:1", 1, MessageKind::Committed),
                kind: ErrorKind::Transport,
                transient: false,
                after: None,
            },
        ]
    }

    async fn cleanup(&self) {
        self.forwarder.cut();
        if let Some(stop) = self.fault_server.lock().unwrap().take() {
            let _ = stop.send(true);
        }
    }
}

#[async_trait]
impl TransportHarness for HttpHarness {
    async fn new() -> Self {
        Self
    }

    async fn destination(&self, _restartable: bool) -> Result<Box<dyn Destination>, String> {
        let subscriber_addr: SocketAddr =
            ([127, 0, 0, 1], outbox_testkit::ports::free_port()).into();
        let forwarder = TcpForwarder::start(subscriber_addr).await;
        Ok(Box::new(HttpDestination {
            subscriber_addr,
            forwarder,
            fault_server: std::sync::Mutex::new(None),
        }))
    }
}

outbox_testkit::transport_suite!(HttpHarness);
