//! Resident memory of a process, for the memory benchmarks (figures printed, never
//! asserted): read once ([`resident`]), or sampled while a child runs to its end
//! ([`run_measured`]).

use std::time::{Duration, Instant};

/// What a measured run took.
#[derive(Debug)]
pub struct Measured {
    /// Wall time from spawn to exit.
    pub elapsed: Duration,
    /// The highest VmHWM seen, in MiB (Linux `/proc`; 0 elsewhere).
    pub peak_mib: f64,
    /// Everything the process wrote to stdout.
    pub stdout: String,
    /// Whether it exited 0.
    pub success: bool,
}

/// The resident set of a running process, read from Linux `/proc/{pid}/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resident {
    /// Resident now (`VmRSS`), in KiB.
    pub rss_kib: u64,
    /// The highest resident set so far (`VmHWM`), in KiB.
    pub peak_kib: u64,
}

/// The resident set of process `pid` now and at its peak; `None` when `/proc` has
/// no such process (or no `/proc`).
pub fn resident(pid: u32) -> Option<Resident> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kib| kib.parse().ok())
    };
    Some(Resident {
        rss_kib: field("VmRSS:")?,
        peak_kib: field("VmHWM:")?,
    })
}

/// Peak resident set of process `pid` so far, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    resident(pid).map(|r| r.peak_kib)
}

/// Spawns `command` (stdout captured, stderr discarded), samples its peak RSS every
/// 10 ms until it exits, and returns the figures.
pub async fn run_measured(mut command: tokio::process::Command) -> Measured {
    let started = Instant::now();
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the measured process");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let output = tokio::spawn(async move {
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut text)
            .await
            .ok();
        text
    });
    let pid = child.id().expect("a running child");
    let mut peak = 0;
    let status = loop {
        if let Some(kib) = peak_rss_kib(pid) {
            peak = peak.max(kib);
        }
        if let Ok(status) = tokio::time::timeout(Duration::from_millis(10), child.wait()).await {
            break status.expect("wait for the measured process");
        }
    };
    Measured {
        elapsed: started.elapsed(),
        peak_mib: peak as f64 / 1024.0,
        stdout: output.await.unwrap_or_default(),
        success: status.success(),
    }
}
