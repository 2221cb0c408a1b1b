//! A Tansu (Kafka-protocol) broker of a test's own, with memory storage, killed by
//! its PID on `kill` or drop. For cases that stop a broker mid-stream without touching
//! the shared one on 127.0.0.1:9092.
//!
//! Clients reach it through a [`TcpForwarder`] (the broker advertises the forwarder's
//! port): a restart recreates the topics on the broker's own port *before* the
//! forwarder lets clients back in. librdkafka 2.12 was seen to crash (SIGSEGV in
//! `rd_kafka_metadata_update_op`, cf. confluentinc/librdkafka#5280) when its metadata
//! refresh met the restarted broker while the topic did not exist yet.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::forwarder::TcpForwarder;
use crate::ports::free_port;

/// A private broker.
#[derive(Debug)]
pub struct OwnBroker {
    /// The port clients use (the forwarder's; the broker advertises it).
    pub port: u16,
    /// The broker's own listener.
    internal: SocketAddr,
    forwarder: Arc<TcpForwarder>,
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

impl OwnBroker {
    /// Starts a broker and waits until clients can reach it.
    pub async fn start() -> Result<Self, String> {
        let binary = binary()?;
        let internal: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let forwarder = TcpForwarder::start(internal).await;
        let mut broker = Self {
            port: forwarder.listen.port(),
            internal,
            forwarder,
            binary,
            child: None,
        };
        broker.restart_with_topics(&[]).await;
        Ok(broker)
    }

    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the process again (memory storage: it starts empty).
    pub async fn restart(&mut self) {
        self.restart_with_topics(&[]).await;
    }

    /// Starts the process again and creates `topics` (name, partitions) before clients
    /// can reach it.
    pub async fn restart_with_topics(&mut self, topics: &[(&str, u32)]) {
        self.kill();
        let listen = format!("tcp://{}", self.internal);
        let advertised = format!("tcp://127.0.0.1:{}", self.port);
        let child = Command::new(&self.binary)
            .args(["broker", "--listener-url", &listen])
            .args(["--advertised-listener-url", &advertised])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tansu");
        self.child = Some(child);
        self.wait_for_listener().await;
        for (topic, partitions) in topics {
            let status = Command::new(&self.binary)
                .args(["topic", "create", "--broker", &listen])
                .args(["--partitions", &partitions.to_string(), topic])
                .stdout(Stdio::null())
                .status()
                .expect("run tansu topic create");
            assert!(status.success(), "tansu topic create {topic}: {status}");
        }
        self.forwarder.restore().await;
    }

    async fn wait_for_listener(&self) {
        for _ in 0..300 {
            if TcpStream::connect_timeout(&self.internal, Duration::from_millis(100)).is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("tansu on {} did not come up within 30 s", self.internal);
    }

    /// Cuts clients off and kills the process this helper started (SIGKILL).
    pub fn kill(&mut self) {
        self.forwarder.cut();
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
