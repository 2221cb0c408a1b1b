//! Where a benchmark's CPU went, for the figures that argue a gap is physical
//! (printed, never asserted): the benchmark process itself (with anything it runs
//! in-process, such as the null ledger), the PostgreSQL server's processes, and the
//! whole machine, read from Linux `/proc` before and after a measured run.
//!
//! `/proc/<pid>/stat` counts in clock ticks (`USER_HZ`, 100 per second on Linux), so a
//! run of half a second on two cores is read to about 1 %; sum several runs with
//! `+` on [`CpuUse`] for a finer figure. A PostgreSQL process that exits during the run
//! takes its CPU with it (a benchmark's pooled connections live throughout); one that
//! starts during the run is counted whole. Off Linux every figure is zero.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Linux reports process and machine times in these ticks per second (`USER_HZ`).
const TICKS_PER_SECOND: u64 = 100;

/// Counters read at one instant; [`CpuSample::since`] turns two into a [`CpuUse`].
#[derive(Debug, Clone)]
pub struct CpuSample {
    at: Instant,
    process_ticks: u64,
    postgres_ticks: HashMap<u32, u64>,
    machine_busy_ticks: u64,
}

/// CPU spent between two samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuUse {
    /// Wall time between the samples.
    pub wall: Duration,
    /// User + system time of this process (every thread, living or exited).
    pub process: Duration,
    /// User + system time of the processes named `postgres`.
    pub postgres: Duration,
    /// Time the machine's CPUs were not idle (any process), summed over CPUs.
    pub machine_busy: Duration,
}

impl CpuSample {
    /// Reads the counters now.
    pub fn now() -> Self {
        Self {
            at: Instant::now(),
            process_ticks: std::fs::read_to_string("/proc/self/stat")
                .ok()
                .and_then(|stat| process_ticks(&stat))
                .unwrap_or(0),
            postgres_ticks: postgres_ticks(),
            machine_busy_ticks: machine_busy_ticks().unwrap_or(0),
        }
    }

    /// What was spent from `earlier` to this sample.
    pub fn since(&self, earlier: &CpuSample) -> CpuUse {
        let postgres: u64 = self
            .postgres_ticks
            .iter()
            .map(|(pid, now)| {
                now.saturating_sub(earlier.postgres_ticks.get(pid).copied().unwrap_or(0))
            })
            .sum();
        CpuUse {
            wall: self.at.saturating_duration_since(earlier.at),
            process: ticks(self.process_ticks.saturating_sub(earlier.process_ticks)),
            postgres: ticks(postgres),
            machine_busy: ticks(
                self.machine_busy_ticks
                    .saturating_sub(earlier.machine_busy_ticks),
            ),
        }
    }
}

impl CpuUse {
    /// Runs `work` and returns its output with the CPU spent while it ran.
    pub async fn measure<T>(work: impl std::future::Future<Output = T>) -> (T, CpuUse) {
        let before = CpuSample::now();
        let output = work.await;
        (output, CpuSample::now().since(&before))
    }

    /// This process and PostgreSQL per unit of work, in microseconds.
    pub fn micros_per(&self, units: usize) -> f64 {
        micros_per(self.process + self.postgres, units)
    }

    /// How many of the machine's CPUs were busy on average (any process).
    pub fn cores_busy(&self) -> f64 {
        if self.wall.is_zero() {
            return 0.0;
        }
        self.machine_busy.as_secs_f64() / self.wall.as_secs_f64()
    }
}

/// Both runs' figures together.
impl std::ops::Add for CpuUse {
    type Output = CpuUse;

    fn add(self, other: CpuUse) -> CpuUse {
        CpuUse {
            wall: self.wall + other.wall,
            process: self.process + other.process,
            postgres: self.postgres + other.postgres,
            machine_busy: self.machine_busy + other.machine_busy,
        }
    }
}

impl std::ops::AddAssign for CpuUse {
    fn add_assign(&mut self, other: CpuUse) {
        *self = *self + other;
    }
}

/// `spent` per unit of work, in microseconds.
pub fn micros_per(spent: Duration, units: usize) -> f64 {
    spent.as_secs_f64() * 1e6 / units.max(1) as f64
}

fn ticks(n: u64) -> Duration {
    Duration::from_micros(n * 1_000_000 / TICKS_PER_SECOND)
}

/// `utime + stime` of a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may hold spaces, so fields are counted after its closing one.
fn process_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Busy ticks of the machine, from the first line of `/proc/stat`
/// (`cpu user nice system idle iowait irq softirq steal …`; idle and iowait are idle).
fn machine_busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_machine_busy_ticks(stat.lines().next()?)
}

fn parse_machine_busy_ticks(line: &str) -> Option<u64> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    // The first eight counters; guest time is already inside user and nice.
    let values: Vec<u64> = fields
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let all: u64 = values.iter().sum();
    let idle = values.get(3)? + values.get(4)?;
    Some(all - idle)
}

/// `utime + stime` of every process whose command is `postgres`, by PID.
fn postgres_ticks() -> HashMap<u32, u64> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    entries
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let name = stat.get(stat.find('(')? + 1..stat.rfind(')')?)?;
            (name == "postgres").then(|| Some((pid, process_ticks(&stat)?)))?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_user_plus_system_ticks_even_with_spaces_in_the_name() {
        // Fields after the name: state ppid pgrp session tty tpgid flags minflt cminflt
        // majflt cmajflt utime stime …
        let line = "4242 (post gres) S 1 4242 4242 0 -1 4194560 500 0 0 0 137 25 0 0 20 0 1";
        assert_eq!(process_ticks(line), Some(162));
        assert_eq!(process_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn the_machine_line_counts_idle_and_iowait_as_idle() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let line = "cpu  100 5 40 800 50 3 2 0 7 0";
        assert_eq!(parse_machine_busy_ticks(line), Some(150));
        assert_eq!(parse_machine_busy_ticks("cpu0 1 2 3 4 5 6 7 8"), None);
    }

    #[test]
    fn cores_busy_is_busy_cpu_time_over_wall_time() {
        let used = CpuUse {
            wall: Duration::from_secs(2),
            process: Duration::from_secs(1),
            postgres: Duration::from_millis(500),
            machine_busy: Duration::from_secs(3),
        };
        assert!((used.cores_busy() - 1.5).abs() < 1e-9);
        assert!((used.micros_per(1_000) - 1_500.0).abs() < 1e-9);
        assert_eq!((used + used).machine_busy, Duration::from_secs(6));
    }

    #[test]
    fn this_process_burning_cpu_shows_in_its_own_figure() {
        let before = CpuSample::now();
        let started = Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let used = CpuSample::now().since(&before);
        if cfg!(target_os = "linux") {
            assert!(used.process >= Duration::from_millis(100), "{used:?}");
            assert!(used.machine_busy >= used.process / 2, "{used:?}");
        }
    }
}
