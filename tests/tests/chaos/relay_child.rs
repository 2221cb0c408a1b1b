//! One `outbox relay` process of the campaign: its stderr (warnings only) goes to a
//! log file, so a relay that logs a lot never blocks on a full pipe, and the file is
//! printed when the scenario fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::common::{LEDGER, outbox_binary};

pub struct RelayChild {
    child: Child,
    log: PathBuf,
}

impl RelayChild {
    /// Starts `outbox relay` on `database` against `ledger_url` with `extra` flags.
    pub fn start(database: &str, ledger_url: &str, extra: &[&str], log_dir: &Path) -> Self {
        let log = log_dir.join(format!("relay-{}.log", uuid::Uuid::now_v7().simple()));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(outbox_binary())
            .args(["relay", "--database", database, "--ledger-url", ledger_url])
            .args(["--ledger-name", LEDGER, "--poll-interval-ms", "50"])
            .args(extra)
            .env("OUTBOX_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self { child, log }
    }

    /// Panics with the relay's log if it has exited (a relay that should be running).
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("the relay exited ({status}):\n{}", self.log_text());
        }
    }

    /// SIGKILL: no chance to record an outcome or move a cursor.
    pub async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }

    /// SIGTERM to this child's PID, then a bounded wait for a clean exit.
    pub async fn terminate(self) {
        let pid = self.child.id().expect("running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
        self.wait_success(Duration::from_secs(60)).await;
    }

    /// Waits (bounded) for the relay to exit by itself, successfully.
    pub async fn wait_success(mut self, limit: Duration) {
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the relay did not exit within {limit:?}:\n{}",
                    self.log_text()
                )
            })
            .unwrap();
        assert!(
            status.success(),
            "the relay exited with {status}:\n{}",
            self.log_text()
        );
    }

    /// The end of the relay's log (the part that explains a failure).
    fn log_text(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(4_000);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text[start..].to_owned()
    }
}
