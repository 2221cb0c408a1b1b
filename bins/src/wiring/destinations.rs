//! Hop 2 transports by URL: `--to` destinations of `outbox fanout`, the `--from`
//! source of `outbox consume`, and the webhook intake.
//!
//! | URL | publisher | subscriber |
//! | --- | --- | --- |
//! | `kafka://HOST:PORT[,HOST:PORT]/TOPIC[?partitions=N&group=G]` | idempotent producer, key = account | consumer group `G` (default: the consumer's name) |
//! | `amqp://USER:PASS@HOST:PORT/VHOST?exchange=NAME[&queues=N]` | confirms, persistent, mandatory | single-active-consumer queues |
//! | `http(s)://HOST[:PORT]/PATH` | signed POST per message | — |
//! | `http://LISTEN_ADDR` | — | signed receiver on that address |

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use outbox_core::{Error, Publisher, Result, Subscriber};

#[allow(unused_imports)] // each transport arm uses it only when its feature is on
use super::not_compiled;

/// A subscriber and how to describe it to an operator (no secrets).
#[derive(Clone)]
pub struct NamedSubscriber {
    pub subscriber: Arc<dyn Subscriber>,
    pub describe: String,
}

impl std::fmt::Debug for NamedSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

/// `scheme://authority/path?query` split by hand: Kafka broker lists
/// (`a:9092,b:9092`) are not a URL authority.
struct Target<'a> {
    scheme: &'a str,
    authority: &'a str,
    path: &'a str,
    params: BTreeMap<String, String>,
}

fn target<'a>(field: &str, url: &'a str) -> Result<Target<'a>> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| Error::invalid(field, format!("{url:?} is not a URL")))?;
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let params = url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    Ok(Target {
        scheme,
        authority,
        path,
        params,
    })
}

#[allow(dead_code)] // used by the broker arms only
fn number<T: std::str::FromStr>(field: &str, t: &Target<'_>, key: &str, default: T) -> Result<T> {
    match t.params.get(key) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| Error::invalid(field, format!("{key}={v:?} is not a number"))),
    }
}

/// The AMQP URI without our own `exchange`/`queues` parameters.
#[allow(dead_code)] // used by the amqp arm only
fn amqp_uri(t: &Target<'_>) -> String {
    let rest: Vec<_> = t
        .params
        .iter()
        .filter(|(k, _)| *k != "exchange" && *k != "queues")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let query = if rest.is_empty() {
        String::new()
    } else {
        format!("?{}", rest.join("&"))
    };
    format!("{}://{}/{}{query}", t.scheme, t.authority, t.path)
}

/// A `--to` destination; Kafka topics and AMQP queues are created if missing.
pub async fn publisher(url: &str, publish_secret: Option<&str>) -> Result<Arc<dyn Publisher>> {
    let t = target("to", url)?;
    let _ = publish_secret; // only HTTP destinations sign
    match t.scheme {
        "kafka" => {
            #[cfg(feature = "kafka")]
            return kafka::publisher(&t).await;
            #[cfg(not(feature = "kafka"))]
            return Err(not_compiled("to", "kafka", "kafka"));
        }
        "amqp" | "amqps" => {
            #[cfg(feature = "amqp")]
            return amqp::publisher(&t);
            #[cfg(not(feature = "amqp"))]
            return Err(not_compiled("to", "amqp", "amqp"));
        }
        "http" | "https" => {
            #[cfg(feature = "http")]
            return http::publisher(url, publish_secret);
            #[cfg(not(feature = "http"))]
            return Err(not_compiled("to", "http", "http"));
        }
        other => Err(not_a_destination(other)),
    }
}

fn not_a_destination(scheme: &str) -> Error {
    Error::invalid(
        "to",
        format!("{scheme}:// is not a destination: use kafka://, amqp:// or http(s)://"),
    )
}

