//! Helpers shared by the integration tests: tiny axum servers on loopback.

#![allow(dead_code)] // each test binary uses a different subset

use std::net::SocketAddr;

use axum::Router;
use outbox_ledger_formance::{FormanceConfig, FormanceLedger};
use tokio::net::TcpListener;

/// Serves `router` on an ephemeral loopback port until the test's runtime ends.
pub async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { axum::serve(listener, router).await.expect("stub server") });
    addr
}

/// A client for ledger `main` at `addr`, with `adjust` applied to the config.
pub fn client(addr: SocketAddr, adjust: impl FnOnce(&mut FormanceConfig)) -> FormanceLedger {
    let mut config = FormanceConfig::new(format!("http://{addr}"), "main");
    config.request_timeout_ms = 5_000;
    adjust(&mut config);
    FormanceLedger::new(&config).expect("valid config")
}
