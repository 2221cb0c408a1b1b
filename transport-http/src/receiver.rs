//! The webhook receiver: verify the Formance signature and age, parse, hand the
//! messages to a [`MessageSink`] that applies or stores them durably, and only then
//! answer 2xx.
//!
//! The sink's contract (`outbox_core::MessageSink`) is what makes the 2xx safe: it
//! returns `Ok` only once the messages are durable. A transient sink error becomes
//! 503 and a permanent one 500; the ledger retries both.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use chrono::Utc;
use outbox_core::{Error, ErrorKind, MessageSink, Result};
use outbox_ledger_formance::WebhookVerifier;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::config::ReceiverConfig;
use crate::error::{refuse, sink_refusal};
use crate::ledger_events::{TraceContext, messages_from_webhook};

/// Where the ledger's webhooks are POSTed.
pub const WEBHOOK_PATH: &str = "/webhooks/ledger";

struct AppState {
    verifier: WebhookVerifier,
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

/// Binds and serves the receiver.
///
/// # Errors
/// `Config` when a secret is empty or the address cannot be bound.
pub async fn start_receiver(
    config: ReceiverConfig,
    sink: Arc<dyn MessageSink>,
) -> Result<RunningReceiver> {
    let mut verifier =
        WebhookVerifier::new(config.secret.clone())?.with_tolerance(config.tolerance);
    if let Some(previous) = &config.previous_secret {
        verifier = verifier.with_previous_secret(previous.clone())?;
    }
    let state = Arc::new(AppState { verifier, sink });
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
    // Verify before parsing or storing anything: unsigned input leaves no trace.
    let delivery = match state.verifier.verify(&headers, &body, Utc::now()) {
        Ok(delivery) => delivery,
        Err(e) => return refuse(StatusCode::UNAUTHORIZED, &e),
    };
    if headers
        .get("formance-webhook-test")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
    {
        return StatusCode::OK.into_response();
    }
    let messages = match messages_from_webhook(&body, &TraceContext::from_headers(&headers)) {
        Ok(messages) => messages,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &e),
    };
    match state.sink.accept(&delivery.id, messages).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => sink_refusal(&e.with("delivery", &delivery.id)),
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
