//! An `outbox` child process whose stdout is collected line by line, for tests that
//! wait for a ready line and read the summary printed at exit.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::outbox_binary;

pub struct Process {
    name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Process {
    /// Spawns `outbox <args>` and waits (bounded) until it prints a line containing
    /// `ready`.
    pub async fn start(name: &str, args: &[String], ready: &str) -> Self {
        let mut child = Command::new(outbox_binary())
            .args(args)
            .env("OUTBOX_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut reader = BufReader::new(child.stdout.take().unwrap()).lines();
        let sink = lines.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        let mut process = Self {
            name: name.to_owned(),
            child,
            lines,
        };
        process.wait_for_line(ready).await;
        process
    }

    pub async fn wait_for_line(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.lines().iter().any(|l| l.contains(needle)) {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("{} exited ({status}) before printing {needle:?}", self.name);
            }
            assert!(
                Instant::now() < deadline,
                "{} never printed {needle:?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// SIGTERM (to this child's PID), then waits (bounded) for a clean exit; returns
    /// everything it printed.
    pub async fn terminate(mut self) -> Vec<String> {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not stop after SIGTERM", self.name))
            .unwrap();
        assert!(exit.success(), "{} exited with {exit}", self.name);
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.lines()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The exit status if the child has exited (without waiting), else `None`.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("poll the child")
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Waits (bounded) for the child to exit by itself, successfully; returns
    /// everything it printed.
    pub async fn wait(mut self) -> Vec<String> {
        let exit = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit", self.name))
            .unwrap();
        assert!(exit.success(), "{} exited with {exit}", self.name);
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.lines()
    }

    /// SIGKILL: no chance to save anything.
    pub async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }
}
