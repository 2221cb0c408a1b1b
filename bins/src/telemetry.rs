//! The binary's `tracing` set-up: log lines on standard error, and — with the `otel`
//! feature and an OTLP endpoint in the environment — the outbox's spans (enqueue,
//! relay post, fan-out publish, inbox apply) exported over OTLP/HTTP
//! (docs/TRACING.md).
//!
//! Logs are text, coloured only on a terminal (a pipe or a file gets no escape
//! codes), or with `log.format = "json"` (`--log-format json`) one JSON object per
//! line for log shippers; event id, account and sequence are event fields, so they
//! are JSON fields too. The filter is `log.level` (`OUTBOX_LOG`).
//!
//! The exporter is configured by the standard OpenTelemetry variables:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (one of them
//! turns exporting on), `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`,
//! `OTEL_SERVICE_NAME` (default `outbox`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

use crate::config::{LogFormat, LogSettings};

/// What [`init`] installed; [`shutdown`](Telemetry::shutdown) flushes the spans not
/// exported yet.
#[derive(Debug)]
pub struct Telemetry {
    #[cfg(feature = "otel")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

/// Installs the global subscriber: logs on stderr at `log.level` (else
/// `default_level`; a level that does not parse is reported and the default used),
/// and the OTLP span exporter when the `otel` feature is built and an endpoint is
/// configured. Call once, inside the Tokio runtime.
pub fn init(settings: &LogSettings, default_level: &str) -> Telemetry {
    let filter = match settings.level.as_deref() {
        Some(level) => EnvFilter::try_new(level).unwrap_or_else(|e| {
            eprintln!("warning: log.level {level:?} is not a filter ({e}); using {default_level}");
            EnvFilter::new(default_level)
        }),
        None => EnvFilter::new(default_level),
    };
    let logs = match settings.format {
        LogFormat::Json => fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    let registry = tracing_subscriber::registry().with(logs);
    #[cfg(feature = "otel")]
    {
        let (layer, provider) = match otlp::exporting() {
            Ok(Some(provider)) => (Some(otlp::layer(&provider)), Some(provider)),
            Ok(None) => (None, None),
            Err(e) => {
                eprintln!("warning: spans are not exported: {e}");
                (None, None)
            }
        };
        registry.with(layer).init();
        Telemetry { provider }
    }
    #[cfg(not(feature = "otel"))]
    {
        registry.init();
        Telemetry {}
    }
}

impl Telemetry {
    /// Exports the spans still buffered and stops the exporter; nothing without it.
    pub async fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(provider) = self.provider {
            // Blocks until the batch is sent, and the sending runs on this runtime:
            // wait for it from a blocking thread, never from a runtime worker.
            let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            if let Ok(Err(e)) = flushed {
                eprintln!("warning: spans not exported at exit: {e}");
            }
        }
    }
}

#[cfg(feature = "otel")]
mod otlp {
    //! OTLP/HTTP (protobuf) through the workspace's reqwest 0.13: the exporter's own
    //! reqwest client is 0.12, a second major version this workspace does not take.

    use async_trait::async_trait;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::Targets;

    const ENDPOINT_VARIABLES: [&str; 2] = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ];

    /// The tracer provider exporting over OTLP/HTTP, or `None` when no endpoint is
    /// configured (nothing would receive the spans).
    pub(super) fn exporting() -> Result<Option<SdkTracerProvider>, String> {
        let configured = ENDPOINT_VARIABLES
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
        if !configured {
            return Ok(None);
        }
        let client = OtlpHttpClient {
            client: reqwest::Client::new(),
            runtime: tokio::runtime::Handle::current(),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_http_client(client)
            .build()
            .map_err(|e| format!("the OTLP exporter: {e}"))?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("outbox");
        }
        Ok(Some(
            SdkTracerProvider::builder()
                .with_resource(resource.build())
                .with_batch_exporter(exporter)
                .build(),
        ))
    }

    /// The layer turning the outbox's spans into OpenTelemetry spans.
    pub(super) fn layer<S>(provider: &SdkTracerProvider) -> impl Layer<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        // Only the outbox's own spans (all made in outbox-core), whatever OUTBOX_LOG
        // lets through to the logs.
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("outbox"))
            .with_filter(Targets::new().with_target("outbox_core", tracing::Level::INFO))
    }

    /// Sends the exporter's requests with reqwest 0.13 on the binary's Tokio runtime:
    /// the batch exporter runs on a thread of its own, outside any runtime.
    #[derive(Debug)]
    struct OtlpHttpClient {
        client: reqwest::Client,
        runtime: tokio::runtime::Handle,
    }

    #[async_trait]
    impl HttpClient for OtlpHttpClient {
        async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
            let client = self.client.clone();
            let sent = self.runtime.spawn(async move {
                let request = reqwest::Request::try_from(request)?;
                let response = client.execute(request).await?.error_for_status()?;
                let (status, headers) = (response.status(), response.headers().clone());
                let mut answer = Response::builder()
                    .status(status)
                    .body(response.bytes().await?)?;
                *answer.headers_mut() = headers;
                Ok::<_, HttpError>(answer)
            });
            sent.await?
        }
    }
}
