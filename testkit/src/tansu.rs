//! A Tansu (Kafka-protocol) broker of a test's own, on a free loopback port, with
//! memory storage; killed by its PID on `kill` or drop. For cases that stop a broker
//! mid-stream without touching the shared one on 127.0.0.1:9092.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A private broker.
#[derive(Debug)]
pub struct OwnBroker {
    pub port: u16,
    binary: PathBuf,
    child: Option<Child>,
}

/// The Tansu binary: `$OUTBOX_TANSU_ROOT/bin/tansu` (default root
/// `/var/cache/ledger-outbox/tansu`, where `scripts/tansu.sh install` puts it).
pub fn binary() -> Result<PathBuf, String> {
    let root = std::env::var("OUTBOX_TANSU_ROOT")
        .unwrap_or_else(|_| "/var/cache/ledger-outbox/tansu".to_owned());
    let binary = PathBuf::from(root).join("bin/tansu");
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "no tansu binary at {} (run scripts/tansu.sh install)",
            binary.display()
        ))
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

impl OwnBroker {
    /// Starts a broker on a free port and waits until it accepts connections.
    pub async fn start() -> Result<Self, String> {
        let mut broker = Self {
            port: free_port(),
            binary: binary()?,
            child: None,
        };
        broker.restart().await;
        Ok(broker)
    }

    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the process again on the same port (memory storage: it starts empty).
    pub async fn restart(&mut self) {
        self.kill();
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let child = Command::new(&self.binary)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tansu");
        self.child = Some(child);
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        for _ in 0..300 {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("tansu on port {} did not come up within 30 s", self.port);
    }

    /// Kills the process this helper started (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.kill();
    }
}
