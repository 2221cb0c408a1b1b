//! Step 5: the relay path itself. The payload sits in a SQLite outbox of the probe's
//! own; a real `outbox relay` process posts it, is killed with SIGKILL once the
//! ledger has committed it and before it could record anything, and a second relay
//! process re-sends it. The delivery record must say `replayed`, naming the original
//! transaction, and the ledger must hold one transaction for the event.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use outbox_core::{DeliveryOutcome, Error, ErrorKind, Result, Store};
use outbox_store_sqlite::SqliteStore;
use serde_json::json;

use super::hold_proxy::HoldingProxy;
use super::ledger::ProbeLedger;
use super::payload::ProbePayload;
use super::report::{StepResult, Verdict};

/// How long a relay process may take to commit or to drain.
const RELAY_LIMIT: Duration = Duration::from_secs(60);
/// The cursor name of the probe's relay processes.
const RELAY_NAME: &str = "relay";

/// How the kill is placed between the ledger's accept and the relay's record.
#[derive(Debug)]
pub enum CrashWindow {
    /// A dev ledger: its fault plan commits the write, then holds the answer.
    FaultPlan,
    /// Any other ledger: the relay talks through a loopback proxy that forwards the
    /// write, then withholds the ledger's answer.
    Proxy(HoldingProxy),
}

impl CrashWindow {
    pub fn describe(&self) -> &'static str {
        match self {
            Self::FaultPlan => {
                "the dev ledger's fault plan commits the write and holds its answer, so the SIGKILL always lands between the ledger's accept and the relay's record"
            }
            Self::Proxy(_) => {
                "the relay reaches the ledger through a loopback proxy that forwards the write and withholds the answer, so the SIGKILL lands between the ledger's accept (its 2xx) and the relay's record"
            }
        }
    }
}

/// The probe's outbox, relay processes and step-5 ledger.
#[derive(Debug)]
pub struct RelayPath {
    pub exe: PathBuf,
    pub outbox: SqliteStore,
    pub client: ProbeLedger,
    pub ledger: String,
    pub window: CrashWindow,
}

fn failed(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::Internal, what)
}

impl RelayPath {
    fn outbox_url(&self) -> String {
        format!("sqlite://{}", self.outbox.path().display())
    }

