//! Starting SQLite writers while another connection holds the write lock, so they
//! queue up behind it and can be seen to commit together once it is released.

use std::path::Path;
use std::time::Duration;

use outbox_store_sqlite::{SqliteConfig, connect};
use tokio::task::JoinHandle;

/// How long the queued writers are given to show they cannot finish.
const HELD_FOR: Duration = Duration::from_millis(300);

/// Takes the write lock of `db` on a connection of its own, starts the tasks
/// `spawn` returns, checks that none of them finishes while the lock is held,
/// releases it and returns their outputs in order.
///
/// # Panics
/// When a task finishes behind the lock (it did not write, or wrote elsewhere), or
/// panics itself.
pub async fn behind_the_write_lock<T>(
    db: &Path,
    spawn: impl FnOnce() -> Vec<JoinHandle<T>>,
) -> Vec<T>
where
    T: Send + 'static,
{
    let blocker = connect(&SqliteConfig::new(db)).expect("connect the blocker");
    blocker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");
    let tasks = spawn();
    tokio::time::sleep(HELD_FOR).await;
    assert!(
        tasks.iter().all(|t| !t.is_finished()),
        "no writer can finish while another connection holds the write lock"
    );
    blocker
        .execute_batch("COMMIT")
        .expect("release the write lock");
    let mut outputs = Vec::with_capacity(tasks.len());
    for task in tasks {
        outputs.push(task.await.expect("writer task"));
    }
    outputs
}
