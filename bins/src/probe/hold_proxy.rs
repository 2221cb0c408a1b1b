//! A loopback proxy in front of a ledger that has no fault plan (a Formance sandbox):
//! it forwards every request unchanged and, for the next write whose body carries a
//! chosen event id, withholds the ledger's answer. The relay behind it then sits
//! between the ledger's accept and its own record, where step 5 kills it; the only
//! assumption is Formance's own: a 2xx answer means committed.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use outbox_core::{Error, ErrorKind, Result};
use reqwest::Url;
use tokio::sync::watch;

/// Headers that belong to one hop, not to the request.
const HOP_HEADERS: [&str; 5] = [
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "keep-alive",
];

#[derive(Debug)]
struct Shared {
    upstream: Url,
    http: reqwest::Client,
    /// The event id whose next write is held.
    needle: Mutex<Option<String>>,
    /// The upstream status of the held write, once the ledger answered it.
    held: watch::Sender<Option<u16>>,
    /// Turns true to release every held request (with a 503: its client is gone).
    release: watch::Sender<bool>,
}

/// A running proxy; dropping it stops serving.
#[derive(Debug)]
pub struct HoldingProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

impl HoldingProxy {
    /// Serves on an ephemeral loopback port, forwarding to `upstream` (an API root).
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start(upstream: &str) -> Result<Self> {
        let upstream = Url::parse(upstream)
            .map_err(|e| Error::invalid("ledger_url", format!("not a URL: {e}")))?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Error::new(ErrorKind::Config, format!("HTTP client: {e}")))?;
        let shared = Arc::new(Shared {
            upstream,
            http,
            needle: Mutex::new(None),
            held: watch::channel(None).0,
            release: watch::channel(false).0,
        });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| Error::new(ErrorKind::Config, format!("cannot listen: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::new(ErrorKind::Transport, e.to_string()))?;
        let router = Router::new()
            .fallback(forward)
            .with_state(Arc::clone(&shared));
        let (stop, mut stopped) = watch::channel(false);
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await;
        });
        Ok(Self { addr, shared, stop })
    }

    /// The proxy's API root, for the relay's `--ledger-url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Holds the answer of the next write whose body contains `needle`.
    pub fn hold_next(&self, needle: &str) {
        *lock(&self.shared.needle) = Some(needle.to_owned());
        self.shared.held.send_replace(None);
        self.shared.release.send_replace(false);
    }

    /// Waits (at most `limit`) until the ledger answered the held write; its status.
    pub async fn held(&self, limit: Duration) -> Option<u16> {
        let mut held = self.shared.held.subscribe();
        tokio::time::timeout(limit, held.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|s| *s))
    }

    /// Releases held requests and holds nothing more.
    pub fn release(&self) {
        *lock(&self.shared.needle) = None;
        self.shared.release.send_replace(true);
    }
}

impl Drop for HoldingProxy {
    fn drop(&mut self) {
        self.release();
        let _ = self.stop.send(true);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn copy_headers(from: &HeaderMap, skip_hop: bool) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in from {
        if skip_hop && HOP_HEADERS.contains(&name.as_str()) {
            continue;
        }
        if let Ok(name) = HeaderName::from_bytes(name.as_str().as_bytes()) {
            out.append(name, value.clone());
        }
    }
    out
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body: Bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let mut url = shared.upstream.clone();
    {
        let base = url.path().trim_end_matches('/').to_owned();
        url.set_path(&format!("{base}{}", parts.uri.path()));
        url.set_query(parts.uri.query());
    }
    let hold = {
        let mut needle = lock(&shared.needle);
        let matches = needle
            .as_deref()
            .is_some_and(|n| body.windows(n.len()).any(|w| w == n.as_bytes()));
        if matches {
            // Only the next such write: the relay's replay after the restart passes.
            *needle = None;
        }
        matches
    };
    let answer = shared
        .http
        .request(parts.method, url)
        .headers(copy_headers(&parts.headers, true))
        .body(body)
        .send()
        .await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = answer.status();
    let headers = copy_headers(answer.headers(), true);
    let bytes = answer.bytes().await.unwrap_or_default();
    if hold {
        shared.held.send_replace(Some(status.as_u16()));
        let mut release = shared.release.subscribe();
        let _ = release.wait_for(|r| *r).await;
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() =
        StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    *response.headers_mut() = headers;
    response
}
