//! The webhook receiver: the ledger adapter's [`WebhookDecoder`] verifies and decodes
//! each delivery, the messages go to a [`MessageSink`] that applies or stores them
//! durably, and only then is the answer 2xx.
//!
//! | outcome | answer |
//! | --- | --- |
//! | body over `max_body_bytes` | 413, the decoder is not called |
//! | decoder: `Unauthenticated` | 401 naming the header, nothing parsed or stored |
//! | decoder: `Malformed` | 400 naming the field, nothing stored |
//! | decoder: `Probe` | 200, nothing stored |
//! | sink `Ok` | 204 |
//! | sink error | 503 when transient, 500 otherwise: the ledger retries both |
//!
//! The sink's contract (`outbox_core::MessageSink`) is what makes the 2xx safe: it
//! returns `Ok` only once the messages are durable.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use chrono::Utc;
use outbox_core::fanout::{RequestHeaders, WebhookDecoder, WebhookDelivery, WebhookRefusal};
use outbox_core::{Error, ErrorKind, MessageSink, Result};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::config::ReceiverConfig;
use crate::error::{refuse, sink_refusal};

/// Where the ledger's webhooks are POSTed.
pub const WEBHOOK_PATH: &str = "/webhooks/ledger";

struct AppState {
    decoder: Arc<dyn WebhookDecoder>,
    sink: Arc<dyn MessageSink>,
}

/// A receiver running in the background; dropped or shut down, it stops.
#[derive(Debug)]
pub struct RunningReceiver {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningReceiver {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to configure as the ledger's webhook endpoint.
    pub fn webhook_url(&self) -> String {
        format!("http://{}{WEBHOOK_PATH}", self.addr)
    }

    /// Stops accepting and waits for requests in flight.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// Binds and serves the receiver: deliveries read by `decoder` (the ledger
/// adapter's), their messages handed to `sink`.
///
/// # Errors
/// `Config` when the address cannot be bound.
pub async fn start_receiver(
    config: ReceiverConfig,
    decoder: Arc<dyn WebhookDecoder>,
    sink: Arc<dyn MessageSink>,
) -> Result<RunningReceiver> {
    let state = Arc::new(AppState { decoder, sink });
    let app = Router::new()
        .route(WEBHOOK_PATH, post(receive))
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state);
    let (listener, addr) = bind(config.listen).await?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(async {
            let _ = stopped.await;
        });
        if let Err(e) = serve.await {
            tracing::error!(error = %e, "webhook receiver stopped");
        }
    });
    Ok(RunningReceiver {
        addr,
        stop: Some(stop),
        task,
    })
}

async fn receive(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(e) = crate::content_type::require(&headers, state.decoder.media_type()) {
        return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, &e);
    }
    let headers: RequestHeaders = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .collect();
    // The decoder verifies before it parses; nothing is stored before it returns.
    let (id, messages) = match state.decoder.decode(&headers, &body, Utc::now()) {
        Ok(WebhookDelivery::Events { id, messages }) => (id, messages),
        Ok(WebhookDelivery::Probe) => return StatusCode::OK.into_response(),
        Err(WebhookRefusal::Unauthenticated(e)) => return refuse(StatusCode::UNAUTHORIZED, &e),
        Err(WebhookRefusal::Malformed(e)) => return refuse(StatusCode::BAD_REQUEST, &e),
    };
    match state.sink.accept(&id, messages).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => sink_refusal(&e.with("delivery", &id)),
    }
}

/// Binds `listen`, returning the listener and the address it got (port 0 picks one).
pub(crate) async fn bind(listen: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(listen).await.map_err(|e| {
        Error::new(ErrorKind::Config, format!("cannot bind {listen}: {e}")).with("field", "listen")
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::new(ErrorKind::Config, e.to_string()))?;
    Ok((listener, addr))
}
