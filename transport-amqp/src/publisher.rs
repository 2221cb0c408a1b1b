//! `AmqpPublisher`: the fan-out loop's sink on RabbitMQ, with publisher confirms.

use async_trait::async_trait;
use lapin::message::BasicReturnMessage;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, PublisherConfirm};
use outbox_core::fanout::headers;
use outbox_core::{Error, FanoutMessage, Publisher, PublisherCapabilities, Result};
use tokio::sync::Mutex;

use crate::config::AmqpConfig;
use crate::error;
use crate::topology::Topology;

/// Persistent delivery mode: the broker writes the message to disk before it confirms.
const PERSISTENT: u8 = 2;

/// Publishes [`FanoutMessage`]s to `<exchange>` with routing key
/// `stable_hash(account) % N`, each confirmed by the broker.
///
/// - Publisher confirms on, `mandatory`, persistent, `content_type:
///   application/json`, `message_id` = instruction id, the identity headers of
///   [`outbox_core::fanout::headers`] as AMQP long strings.
/// - `publish` sends the whole batch, then awaits every confirm: `Ack` → `Ok`; a
///   message the broker returned (unroutable; matched by identity, not by the
///   confirm lapin attached it to) → permanent error naming exchange and routing
///   key; `Nack`, connection loss, confirm timeout → transient.
/// - The connection is opened on the first `publish` and re-opened lazily on the
///   next one after a loss (broker restart); nothing is reported `Ok` without its
///   confirm.
/// - `capabilities().ordered_pipeline` is false: a reconnect between two messages
///   of one account could reorder them, so the loop sends one per account per call.
#[derive(Debug)]
pub struct AmqpPublisher {
    config: AmqpConfig,
    topology: Topology,
    name: String,
    link: Mutex<Option<Link>>,
}

/// One open connection and its confirm-mode channel.
#[derive(Debug)]
struct Link {
    connection: Connection,
    channel: Channel,
}

impl Link {
    fn usable(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }
}

/// A message that made it onto the wire, awaiting its confirm.
struct InFlight {
    index: usize,
    routing_key: String,
    confirm: PublisherConfirm,
}

