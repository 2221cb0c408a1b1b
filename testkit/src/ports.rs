//! Loopback ports for the parts of a test that must listen on a port known in
//! advance (a ledger restarted on the same address, a process told where to listen).
//!
//! Asking the kernel for port 0 and closing the socket again is not enough: the port
//! it hands out comes from the ephemeral range, which the kernel also uses for the
//! source port of every outbound connection (a pool connecting to PostgreSQL, a
//! producer connecting to a broker). Between the close and the moment the test binds
//! the port again, one of those connections can take it, and the bind fails with
//! "Address already in use". [`free_port`] therefore picks ports below the ephemeral
//! range, which outbound connections never use, and never hands the same port out
//! twice in one test process.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out: above the well-known services this machine runs.
const LOWEST: u16 = 20_000;

/// The kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), or
/// Linux's default when it cannot be read.
pub fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(|p| p.parse::<u16>());
            match (parts.next(), parts.next()) {
                (Some(Ok(low)), Some(Ok(high))) => Some((low, high)),
                _ => None,
            }
        })
        .unwrap_or((32_768, 60_999))
}

/// The ports [`free_port`] chooses from: below the ephemeral range when there is
/// room, otherwise above it.
fn candidates() -> (u16, u16) {
    let (low, high) = ephemeral_range();
    if low > LOWEST + 1_000 {
        (LOWEST, low - 1)
    } else {
        (high.saturating_add(1), u16::MAX)
    }
}

/// Where the next search starts; every call moves it on, so two callers in one
/// process never get the same port. It starts at a place that depends on the
/// process, so test binaries run one after another do not all reuse the same ports.
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// A loopback port nobody listens on right now, outside the kernel's ephemeral range.
pub fn free_port() -> u16 {
    let (first, last) = candidates();
    let span = u32::from(last - first) + 1;
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7_919) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = first + offset as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {first} and {last}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_stay_out_of_the_ephemeral_range() {
        let (low, high) = ephemeral_range();
        for _ in 0..50 {
            let port = free_port();
            assert!(
                !(low..=high).contains(&port),
                "{port} is in the ephemeral range {low}-{high}, where outbound connections can take it"
            );
        }
    }

    #[test]
    fn free_ports_are_bindable_and_never_handed_out_twice() {
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for port in ports.iter().take(20) {
            TcpListener::bind(("127.0.0.1", *port)).expect("a free port can be bound");
        }
    }
}