    fn relay(&self, ledger_url: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.exe);
        command
            .args(["relay", "--once", "--database"])
            .arg(self.outbox_url())
            .args(["--ledger-url", ledger_url, "--ledger-name", &self.ledger])
            .args(["--name", RELAY_NAME, "--poll-interval-ms", "50"])
            .env(
                "OUTBOX_LOG",
                std::env::var("OUTBOX_LOG").unwrap_or_else(|_| "error".to_owned()),
            )
            .env_remove("OUTBOX_LEDGER__TOKEN")
            .env_remove("OUTBOX_LEDGER_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(token) = self.client.token() {
            // In the environment, not on a command line others can read.
            command.env("OUTBOX_LEDGER__TOKEN", token);
        }
        command
    }

    /// Runs one relay to the end; its stdout, or an error with its stderr.
    async fn drain(&self) -> Result<String> {
        let child = self
            .relay(self.client.base_url())
            .spawn()
            .map_err(|e| failed(format!("cannot start `outbox relay`: {e}")))?;
        let output = tokio::time::timeout(RELAY_LIMIT, child.wait_with_output())
            .await
            .map_err(|_| failed(format!("the relay did not drain within {RELAY_LIMIT:?}")))?
            .map_err(|e| failed(format!("the relay: {e}")))?;
        if !output.status.success() {
            return Err(failed(format!(
                "the relay exited with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Lets the relay deliver `payload` without a crash (a payload the ledger refused:
    /// the outbox must still move on), and says why step 5 was skipped.
    pub async fn pass_through(&self, why: &str) -> Result<StepResult> {
        self.drain().await?;
        Ok(StepResult::new(5, Verdict::Skipped, why))
    }

    /// Step 5 on `payload`, which is enqueued in the probe's outbox and not yet relayed.
    ///
    /// # Errors
    /// When a relay process cannot be run or the ledger cannot be reached.
    pub async fn step(&self, payload: &ProbePayload) -> Result<StepResult> {
        let event = payload.event.event_id;
        let needle = event.to_string();
        let first_url = match &self.window {
            CrashWindow::FaultPlan => {
                let mut plan = self.client.fault_plan().await?;
                let saved = plan.clone();
                plan["holdMatching"] = json!(needle);
                plan["holdMatchingCount"] = json!(1);
                plan["holdMs"] = json!(120_000);
                self.client.set_fault_plan(&plan).await?;
                let result = self
                    .crash_and_restart(payload, self.client.base_url())
                    .await;
                // The plan as it was, misbehaviours included; the hold is spent anyway.
                self.client.set_fault_plan(&saved).await?;
                return result;
            }
            CrashWindow::Proxy(proxy) => {
                proxy.hold_next(&needle);
                proxy.url()
            }
        };
        let result = self.crash_and_restart(payload, &first_url).await;
        if let CrashWindow::Proxy(proxy) = &self.window {
            proxy.release();
        }
        result
    }

    async fn crash_and_restart(
        &self,
        payload: &ProbePayload,
        first_url: &str,
    ) -> Result<StepResult> {
        let event = &payload.event;
        let mut first = self
            .relay(first_url)
            .spawn()
            .map_err(|e| failed(format!("cannot start `outbox relay`: {e}")))?;
        let deadline = Instant::now() + RELAY_LIMIT;
        let committed = loop {
            let carrying = self.client.carrying(&self.ledger, event.event_id).await?;
            if let [id] = carrying.as_slice() {
                break *id;
            }
            if carrying.len() > 1 {
                let _ = first.kill().await;
                return Ok(StepResult::new(
                    5,
                    Verdict::Fail,
                    format!(
                        "the first relay alone posted {} transactions for the event: {carrying:?}",
                        carrying.len()
                    ),
                )
                .transactions(carrying));
            }
            if let Ok(Some(status)) = first.try_wait() {
                let output = first.wait_with_output().await.ok();
                let stderr = output
                    .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
                    .unwrap_or_default();
                return Ok(StepResult::new(
                    5,
                    Verdict::Fail,
                    format!(
                        "the relay exited ({status}) without the ledger committing the payload: {stderr}"
                    ),
                ));
            }
            if Instant::now() > deadline {
                let _ = first.kill().await;
                return Ok(StepResult::new(
                    5,
                    Verdict::NotReached,
                    format!("the ledger did not commit the payload within {RELAY_LIMIT:?}"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if let CrashWindow::Proxy(proxy) = &self.window {
            // The transaction is visible; make sure its answer is the one withheld.
            proxy.held(Duration::from_secs(10)).await;
        }
        // SIGKILL: no chance to record the answer or to move the cursor.
        first
            .kill()
            .await
            .map_err(|e| failed(format!("cannot kill the relay: {e}")))?;
        let recorded = self.outbox.deliveries(event.event_id).await?;
        let cursor = self.outbox.load_cursor(RELAY_NAME).await?;
        if !recorded.is_empty() || cursor.is_some_and(|c| c >= event.position) {
            self.drain().await?;
            return Ok(StepResult::new(
                5,
                Verdict::NotReached,
                format!(
                    "the relay recorded the answer of transaction {committed} before the SIGKILL landed, so no crash window was probed"
                ),
            ));
        }

        let stdout = self.drain().await?;
        let records = self.outbox.deliveries(event.event_id).await?;
        let carrying = self.client.carrying(&self.ledger, event.event_id).await?;
        let terminal = records.iter().rev().find(|r| r.outcome.is_terminal());
        let before = format!(
            "the ledger committed transaction {committed}; relay SIGKILLed before recording it (no delivery record, cursor before the event)"
        );
        let result = match terminal {
            Some(r)
                if r.outcome == DeliveryOutcome::Replayed
                    && r.ledger_tx_id == Some(committed)
                    && carrying == [committed] =>
            {
                StepResult::new(
                    5,
                    Verdict::Pass,
                    format!(
                        "{before}; restarted, it re-sent and recorded `replayed` transaction {committed}; 1 transaction carries the event"
                    ),
                )
            }
            Some(r) => StepResult::new(
                5,
                Verdict::Fail,
                format!(
                    "{before}; restarted, it recorded `{}`{}{} and {} transaction(s) carry the event {carrying:?}: the re-send after a crash {}",
                    r.outcome.as_str(),
                    r.ledger_tx_id
                        .map(|id| format!(" transaction {id}"))
                        .unwrap_or_default(),
                    r.error_code
                        .as_deref()
                        .map(|c| format!(" ({c})"))
                        .unwrap_or_default(),
                    carrying.len(),
                    if carrying.len() > 1 {
                        "paid out twice"
                    } else {
                        "was not recognised as a replay"
                    }
                ),
            ),
            None => StepResult::new(
                5,
                Verdict::Fail,
                format!("{before}; the restarted relay recorded no outcome ({stdout})"),
            ),
        };
        Ok(result.transactions(carrying))
    }
}