impl AmqpPublisher {
    /// Checks the configuration; connects on the first `publish`.
    ///
    /// # Errors
    /// `Config` when [`AmqpConfig::validate`] fails.
    pub fn new(config: AmqpConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            topology: Topology::new(config.exchange.clone(), config.queue_count),
            name: config.destination_name()?,
            config,
            link: Mutex::new(None),
        })
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    pub fn config(&self) -> &AmqpConfig {
        &self.config
    }

    async fn open(&self) -> Result<Link> {
        let setup = async {
            let connection = self.config.connect("publisher").await?;
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| error::lapin(&e, "open channel"))?;
            if self.config.declare_topology {
                self.topology
                    .declare(&channel)
                    .await
                    .map_err(|e| error::lapin(&e, "declare topology"))?;
            }
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .map_err(|e| error::lapin(&e, "confirm select"))?;
            Ok(Link {
                connection,
                channel,
            })
        };
        match tokio::time::timeout(self.config.connect_timeout(), setup).await {
            Ok(link) => link,
            Err(_) => Err(error::connect_timeout(self.config.connect_timeout())),
        }
    }

    fn properties(message: &FanoutMessage) -> Result<BasicProperties> {
        let message_id = ShortString::try_new(message.instruction_id.as_str())
            .map_err(|_| error::too_long("instruction_id", message.instruction_id.len()))?;
        let mut table = FieldTable::default();
        for (name, value) in headers::encode(message) {
            table.insert(name.into(), AMQPValue::LongString(value.into()));
        }
        Ok(BasicProperties::default()
            .with_delivery_mode(PERSISTENT)
            .with_content_type("application/json".into())
            .with_message_id(message_id)
            .with_headers(table))
    }

    fn context(&self, error: Error, message: &FanoutMessage) -> Error {
        error
            .with("exchange", &self.config.exchange)
            .with("account", &message.account)
            .with("sequence", message.sequence)
            .with("instruction", &message.instruction_id)
    }

    /// Publishes `messages` on `channel`; a send failure fails that message and
    /// every later one (the channel is gone) and marks the link broken.
    async fn send_all(
        &self,
        channel: &Channel,
        messages: &[FanoutMessage],
        results: &mut [Option<Result<()>>],
    ) -> (Vec<InFlight>, bool) {
        let mut in_flight = Vec::with_capacity(messages.len());
        let mut broken = false;
        for (index, message) in messages.iter().enumerate() {
            if broken {
                break;
            }
            let properties = match Self::properties(message) {
                Ok(p) => p,
                Err(e) => {
                    results[index] = Some(Err(self.context(e, message)));
                    continue;
                }
            };
            let routing_key = self.topology.routing_key(&message.account);
            let send = channel.basic_publish(
                self.config.exchange.as_str().into(),
                routing_key.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &message.payload,
                properties,
            );
            // Bounded too: a blocked connection (broker resource alarm) may hold the
            // send itself.
            let sent = match tokio::time::timeout(self.config.confirm_timeout(), send).await {
                Ok(sent) => sent.map_err(|e| error::lapin(&e, "publish")),
                Err(_) => Err(error::confirm_timeout(self.config.confirm_timeout())),
            };
            match sent {
                Ok(confirm) => in_flight.push(InFlight {
                    index,
                    routing_key,
                    confirm,
                }),
                Err(e) => {
                    broken = true;
                    let e = e.with("routing_key", &routing_key);
                    for (later, m) in messages.iter().enumerate().skip(index) {
                        results[later] = Some(Err(self.context(e.clone(), m)));
                    }
                }
            }
        }
        (in_flight, broken)
    }

    /// Awaits one confirm. Returned (unroutable) messages are collected, not
    /// judged here: lapin hands a `basic.return` to whichever confirm of a
    /// `multiple` ack pops it first, which need not be the returned message's own.
    async fn confirmed(
        &self,
        flight: &mut InFlight,
        returned: &mut Vec<BasicReturnMessage>,
    ) -> Confirmed {
        let waited = tokio::time::timeout(self.config.confirm_timeout(), &mut flight.confirm).await;
        let with_key = |e: Error| e.with("routing_key", &flight.routing_key);
        match waited {
            Ok(Ok(Confirmation::Ack(r))) => {
                returned.extend(r);
                Confirmed::Ack
            }
            Ok(Ok(Confirmation::Nack(r))) => {
                returned.extend(r);
                Confirmed::Nack
            }
            Ok(Ok(Confirmation::NotRequested)) => Confirmed::Failed(error::not_confirmed()),
            Ok(Err(e)) => Confirmed::Failed(with_key(error::lapin(&e, "publish confirm"))),
            Err(_) => Confirmed::Failed(with_key(error::confirm_timeout(
                self.config.confirm_timeout(),
            ))),
        }
    }

    /// The result of a confirmed message, given every message the broker returned
    /// during the batch.
    fn judge(
        &self,
        flight: &InFlight,
        message: &FanoutMessage,
        confirmed: Confirmed,
        returned: &mut Vec<BasicReturnMessage>,
    ) -> Result<()> {
        if matches!(confirmed, Confirmed::Ack | Confirmed::Nack)
            && let Some(at) = returned
                .iter()
                .position(|r| is_return_of(r, message, &flight.routing_key))
        {
            let r = returned.swap_remove(at);
            return Err(error::unroutable(
                &self.config.exchange,
                &flight.routing_key,
                r.reply_code,
                r.reply_text.as_str(),
            ));
        }
        match confirmed {
            Confirmed::Ack => Ok(()),
            Confirmed::Nack => Err(error::nack().with("routing_key", &flight.routing_key)),
            Confirmed::Failed(e) => Err(e),
        }
    }
}

/// What the broker said about one message, before returns are matched.
enum Confirmed {
    Ack,
    Nack,
    /// No confirm: connection lost, timeout. The link must be dropped.
    Failed(Error),
}

/// Whether `returned` is `message` (same routing key, message id and identity
/// headers) coming back.
fn is_return_of(returned: &BasicReturnMessage, message: &FanoutMessage, routing_key: &str) -> bool {
    let properties = &returned.delivery.properties;
    let header = |name: &str| {
        properties
            .headers()
            .as_ref()
            .and_then(|table| table.inner().get(name))
            .and_then(|value| match value {
                AMQPValue::LongString(text) => Some(text.as_bytes()),
                _ => None,
            })
    };
    returned.delivery.routing_key.as_str() == routing_key
        && properties.message_id().as_ref().map(ShortString::as_str)
            == Some(message.instruction_id.as_str())
        && header(headers::ACCOUNT) == Some(message.account.as_str().as_bytes())
        && header(headers::SEQUENCE) == Some(message.sequence.to_string().as_bytes())
        && header(headers::EVENT_TYPE) == Some(message.kind.as_str().as_bytes())
}

