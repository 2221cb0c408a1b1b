//! `TcpForwarder`: a loopback port forwarded to a target, which a test can cut (the
//! peer sees the endpoint vanish, connections included) and restore — a network
//! outage on demand, without touching the process behind it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Forwards a loopback port to a target; `cut` drops the listener and every
/// connection (the peer sees the endpoint vanish), `restore` listens again.
#[derive(Debug)]
pub struct TcpForwarder {
    pub listen: SocketAddr,
    target: SocketAddr,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl TcpForwarder {
    pub async fn start(target: SocketAddr) -> Arc<Self> {
        let listen: SocketAddr = ([127, 0, 0, 1], crate::ports::free_port()).into();
        let forwarder = Arc::new(Self {
            listen,
            target,
            task: Mutex::new(None),
        });
        forwarder.restore().await;
        forwarder
    }

    pub async fn restore(&self) {
        let listener = TcpListener::bind(self.listen)
            .await
            .expect("bind the forwarder");
        let target = self.target;
        let task = tokio::spawn(async move {
            let mut pipes = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                pipes.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        *self.task.lock().unwrap() = Some(task);
    }

    /// Aborting the task drops the listener and, with the JoinSet, every pipe.
    pub fn cut(&self) {
        if let Some(task) = self.task.lock().unwrap().take() {
            task.abort();
        }
    }
}

impl Drop for TcpForwarder {
    fn drop(&mut self) {
        self.cut();
    }
}
