//! The runbook's webhook-secret rotation through the real `outbox fanout` process, its
//! secrets read from files named in a configuration file (docs/RUNBOOK.md, "Rotate the
//! webhook secret"):
//!
//! 1. the fan-out verifies with the old secret; the ledger signs with it;
//! 2. the fan-out restarts with the new secret and the old one as `previous_secret`:
//!    deliveries signed with either are taken;
//! 3. the ledger moves to the new secret: still taken;
//! 4. the fan-out restarts without `previous_secret`: a delivery signed with the old
//!    secret is refused (the ledger counts it failed) and nothing of it is stored.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::process::Process;
use common::*;
use outbox_ledger_dev::RunningDevLedger;
use outbox_testkit::ports::free_port;
use outbox_transport_http::WEBHOOK_PATH;

const OLD: &str = "whsec-old-0f3a";
const NEW: &str = "whsec-new-9c1d";

struct Rotation {
    outbox: Outbox,
    ledger_addr: SocketAddr,
    fanout_port: u16,
}

impl Rotation {
    fn path(&self, file: &str) -> PathBuf {
        self.outbox.dir().join(file)
    }

    fn write(&self, file: &str, text: &str) -> PathBuf {
        let path = self.path(file);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The dev ledger on its fixed address and data file, signing with `secret`.
    async fn ledger(&self, secret: &str) -> RunningDevLedger {
        restartable_dev_ledger(
            self.ledger_addr,
            self.path("ledger.sqlite"),
            format!("http://127.0.0.1:{}{WEBHOOK_PATH}", self.fanout_port),
            secret,
        )
        .await
    }

    /// `outbox --config outbox.toml fanout` verifying with `secret` (and `previous`),
    /// both read from files the configuration names.
    async fn fanout(&self, secret: &str, previous: Option<&str>) -> Process {
        let secret = self.write("webhook-secret", &format!("{secret}\n"));
        let mut config = format!(
            "[fanout]\nlisten = \"127.0.0.1:{}\"\ndatabase = \"sqlite://{}\"\nsecret_file = \"{}\"\nto = [\"http://127.0.0.1:{}/hop2/messages\"]\npublish_secret = \"hop2\"\n",
            self.fanout_port,
            self.path("fanout.db").display(),
            secret.display(),
            free_port(),
        );
        if let Some(previous) = previous {
            let file = self.write("webhook-secret-previous", &format!("{previous}\n"));
            config.push_str(&format!("previous_secret_file = \"{}\"\n", file.display()));
        }
        let config = self.write("outbox.toml", &config);
        let args = vec![
            "--config".to_owned(),
            config.display().to_string(),
            "fanout".to_owned(),
        ];
        Process::start("fanout", &args, "fanout: intake on").await
    }

    fn stored(&self) -> i64 {
        let conn = rusqlite::Connection::open(self.path("fanout.db")).unwrap();
        conn.query_row("SELECT COUNT(*) FROM fanout_messages", [], |r| r.get(0))
            .unwrap()
    }

    /// Posts one payout through the relay; waits until the ledger settled its webhook.
    async fn payout(&self, ledger: &RunningDevLedger, settled: u64) {
        self.outbox.enqueue(&[fund("c0", 1_000)]);
        let summary = drain(
            &self.outbox,
            client(ledger, Duration::from_secs(10)),
            quick_config(),
        )
        .await;
        assert_eq!(summary.accepted, 1, "{summary:?}");
        eventually(Duration::from_secs(30), "the webhook to settle", || {
            let stats = ledger.stats();
            stats.webhooks_pending == 0
                && stats.webhooks_delivered + stats.webhooks_failed >= settled
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rotation_with_both_secrets_loses_no_webhook_and_the_old_secret_is_refused_after() {
    let run = Rotation {
        outbox: Outbox::new().await,
        ledger_addr: ([127, 0, 0, 1], free_port()).into(),
        fanout_port: free_port(),
    };

    // 1. Old secret on both sides.
    let fanout = run.fanout(OLD, None).await;
    let ledger = run.ledger(OLD).await;
    run.payout(&ledger, 1).await;
    assert_eq!((ledger.stats().webhooks_delivered, run.stored()), (1, 1));

    // 2. The fan-out takes the new secret and keeps the old one for the rotation.
    fanout.terminate().await;
    let fanout = run.fanout(NEW, Some(OLD)).await;
    run.payout(&ledger, 2).await;
    assert_eq!((ledger.stats().webhooks_delivered, run.stored()), (2, 2));

    // 3. The ledger signs with the new secret.
    ledger.shutdown().await;
    let ledger = run.ledger(NEW).await;
    run.payout(&ledger, 1).await;
    assert_eq!((ledger.stats().webhooks_delivered, run.stored()), (1, 3));
    ledger.shutdown().await;

    // 4. The old secret is dropped: a ledger still signing with it is refused.
    fanout.terminate().await;
    let fanout = run.fanout(NEW, None).await;
    let stale = run.ledger(OLD).await;
    run.payout(&stale, 1).await;
    let stats = stale.stats();
    assert_eq!(
        (stats.webhooks_delivered, stats.webhooks_failed),
        (0, 1),
        "{stats:?}"
    );
    assert_eq!(
        run.stored(),
        3,
        "a delivery signed with the dropped secret was stored"
    );
    stale.shutdown().await;
    fanout.terminate().await;
}
