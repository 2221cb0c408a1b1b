//! `NatsConfig`: where the stream is and how long each step may take.

use std::time::Duration;

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{Context, CreateStreamErrorKind, GetStreamErrorKind};
use async_nats::jetstream::stream::Stream;
use outbox_core::{Backoff, Error, ErrorKind, Result, RetryPolicy};

use crate::error::{self, Answer};

/// One JetStream destination: a stream capturing one subject, read by one durable
/// pull consumer.
#[derive(Debug, Clone)]
pub struct NatsConfig {
    /// Server URL(s), comma-separated (`nats://127.0.0.1:4222`). Credentials in the
    /// URL are used to connect and never appear in [`NatsConfig::destination_name`].
    pub url: String,
    /// The JetStream stream (`LEDGER_EVENTS`): no `.`, space or `>`/`*`.
    pub stream: String,
    /// The subject messages are published on (`ledger.events`); the stream captures it.
    pub subject: String,
    /// The durable consumer the subscriber reads with; one active reader per durable
    /// keeps each account's order on arrival (see the README).
    pub durable: String,
    /// Create the stream (file storage) when missing. Off in production, where an
    /// operator owns the stream's limits and replicas. The durable consumer is
    /// always created when missing.
    pub declare: bool,
    /// Bound of one connection attempt.
    pub connect_timeout: Duration,
    /// How long a publish waits for the stream's acknowledgement (the confirm).
    pub ack_timeout: Duration,
    /// How long JetStream waits for the subscriber's ack before redelivering. Longer
    /// than the slowest sink apply of a whole batch, or messages come twice.
    pub ack_wait: Duration,
    /// Messages asked for per pull request.
    pub batch: usize,
    /// How long one pull request waits for messages before asking again.
    pub fetch_wait: Duration,
    /// Backoff of the subscriber's reconnects and of a sink's transient refusals.
    pub backoff: Backoff,
}

impl NatsConfig {
    /// A configuration with defaults: declare on, 5 s connect and publish-ack bounds,
    /// 30 s ack wait, batches of 16 waiting up to 1 s, 100 ms to 5 s backoff.
    pub fn new(
        url: impl Into<String>,
        stream: impl Into<String>,
        subject: impl Into<String>,
    ) -> Self {
        let stream = stream.into();
        Self {
            url: url.into(),
            durable: format!("{stream}-outbox"),
            stream,
            subject: subject.into(),
            declare: true,
            connect_timeout: Duration::from_secs(5),
            ack_timeout: Duration::from_secs(5),
            ack_wait: Duration::from_secs(30),
            batch: 16,
            fetch_wait: Duration::from_secs(1),
            backoff: Backoff {
                initial: Duration::from_millis(100),
                max: Duration::from_secs(5),
            },
        }
    }

