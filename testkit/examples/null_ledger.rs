//! The benchmarks' null Formance ledger as a process of its own, for measurements
//! that drive the real `outbox` binary (`scripts/measure-debug-vs-release.sh`).
//!
//! Prints `listening on http://127.0.0.1:PORT` once it serves, then answers every
//! create and bulk with success at once until it is killed.
//!
//! Run: `cargo run --release -p outbox-testkit --example null_ledger`.

#[tokio::main]
async fn main() {
    let ledger = outbox_testkit::null_ledger::null_ledger().await;
    println!("listening on {}", ledger.url);
    std::future::pending::<()>().await;
}
