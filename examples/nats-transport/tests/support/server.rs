//! A `nats-server -js` of the test's own, on a free loopback port with its file
//! store in a temporary directory: the restart case stops it and starts it again on
//! the same store, so streams and durable consumers survive as on a real server.
//! The shared server on 127.0.0.1:4222 is never stopped.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// The server binary: `OUTBOX_NATS_SERVER`, else `nats-server` on `PATH` (Debian's
/// package installs /usr/sbin/nats-server).
pub fn binary() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("OUTBOX_NATS_SERVER") {
        return Ok(PathBuf::from(path));
    }
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            "no nats-server binary (set OUTBOX_NATS_SERVER or install nats-server)".to_owned()
        })
}

/// A server process this test started, killed when dropped.
#[derive(Debug)]
pub struct OwnServer {
    binary: PathBuf,
    port: u16,
    store: tempfile::TempDir,
    child: Option<Child>,
}

impl OwnServer {
    /// Starts a server and returns once it accepts connections.
    pub async fn start() -> Result<Self, String> {
        let mut server = Self {
            binary: binary()?,
            port: outbox_testkit::ports::free_port(),
            store: tempfile::tempdir().map_err(|e| e.to_string())?,
            child: None,
        };
        server.spawn().await?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new(&self.binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        // Bounded: 30 s of 50 ms tries. The server restores its streams before it
        // accepts clients, so a connection means JetStream is ready.
        for _ in 0..600 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!(
            "nats-server on port {} did not accept connections within 30 s",
            self.port
        ))
    }

    /// Stops the server as an operator would (SIGTERM: it closes every client
    /// connection and flushes its store), and waits for the process to end.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
    }

    /// Starts the stopped server again on the same port and store.
    pub async fn resume(&mut self) {
        assert!(self.child.is_none(), "the server is running");
        self.spawn()
            .await
            .expect("start the test's nats-server again");
    }
}