    /// Checks what the server would refuse later, naming the field.
    ///
    /// # Errors
    /// `InvalidInput` naming `url`, `stream`, `subject`, `durable` or `batch`.
    pub fn validate(&self) -> Result<()> {
        if self.url.trim().is_empty() {
            return Err(Error::invalid("url", "empty"));
        }
        let plain_name = |field: &'static str, value: &str| {
            if value.is_empty()
                || value
                    .chars()
                    .any(|c| c == '.' || c == '*' || c == '>' || c.is_whitespace())
            {
                Err(Error::invalid(
                    field,
                    format!("{value:?} must be non-empty without '.', '*', '>' or spaces"),
                ))
            } else {
                Ok(())
            }
        };
        plain_name("stream", &self.stream)?;
        plain_name("durable", &self.durable)?;
        if self.subject.is_empty()
            || self
                .subject
                .split('.')
                .any(|token| token.is_empty() || token == "*" || token == ">")
            || self.subject.chars().any(char::is_whitespace)
        {
            return Err(Error::invalid(
                "subject",
                format!("{:?} is not a literal subject", self.subject),
            ));
        }
        if self.batch == 0 {
            return Err(Error::invalid("batch", "must be at least 1"));
        }
        Ok(())
    }

    /// The destination's stable identity (cursor and dead-letter name):
    /// `nats://host:port/<stream>?subject=<subject>`, servers without credentials.
    pub fn destination_name(&self) -> String {
        let servers: Vec<&str> = self
            .url
            .split(',')
            .map(|server| {
                let server = server.trim();
                let server = server.split_once("://").map_or(server, |(_, rest)| rest);
                server.rsplit_once('@').map_or(server, |(_, host)| host)
            })
            .collect();
        format!(
            "nats://{}/{}?subject={}",
            servers.join(","),
            self.stream,
            self.subject
        )
    }

    /// The subscriber's retry rule: for ever, with [`NatsConfig::backoff`].
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::forever(self.backoff)
    }

    /// A JetStream context on a new connection that reconnects by itself.
    pub(crate) async fn connect(&self, role: &str) -> Result<Context> {
        let options = async_nats::ConnectOptions::new()
            .name(format!("outbox-{role}"))
            .connection_timeout(self.connect_timeout);
        let connecting = options.connect(self.url.as_str());
        // The client's own timeout covers the TCP connect; this one also covers the
        // handshake with a server that accepts and then says nothing.
        let client = match tokio::time::timeout(self.connect_timeout * 2, connecting).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(error::connect(&e)),
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Transport,
                    format!(
                        "nats connect: no connection within {:?}",
                        self.connect_timeout * 2
                    ),
                )
                .transient(None));
            }
        };
        let mut context = async_nats::jetstream::new(client);
        context.set_timeout(self.ack_timeout);
        Ok(context)
    }

    /// The stream this destination publishes to, created with file storage when
    /// `declare` (an existing stream is used as it is).
    fn stream_config(&self) -> async_nats::jetstream::stream::Config {
        async_nats::jetstream::stream::Config {
            name: self.stream.clone(),
            subjects: vec![self.subject.clone()],
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        }
    }

    /// The stream: found, or with `declare` created when missing.
    ///
    /// The publisher and the subscriber of a new deployment may both find it missing
    /// and both create it. The server then answers the later create with "subjects
    /// overlap with an existing stream" (or "stream name already in use"), not with
    /// the stream; that answer is permanent, and taken as such it would stop the
    /// subscriber for good. So after that refusal the stream is looked up once more,
    /// and used when it is this destination's: same name, capturing the subject.
    pub(crate) async fn open_stream(&self, context: &Context) -> Result<Stream> {
        if !self.declare {
            return context.get_stream(&self.stream).await.map_err(|e| {
                let answer = match e.kind() {
                    GetStreamErrorKind::JetStream(api) => Answer::Status(api.code()),
                    GetStreamErrorKind::EmptyName | GetStreamErrorKind::InvalidStreamName => {
                        Answer::Refused
                    }
                    _ => Answer::Silent,
                };
                error::api("get stream", &e, answer)
            });
        }
        let created = context.get_or_create_stream(self.stream_config()).await;
        let e = match created {
            Ok(stream) => return Ok(stream),
            Err(e) => e,
        };
        let answer = match e.kind() {
            CreateStreamErrorKind::JetStream(api) => {
                let raced = [
                    ErrorCode::STREAM_SUBJECT_OVERLAP,
                    ErrorCode::STREAM_NAME_EXIST,
                ]
                .contains(&api.error_code());
                if raced && let Some(stream) = self.created_by_another(context).await {
                    return Ok(stream);
                }
                Answer::Status(api.code())
            }
            CreateStreamErrorKind::EmptyStreamName
            | CreateStreamErrorKind::InvalidStreamName
            | CreateStreamErrorKind::DomainAndExternalSet => Answer::Refused,
            _ => Answer::Silent,
        };
        Err(error::api("create stream", &e, answer))
    }

    /// The stream named [`NatsConfig::stream`] if it exists and captures
    /// [`NatsConfig::subject`].
    async fn created_by_another(&self, context: &Context) -> Option<Stream> {
        let stream = context.get_stream(&self.stream).await.ok()?;
        stream
            .cached_info()
            .config
            .subjects
            .contains(&self.subject)
            .then_some(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_keeps_servers_stream_and_subject_and_drops_credentials() {
        let config = NatsConfig::new(
            "nats://user:secret@n1:4222, nats://n2:4222",
            "LEDGER",
            "ledger.events",
        );
        assert_eq!(
            config.destination_name(),
            "nats://n1:4222,n2:4222/LEDGER?subject=ledger.events"
        );
    }

    #[test]
    fn invalid_names_are_refused_naming_the_field() {
        let mut config = NatsConfig::new("nats://127.0.0.1:4222", "LEDGER", "ledger.events");
        assert!(config.validate().is_ok());
        config.stream = "ledger.events".into();
        assert_eq!(config.validate().unwrap_err().field(), Some("stream"));
        config.stream = "LEDGER".into();
        config.subject = "ledger.*".into();
        assert_eq!(config.validate().unwrap_err().field(), Some("subject"));
        config.subject = "ledger.events".into();
        config.batch = 0;
        assert_eq!(config.validate().unwrap_err().field(), Some("batch"));
    }
}
