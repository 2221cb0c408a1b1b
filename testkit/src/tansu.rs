//! Tansu (Kafka-protocol) brokers of a test's own, killed by their PID on `kill` or
//! drop, for cases that stop a broker mid-stream without touching the shared one on
//! 127.0.0.1:9092.
//!
//! [`OwnBroker`] keeps its log in memory: a restart starts empty. Clients reach it
//! through a [`TcpForwarder`] (the broker advertises the forwarder's port): a restart
//! recreates the topics on the broker's own port *before* the forwarder lets clients
//! back in. librdkafka 2.12 was seen to crash (SIGSEGV in
//! `rd_kafka_metadata_update_op`, cf. confluentinc/librdkafka#5280) when its metadata
//! refresh met the restarted broker while the topic did not exist yet.
//!
//! [`DurableBroker`] keeps its log in a SQLite file (Tansu's `libsql` storage engine):
//! a SIGKILL loses nothing the broker acknowledged, and a restart on the same port and
//! file comes back with its topics, records and committed offsets. Clients talk to it
//! directly, so a kill is what a client of a real broker sees: every connection drops
//! and the port refuses until the process is back. Tansu 0.6's schema has no index on
//! its `header` table, and a fetch reads each record's headers with a scan of that
//! table: past a few thousand messages every fetch takes longer than the consumer's
//! request timeout and the consumer stops making progress. The helper adds the index
//! (what is stored and acknowledged is unchanged; only the lookup is faster).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
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
            .args(broker_args(&listen, &advertised, "memory://tansu/"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tansu");
        let child = self.child.insert(child);
        wait_for_listener(self.internal, child)
            .await
            .unwrap_or_else(|why| panic!("{why}"));
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

/// `tansu broker` listening on `listen`, telling clients to come to `advertised`.
fn broker_args<'a>(listen: &'a str, advertised: &'a str, storage: &'a str) -> [&'a str; 7] {
    [
        "broker",
        "--listener-url",
        listen,
        "--advertised-listener-url",
        advertised,
        "--storage-engine",
        storage,
    ]
}

/// Waits (bounded, 30 s) until `address` accepts a connection; an error when `child`
/// exits first (with its exit status) or the time is up.
async fn wait_for_listener(address: SocketAddr, child: &mut Child) -> Result<(), String> {
    for _ in 0..300 {
        if TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "tansu for {address} exited ({status}) before listening"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("tansu on {address} did not come up within 30 s"))
}

/// The file a [`DurableBroker`] keeps its log in, inside the directory it is given.
pub const STORAGE_FILE: &str = "tansu.db";

/// A private broker whose log is a SQLite file: it survives a SIGKILL.
#[derive(Debug)]
pub struct DurableBroker {
    /// The port the broker listens on and advertises; the same after every restart.
    pub port: u16,
    /// The directory holding [`STORAGE_FILE`] and the broker's output (`tansu.log`).
    dir: PathBuf,
    binary: PathBuf,
    child: Option<Child>,
    /// How many times the process was started.
    pub starts: u32,
}

impl DurableBroker {
    /// Starts a broker on a free loopback port with its log in `dir` (which must
    /// exist and outlive the broker), and waits until it listens.
    ///
    /// # Errors
    /// When there is no Tansu binary, or it does not start with SQLite storage (a
    /// binary built without the `libsql` feature: `scripts/tansu.sh install` rebuilds
    /// it); the message says which.
    pub async fn start(dir: &Path) -> Result<Self, String> {
        let mut broker = Self {
            port: free_port(),
            dir: dir.to_owned(),
            binary: binary()?,
            child: None,
            starts: 0,
        };
        broker.spawn().await?;
        Ok(broker)
    }

    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The SQLite file the log is in.
    pub fn storage_file(&self) -> PathBuf {
        self.dir.join(STORAGE_FILE)
    }

    /// SIGKILL to the process this helper started, then reaps it: no chance to flush
    /// or close anything. Idempotent.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the process again on the same port and the same storage file.
    ///
    /// # Panics
    /// When it does not listen again within 30 s (its log is in the panic message).
    pub async fn restart(&mut self) {
        self.kill();
        if let Err(why) = self.spawn().await {
            panic!("{why}");
        }
    }

    async fn spawn(&mut self) -> Result<(), String> {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let log_path = self.dir.join("tansu.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("open {}: {e}", log_path.display()))?;
        let stderr = log
            .try_clone()
            .map_err(|e| format!("open {}: {e}", log_path.display()))?;
        // Tansu resolves a sqlite:// URL's host and path against its working
        // directory: started in `dir`, `sqlite://./tansu.db` is the file there.
        let storage = format!("sqlite://./{STORAGE_FILE}");
        let child = Command::new(&self.binary)
            .args(broker_args(&url, &url, &storage))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.binary.display()))?;
        self.starts += 1;
        let address: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let waited = wait_for_listener(address, self.child.insert(child)).await;
        if let Err(why) = waited {
            self.kill();
            let output = std::fs::read_to_string(&log_path).unwrap_or_default();
            let mut tail: Vec<&str> = output.lines().rev().take(20).collect();
            tail.reverse();
            return Err(format!(
                "{why}, with storage {storage} in {} (a tansu without the libsql feature \
                 cannot: scripts/tansu.sh install rebuilds it); its output:\n{}",
                self.dir.display(),
                tail.join("\n")
            ));
        }
        index_headers(&self.storage_file()).await
    }
}

/// The index Tansu 0.6's SQLite schema lacks: the headers of one record, by the
/// record's key (the columns `header_fetch.sql` joins on). Tansu applies its DDL
/// before it listens; a table not there yet is waited for (bounded).
async fn index_headers(file: &Path) -> Result<(), String> {
    const INDEX: &str =
        "CREATE INDEX IF NOT EXISTS outbox_header_by_record ON header (topition, offset_id)";
    let mut last = String::new();
    for _ in 0..50 {
        let created = rusqlite::Connection::open(file).and_then(|conn| {
            conn.busy_timeout(Duration::from_secs(10))?;
            conn.execute_batch(INDEX)
        });
        match created {
            Ok(()) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "could not index the headers in {}: {last}",
        file.display()
    ))
}

impl Drop for DurableBroker {
    fn drop(&mut self) {
        self.kill();
    }
}
