//! `HttpSubscriber`: the consumer side of Hop 2 over HTTP. Receives what an
//! [`crate::HttpPublisher`] sends, checks our signature, decodes the identity headers
//! and hands each message to the consumer's sink (its inbox transaction).

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use chrono::Utc;
use outbox_core::fanout::headers;
use outbox_core::{Error, ErrorKind, MessageSink, Result, Subscriber};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::SubscriberConfig;
use crate::error::{refuse, sink_refusal};
use crate::receiver::bind;
use crate::signing::Verifier;

/// Where an [`crate::HttpPublisher`] POSTs Hop 2 messages.
pub const MESSAGES_PATH: &str = "/hop2/messages";

/// A Hop 2 source over HTTP: one signed `POST` per message.
///
/// | answer | when | the publisher |
/// | --- | --- | --- |
/// | 204 | the sink returned `Ok` (applied, or a duplicate) | done |
/// | 401 | our signature (`outbox-signature`, `crate::signing`) missing or wrong, timestamp outside the tolerance | permanent |
/// | 400 | an identity header missing or malformed (the body names it) | permanent |
/// | 413 | body over `max_body_bytes` | permanent |
/// | 422 | the sink can never apply the message (`InvalidInput`: a body that is not a ledger transaction, a float amount; the body names the field) | permanent |
/// | 503 | the sink failed transiently | retries |
/// | 500 | the sink failed permanently otherwise | retries (5xx), the account waits |
///
/// Unlike a broker source, a poison message does not end [`Subscriber::run`]: the
/// server keeps serving every other account, and the refusal goes back to the
/// publisher, which blocks that one account loudly.
pub struct HttpSubscriber {
    config: SubscriberConfig,
    verifier: Verifier,
    addr: SocketAddr,
    /// Bound by [`HttpSubscriber::bind`] and taken by the first `run`; a later `run`
    /// binds the same address again.
    listener: Mutex<Option<TcpListener>>,
}

struct AppState {
    verifier: Verifier,
    sink: Arc<dyn MessageSink>,
}

impl HttpSubscriber {
    /// Binds `config.listen` now, so the address (port 0 picks one) is known before
    /// [`Subscriber::run`] starts serving; connections wait in the backlog until then.
    ///
    /// # Errors
    /// `Config` when the secret is empty or the address cannot be bound.
    pub async fn bind(config: SubscriberConfig) -> Result<Self> {
        let verifier = Verifier::new(&config.secret, config.tolerance)?;
        let (listener, addr) = bind(config.listen).await?;
        Ok(Self {
            config,
            verifier,
            addr,
            listener: Mutex::new(Some(listener)),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to give the publisher: `http://<local_addr>/hop2/messages`.
    pub fn url(&self) -> String {
        format!("http://{}{MESSAGES_PATH}", self.addr)
    }

    fn take_listener(&self) -> Option<TcpListener> {
        self.listener
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl fmt::Debug for HttpSubscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSubscriber")
            .field("config", &self.config)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Subscriber for HttpSubscriber {
    /// Serves until `shutdown` turns true (or its sender is dropped), then waits for
    /// the requests in hand: a message whose sink call finished is answered.
    ///
    /// # Errors
    /// `Config` when the address cannot be bound again (a second `run`), `Transport`
    /// when the server fails.
    async fn run(
        &self,
        sink: Arc<dyn MessageSink>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<()> {
        let listener = match self.take_listener() {
            Some(listener) => listener,
            None => bind(self.addr).await?.0,
        };
        let state = Arc::new(AppState {
            verifier: self.verifier.clone(),
            sink,
        });
        let app = Router::new()
            .route(MESSAGES_PATH, post(receive))
            .layer(DefaultBodyLimit::max(self.config.max_body_bytes))
            .with_state(state);
        tracing::info!(addr = %self.addr, path = MESSAGES_PATH, "Hop 2 HTTP subscriber serving");
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                // A dropped sender can never say "stop" again: stop now.
                let _ = shutdown.wait_for(|stop| *stop).await;
            })
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Transport,
                    format!("the HTTP subscriber failed: {e}"),
                )
                .with("listen", self.addr)
            })
    }
}

async fn receive(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    // Verify before decoding or applying anything: unsigned input leaves no trace.
    let delivery_id = match state.verifier.verify(&headers, &body, Utc::now()) {
        Ok(id) => id,
        Err(e) => return refuse(StatusCode::UNAUTHORIZED, &e),
    };
    if let Err(e) = crate::content_type::require(&headers, "application/json") {
        return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, &e);
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let message = match headers::decode(header, body.to_vec()) {
        Ok(message) => message,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &e),
    };
    let (instruction_id, account, sequence) = (
        message.instruction_id.clone(),
        message.account.clone(),
        message.sequence,
    );
    match state.sink.accept(&delivery_id, vec![message]).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => {
            let e = e
                .with("delivery", &delivery_id)
                .with("instruction_id", instruction_id)
                .with("account", account)
                .with("sequence", sequence);
            if is_unappliable(&e) {
                refuse(StatusCode::UNPROCESSABLE_ENTITY, &e)
            } else {
                sink_refusal(&e)
            }
        }
    }
}

/// The message itself is at fault and no retry can change that: a 4xx, so the
/// publisher stops retrying and dead-letters it. Other permanent sink errors (a
/// misconfigured consumer database) stay 5xx: the account waits until it is fixed.
fn is_unappliable(error: &Error) -> bool {
    matches!(error.kind(), ErrorKind::InvalidInput { .. }) && !error.is_transient()
}
