//! Both hops in one process, each part the real one: a SQLite outbox and its
//! dispatcher → the dev ledger over HTTP → its signed webhooks → the fan-out intake,
//! SQLite fan-out store and loop → the signed HTTP Hop 2 publisher → the HTTP
//! subscriber → the treasury consumer's SQLite inbox (a [`Probe`] that also keeps what
//! it was handed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::{
    Backoff, FanoutConfig, FanoutLoop, FanoutStore, Ledger, LedgerTransaction, MessageSink,
    NewEvent, OutboxEvent, RunMode, Subscriber, Summary, Wakeup,
};
use outbox_ledger_dev::RunningDevLedger;
use outbox_ledger_formance::{FormanceWebhookDecoder, WebhookVerifier};
use outbox_testkit::ProbeConsumer;
use outbox_testkit::ports::free_port;
use outbox_transport_http::{
    FanoutIntake, HttpPublisher, HttpSubscriber, PublisherConfig, ReceiverConfig, RunningReceiver,
    SubscriberConfig, start_receiver,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::hop2::{Probe, sqlite_fanout_store};
use super::{Outbox, SECRET, client, dev_ledger, drain, eventually, quick_config};

const HOP2_SECRET: &str = "hop2-trace-secret";

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// The running parts; [`Pipeline::shutdown`] stops them.
pub struct Pipeline {
    pub outbox: Outbox,
    pub ledger: RunningDevLedger,
    pub probe: Arc<Probe>,
    pub fanout_store: Arc<dyn FanoutStore>,
    intake: RunningReceiver,
    stop: watch::Sender<bool>,
    consuming: JoinHandle<outbox_core::Result<()>>,
    fanning_out: JoinHandle<outbox_core::Result<outbox_core::FanoutSummary>>,
}

impl Pipeline {
    /// Starts the consumer, the fan-out and the dev ledger, and opens an empty outbox.
    pub async fn start() -> Self {
        let (stop, shutdown) = watch::channel(false);
        let probe = Probe::new().await;
        let subscriber = HttpSubscriber::bind(SubscriberConfig::new(loopback(), HOP2_SECRET))
            .await
            .unwrap();
        let subscriber_url = subscriber.url();
        let consuming = tokio::spawn({
            let sink: Arc<dyn MessageSink> = probe.clone();
            let shutdown = shutdown.clone();
            async move { subscriber.run(sink, shutdown).await }
        });

        let fanout_store = sqlite_fanout_store().await;
        let wakeup = Wakeup::new();
        let intake = start_receiver(
            ReceiverConfig::new(loopback()),
            Arc::new(FormanceWebhookDecoder::new(
                WebhookVerifier::new(SECRET).unwrap(),
            )),
            Arc::new(FanoutIntake::new(
                fanout_store.clone(),
                Some(wakeup.clone()),
            )),
        )
        .await
        .unwrap();
        let publisher = Arc::new(
            HttpPublisher::new(PublisherConfig::new(subscriber_url, HOP2_SECRET)).unwrap(),
        );
        let config = FanoutConfig {
            poll_interval: Duration::from_millis(20),
            backoff: Backoff {
                initial: Duration::from_millis(10),
                max: Duration::from_millis(200),
            },
            ..FanoutConfig::default()
        };
        let fanout = FanoutLoop::open(fanout_store.clone(), publisher, config)
            .await
            .unwrap()
            .with_wakeup(wakeup);
        let fanning_out = tokio::spawn(fanout.run(RunMode::Daemon, shutdown));

        let ledger = dev_ledger(Some(&intake)).await;
        Self {
            outbox: Outbox::new().await,
            ledger,
            probe,
            fanout_store,
            intake,
            stop,
            consuming,
            fanning_out,
        }
    }

    /// Enqueues each event in its own committed SQLite transaction.
    pub fn enqueue(&self, events: &[NewEvent]) -> Vec<OutboxEvent> {
        self.outbox.enqueue(events)
    }

    /// Drains the outbox to the ledger with the real dispatcher.
    pub async fn relay(&self) -> Summary {
        drain(
            &self.outbox,
            client(&self.ledger, Duration::from_secs(10)),
            quick_config(),
        )
        .await
    }

    /// The ledger's transaction of `event`, read back over HTTP.
    pub async fn ledger_transaction(&self, event: &OutboxEvent) -> LedgerTransaction {
        client(&self.ledger, Duration::from_secs(10))
            .transaction_by_event_id(event.event_id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{} is not on the ledger", event.event_id))
    }

    /// Waits (bounded) until the consumer's inbox applied `count` messages.
    pub async fn wait_applied(&self, count: usize) {
        let probe = self.probe.clone();
        eventually(Duration::from_secs(60), "the consumer's inbox", move || {
            probe.applied().len() >= count
        })
        .await;
    }

    /// Stops the loops and servers; each must have ended cleanly.
    pub async fn shutdown(self) {
        self.stop.send(true).unwrap();
        self.fanning_out.await.unwrap().unwrap();
        self.consuming.await.unwrap().unwrap();
        self.intake.shutdown().await;
        self.ledger.shutdown().await;
    }
}
