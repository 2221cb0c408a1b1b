//! Graceful shutdown for the long-running commands: Ctrl-C or SIGTERM.

use tokio::sync::watch;

/// A receiver that turns true on Ctrl-C or SIGTERM; `what` says what happens next.
pub fn stop_on_signal(what: &'static str) -> watch::Receiver<bool> {
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutdown requested: {what}");
        let _ = stop.send(true);
    });
    stopped
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
