//! The replication session: `START_REPLICATION` on the relay's slot from a durable
//! position, waiting out a slot still held by a session that is going away.

use std::time::Duration;

use outbox_core::{Error, ErrorKind, Result};
use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig};
use tokio::time::Instant;

use super::config::{CdcConfig, ReplicationTarget};
use super::error;
use super::position::format_lsn;

/// Events the replication client may hold between its socket and the relay; the
/// relay's own buffer (`max_buffered`) is where decoded events wait.
const CLIENT_BUFFER: usize = 1_024;

/// How long an idle session waits before a standby status update, well inside the
/// server's default `wal_sender_timeout` of 60 s.
const IDLE_WAKEUP: Duration = Duration::from_secs(10);

/// Starts streaming `config.slot` from `from`, a commit LSN the relay made durable.
///
/// The slot's confirmed position is `from` as well (`ack_lsn`): until the relay
/// acknowledges more, the server may forget nothing after it.
pub(crate) async fn start(
    config: &CdcConfig,
    target: &ReplicationTarget,
    from: u64,
) -> Result<ReplicationClient> {
    let busy_until = Instant::now() + config.slot_busy_timeout();
    loop {
        let replication = ReplicationConfig::new(
            target.host.clone(),
            target.user.clone(),
            target.password.clone(),
            target.database.clone(),
            config.slot.clone(),
            config.publication.as_str(),
        )
        .with_port(target.port)
        .with_start_lsn(Lsn(from))
        .with_ack_lsn(Lsn(from))
        // Binary values: uuid, int8, bytea and timestamptz arrive exact, with no
        // dependence on the session's DateStyle or bytea_output.
        .with_binary(true)
        .with_status_interval(config.status_interval())
        .with_wakeup_interval(IDLE_WAKEUP)
        .with_buffer_size(CLIENT_BUFFER)
        .with_application_name(format!("outbox-cdc {}", config.relay));
        let mut client = ReplicationClient::connect(replication)
            .await
            .map_err(|e| error::replication("connecting for replication", &e))?;
        match tokio::time::timeout(config.connect_timeout(), client.wait_started()).await {
            Ok(Ok(())) => {
                tracing::debug!(slot = %config.slot, from = %format_lsn(from), "replication started");
                return Ok(client);
            }
            // A killed relay's walsender lets go of the slot once it notices the
            // connection is gone; a new session can take the slot a moment later.
            Ok(Err(e)) if error::is_slot_in_use(&e) && Instant::now() < busy_until => {
                tracing::debug!(slot = %config.slot, "slot still held by another session, retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Ok(Err(e)) => {
                let err = error::replication("starting replication", &e).with("slot", &config.slot);
                return Err(if error::is_slot_in_use(&e) {
                    Error::new(
                        ErrorKind::Storage,
                        format!(
                            "replication slot {:?} is held by another session (another relay instance?): {}",
                            config.slot,
                            err.message()
                        ),
                    )
                    .with("slot", &config.slot)
                    .transient(None)
                } else {
                    err
                });
            }
            Err(_) => {
                client.abort();
                return Err(Error::new(
                    ErrorKind::Storage,
                    format!(
                        "replication did not start within {:?}",
                        config.connect_timeout()
                    ),
                )
                .with("slot", &config.slot)
                .transient(None));
            }
        }
    }
}