/// The identity of a `--to` destination, from its URL alone (nothing is connected or
/// created): the name its publisher reports, which keys its cursor and dead letters.
pub fn destination_name(url: &str) -> Result<String> {
    let t = target("to", url)?;
    match t.scheme {
        "kafka" => {
            #[cfg(feature = "kafka")]
            return Ok(kafka::config(&t).destination_name());
            #[cfg(not(feature = "kafka"))]
            return Err(not_compiled("to", "kafka", "kafka"));
        }
        "amqp" | "amqps" => {
            #[cfg(feature = "amqp")]
            return amqp::config("to", &t)?
                .destination_name()
                .map_err(|e| e.with("field", "to"));
            #[cfg(not(feature = "amqp"))]
            return Err(not_compiled("to", "amqp", "amqp"));
        }
        "http" | "https" => {
            #[cfg(feature = "http")]
            return outbox_transport_http::PublisherConfig::new(url, "")
                .destination_name()
                .map_err(|e| e.with("field", "to"));
            #[cfg(not(feature = "http"))]
            return Err(not_compiled("to", "http", "http"));
        }
        other => Err(not_a_destination(other)),
    }
}

/// The identities of the `--to` destinations, in order. Two URLs with one identity
/// (the same cluster and topic, broker, vhost and exchange, or host and path) are
/// refused: they would share one forward-only cursor, and the slower of the two would
/// lose what the faster one had confirmed.
pub fn distinct_destinations(urls: &[String]) -> Result<Vec<String>> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut names = Vec::with_capacity(urls.len());
    for (index, url) in urls.iter().enumerate() {
        let name = destination_name(url)?;
        if let Some(first) = seen.get(&name) {
            return Err(Error::invalid(
                "to",
                format!(
                    "--to #{} ({}) and --to #{} ({}) are one destination, {name}: they would \
                     share one cursor; give each destination once",
                    first + 1,
                    shown(&urls[*first]),
                    index + 1,
                    shown(url)
                ),
            ));
        }
        seen.insert(name.clone(), index);
        names.push(name);
    }
    Ok(names)
}

/// A URL as an error may show it: no credentials, no query (an HTTP query may carry a
/// token).
fn shown(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}/{path}")
}

/// The `--from` source of a consumer named `name`.
pub async fn subscriber(url: &str, name: &str, secret: Option<&str>) -> Result<NamedSubscriber> {
    let t = target("from", url)?;
    let _ = (name, secret);
    match t.scheme {
        "kafka" => {
            #[cfg(feature = "kafka")]
            return kafka::subscriber(&t, name);
            #[cfg(not(feature = "kafka"))]
            return Err(not_compiled("from", "kafka", "kafka"));
        }
        "amqp" | "amqps" => {
            #[cfg(feature = "amqp")]
            return amqp::subscriber(&t);
            #[cfg(not(feature = "amqp"))]
            return Err(not_compiled("from", "amqp", "amqp"));
        }
        "http" => {
            #[cfg(feature = "http")]
            return http::subscriber(&t, secret).await;
            #[cfg(not(feature = "http"))]
            return Err(not_compiled("from", "http", "http"));
        }
        other => Err(Error::invalid(
            "from",
            format!("{other}:// is not a source: use kafka://, amqp:// or http://LISTEN_ADDR"),
        )),
    }
}

#[cfg(feature = "kafka")]
mod kafka {
    use super::*;
    use outbox_transport_kafka::{
        KafkaPublisher, KafkaSubscriber, PublisherConfig, SubscriberConfig, create_topic,
    };

    pub fn config(t: &Target<'_>) -> PublisherConfig {
        PublisherConfig::new(t.authority, t.path)
    }

    pub async fn publisher(t: &Target<'_>) -> Result<Arc<dyn Publisher>> {
        let partitions = number("to", t, "partitions", 8)?;
        let timeout = std::time::Duration::from_secs(30);
        create_topic(t.authority, t.path, partitions, None, timeout).await?;
        Ok(Arc::new(KafkaPublisher::new(config(t))?))
    }

