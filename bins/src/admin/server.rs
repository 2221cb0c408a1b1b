//! The admin HTTP server: three routes on the command's own axum, no second HTTP
//! server crate.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use outbox_core::{Error, ErrorKind, Result};

use super::health::Health;

#[derive(Debug, Clone)]
struct AdminState {
    handle: PrometheusHandle,
    health: Arc<Health>,
}

/// A running admin server; it stops with the process (or when dropped).
#[derive(Debug)]
pub struct AdminServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl AdminServer {
    /// Binds `addr` and serves until dropped.
    ///
    /// # Errors
    /// `Config` naming `admin-listen` when the address cannot be bound.
    pub async fn start(
        addr: SocketAddr,
        handle: PrometheusHandle,
        health: Arc<Health>,
    ) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            Error::new(ErrorKind::Config, format!("cannot listen on {addr}: {e}"))
                .with("field", "admin-listen")
        })?;
        let addr = listener.local_addr().unwrap_or(addr);
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(AdminState { handle, health });
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the admin server stopped");
            }
        });
        // Operators and tests read this line: the routes answer from here on.
        println!("admin: /metrics, /healthz and /readyz on http://{addr}");
        Ok(Self { addr, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.handle.render(),
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AdminState>) -> Response {
    match state.health.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()).into_response(),
        Err(reasons) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready:\n{reasons}\n"),
        )
            .into_response(),
    }
}