#[async_trait]
impl Publisher for AmqpPublisher {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> PublisherCapabilities {
        PublisherCapabilities::new(false)
    }

    async fn publish(&self, messages: &[FanoutMessage]) -> Vec<Result<()>> {
        if messages.is_empty() {
            return Vec::new();
        }
        // The lock is held until every confirm is in: one batch at a time keeps a
        // reconnect from interleaving two callers' messages of one account.
        let mut guard = self.link.lock().await;
        if guard.as_ref().is_some_and(|link| !link.usable()) {
            tracing::info!(exchange = %self.config.exchange, "amqp publisher: connection lost, reconnecting");
            if let Some(old) = guard.take() {
                close(old).await;
            }
        }
        let channel = match guard.as_ref() {
            Some(link) => link.channel.clone(),
            None => match self.open().await {
                Ok(link) => guard.insert(link).channel.clone(),
                Err(e) => {
                    tracing::warn!(error = %e, uri = %self.config.redacted_uri(), "amqp publisher: cannot connect");
                    return messages
                        .iter()
                        .map(|m| Err(self.context(e.clone(), m)))
                        .collect();
                }
            },
        };

        let mut results: Vec<Option<Result<()>>> = messages.iter().map(|_| None).collect();
        let (mut in_flight, mut broken) = self.send_all(&channel, messages, &mut results).await;
        let mut returned = Vec::new();
        let mut confirmations = Vec::with_capacity(in_flight.len());
        for flight in &mut in_flight {
            let confirmed = self.confirmed(flight, &mut returned).await;
            broken |= matches!(confirmed, Confirmed::Failed(_));
            confirmations.push(confirmed);
        }
        for (flight, confirmed) in in_flight.iter().zip(confirmations) {
            let message = &messages[flight.index];
            let result = self.judge(flight, message, confirmed, &mut returned);
            results[flight.index] = Some(result.map_err(|e| self.context(e, message)));
        }
        if !returned.is_empty() {
            tracing::warn!(
                count = returned.len(),
                exchange = %self.config.exchange,
                "amqp publisher: returned messages that match no message of the batch"
            );
        }
        if broken && let Some(old) = guard.take() {
            close(old).await;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(error::not_confirmed())))
            .collect()
    }
}

/// Closes a link that is no longer trusted, without waiting on a dead broker.
async fn close(link: Link) {
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        link.connection.close(200, "reconnecting".into()),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(uri: &str, exchange: &str) -> String {
        AmqpPublisher::new(AmqpConfig::new(uri, exchange))
            .unwrap()
            .name()
            .to_owned()
    }

    #[test]
    fn the_name_is_broker_vhost_and_exchange_without_credentials() {
        let default_vhost = name("amqp://app:s3cret@Broker-A:5672/%2f", "ledger-events");
        assert_eq!(
            default_vhost,
            "amqp://broker-a:5672/%2F?exchange=ledger-events"
        );
        assert!(!default_vhost.contains("s3cret") && !default_vhost.contains("app"));
        // Credentials, the default port and tuning parameters do not change the destination.
        assert_eq!(
            name("amqp://other:pw@broker-a/%2F?heartbeat=10", "ledger-events"),
            default_vhost
        );
        // A path-less URI is the default vhost, as the AMQP URI spec says.
        assert_eq!(name("amqp://broker-a", "ledger-events"), default_vhost);
        // Another broker, port, vhost or exchange is another destination.
        for other in [
            name("amqp://guest:guest@broker-b:5672/%2f", "ledger-events"),
            name("amqp://guest:guest@10.0.0.1:5672/%2f", "ledger-events"),
            name("amqp://guest:guest@10.0.0.2:5672/%2f", "ledger-events"),
            name("amqp://guest:guest@broker-a:5673/%2f", "ledger-events"),
            name("amqp://guest:guest@broker-a:5672/payments", "ledger-events"),
            name("amqps://guest:guest@broker-a:5672/%2f", "ledger-events"),
            name("amqp://guest:guest@broker-a:5672/%2f", "other-events"),
        ] {
            assert_ne!(other, default_vhost);
        }
        assert_ne!(
            name("amqp://guest:guest@10.0.0.1:5672/%2f", "ledger-events"),
            name("amqp://guest:guest@10.0.0.2:5672/%2f", "ledger-events"),
            "two brokers by IP address"
        );
        assert_eq!(
            name("amqp://guest:guest@broker-a:5672/payments", "ledger-events"),
            "amqp://broker-a:5672/payments?exchange=ledger-events"
        );
    }
}