    pub fn subscriber(t: &Target<'_>, name: &str) -> Result<NamedSubscriber> {
        let group = t.params.get("group").map_or(name, String::as_str);
        let config = SubscriberConfig::new(t.authority, t.path, group);
        Ok(NamedSubscriber {
            subscriber: Arc::new(KafkaSubscriber::new(config)?),
            describe: format!("kafka topic {} (group {group})", t.path),
        })
    }
}

#[cfg(feature = "amqp")]
mod amqp {
    use super::*;
    use outbox_transport_amqp::{AmqpConfig, AmqpPublisher, AmqpSubscriber};

    pub fn config(field: &str, t: &Target<'_>) -> Result<AmqpConfig> {
        let exchange = t
            .params
            .get("exchange")
            .ok_or_else(|| Error::invalid(field, "an amqp:// URL needs ?exchange=NAME"))?;
        let mut config = AmqpConfig::new(amqp_uri(t), exchange.clone());
        config.queue_count = number(field, t, "queues", config.queue_count)?;
        config.validate()?;
        Ok(config)
    }

    pub fn publisher(t: &Target<'_>) -> Result<Arc<dyn Publisher>> {
        Ok(Arc::new(AmqpPublisher::new(config("to", t)?)?))
    }

    pub fn subscriber(t: &Target<'_>) -> Result<NamedSubscriber> {
        let config = config("from", t)?;
        let describe = format!(
            "amqp exchange {} ({} queues)",
            config.exchange, config.queue_count
        );
        Ok(NamedSubscriber {
            subscriber: Arc::new(AmqpSubscriber::new(config)?),
            describe,
        })
    }
}

#[cfg(feature = "http")]
mod http {
    use super::*;
    use outbox_transport_http::{HttpPublisher, HttpSubscriber, PublisherConfig, SubscriberConfig};

    pub fn publisher(url: &str, secret: Option<&str>) -> Result<Arc<dyn Publisher>> {
        let secret = secret.ok_or_else(|| {
            Error::invalid(
                "publish-secret",
                "HTTP destinations are signed: set --publish-secret",
            )
        })?;
        Ok(Arc::new(HttpPublisher::new(PublisherConfig::new(
            url, secret,
        ))?))
    }

    pub async fn subscriber(t: &Target<'_>, secret: Option<&str>) -> Result<NamedSubscriber> {
        let listen: std::net::SocketAddr = t.authority.parse().map_err(|_| {
            Error::invalid(
                "from",
                format!(
                    "http://{}: expected http://HOST:PORT to listen on",
                    t.authority
                ),
            )
        })?;
        let secret = secret.ok_or_else(|| {
            Error::invalid(
                "secret",
                "an http:// source verifies signatures: set --secret",
            )
        })?;
        let subscriber = HttpSubscriber::bind(SubscriberConfig::new(listen, secret)).await?;
        let describe = format!("http receiver {}", subscriber.url());
        Ok(NamedSubscriber {
            subscriber: Arc::new(subscriber),
            describe,
        })
    }
}

/// Serves the ledger webhook intake over `store`, waking the fan-out loops: the
/// ledger's deliveries are Formance webhooks, verified against `secret` and, during a
/// rotation, `previous_secret` too.
#[cfg(feature = "http")]
pub async fn start_intake(
    listen: std::net::SocketAddr,
    secret: &str,
    previous_secret: Option<&str>,
    tolerance: std::time::Duration,
    store: Arc<dyn outbox_core::FanoutStore>,
    wakeup: outbox_core::Wakeup,
) -> Result<outbox_transport_http::RunningReceiver> {
    use outbox_ledger_formance::{FormanceWebhookDecoder, WebhookVerifier};

    let mut verifier = WebhookVerifier::new(secret)?.with_tolerance(tolerance);
    if let Some(previous) = previous_secret {
        verifier = verifier.with_previous_secret(previous)?;
    }
    outbox_transport_http::start_intake(
        outbox_transport_http::ReceiverConfig::new(listen),
        Arc::new(FormanceWebhookDecoder::new(verifier)),
        store,
        Some(wakeup),
    )
    .await
}
