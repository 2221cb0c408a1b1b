//! The baseline relay benchmarks compare against: the same reads in the same batches,
//! the same bodies with the same parallelism, but no delivery records and no cursor.

use futures_util::stream::{self, StreamExt};
use outbox_core::{BulkItem, DispatchConfig, EventId, Ledger, Store};

/// Reads every committed event of `store` and posts it to `ledger` (bulk or one by
/// one) as the dispatcher's default configuration would; returns how many it posted.
///
/// # Panics
/// On any store or ledger error: a benchmark baseline has no error path.
pub async fn raw_drain(store: &dyn Store, ledger: &dyn Ledger, bulk: bool) -> usize {
    let config = DispatchConfig::default();
    let mut after = None;
    let mut seen = 0;
    loop {
        let batch = store
            .read_committed(after, config.batch_size)
            .await
            .expect("read");
        let Some(last) = batch.last() else {
            return seen;
        };
        after = Some(last.position);
        seen += batch.len();
        let bodies: Vec<(EventId, Vec<u8>)> = batch
            .iter()
            .map(|e| (e.event_id, e.payload.split().expect("payload").1.to_vec()))
            .collect();
        if bulk {
            stream::iter(bodies.chunks(config.max_bulk))
                .map(|chunk| async move {
                    let items: Vec<BulkItem<'_>> = chunk
                        .iter()
                        .map(|(k, b)| BulkItem { key: *k, body: b })
                        .collect();
                    ledger.post_bulk(&items).await.expect("bulk post");
                })
                .buffer_unordered(config.parallel_requests)
                .collect::<Vec<()>>()
                .await;
        } else {
            stream::iter(&bodies)
                .map(|(k, b)| async move {
                    ledger.post(*k, b).await.expect("post");
                })
                .buffer_unordered(config.parallel_requests)
                .collect::<Vec<()>>()
                .await;
        }
    }
}

/// The hand-rolled single worker a team writes for one account: reads the committed
/// events in batches and posts them one after another, in order, each with its key;
/// records nothing. Returns how many it posted.
///
/// # Panics
/// On any store or ledger error: a benchmark baseline has no error path.
pub async fn raw_drain_in_order(store: &dyn Store, ledger: &dyn Ledger) -> usize {
    let batch_size = DispatchConfig::default().batch_size;
    let mut after = None;
    let mut seen = 0;
    loop {
        let batch = store.read_committed(after, batch_size).await.expect("read");
        let Some(last) = batch.last() else {
            return seen;
        };
        after = Some(last.position);
        seen += batch.len();
        for event in &batch {
            let body = event.payload.split().expect("payload").1;
            ledger.post(event.event_id, body).await.expect("post");
        }
    }
}
