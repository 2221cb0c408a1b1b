//! The baseline relay benchmarks compare against: the same reads in the same batches,
//! the same bodies with the same parallelism, but no delivery records and no cursor;
//! and the same again with those writes done plainly, to show what they cost.

use futures_util::stream::{self, StreamExt};
use outbox_core::{
    BulkItem, DeliveryOutcome, DeliveryRecord, DispatchConfig, EventId, Ledger, PostOutcome, Store,
};

/// Reads every committed event of `store` and posts it to `ledger` (bulk or one by
/// one) as the dispatcher's default configuration would; returns how many it posted.
///
/// # Panics
/// On any store or ledger error: a benchmark baseline has no error path.
pub async fn raw_drain(store: &dyn Store, ledger: &dyn Ledger, bulk: bool) -> usize {
    drain(store, ledger, bulk, false).await
}

/// [`raw_drain`] plus the writes the relay's contract makes durable, done the plain
/// way, one after another per batch: the read horizon (`save_cursor` of
/// `raw@attempted`) before the batch is posted, then one accepted delivery record per
/// event (`append_deliveries`), then the cursor. What durable bookkeeping costs by
/// itself, as the store does it, with no pipelining.
///
/// # Panics
/// On any store or ledger error, or an answer other than accepted.
pub async fn raw_drain_recording(store: &dyn Store, ledger: &dyn Ledger, bulk: bool) -> usize {
    drain(store, ledger, bulk, true).await
}

async fn drain(store: &dyn Store, ledger: &dyn Ledger, bulk: bool, record: bool) -> usize {
    let config = DispatchConfig::default();
    let mut after = None;
    let mut seen = 0;
    loop {
        let batch = store
            .read_committed(after, config.batch_size)
            .await
            .expect("read");
        let Some(last) = batch.last().map(|e| e.position) else {
            return seen;
        };
        after = Some(last);
        seen += batch.len();
        if record {
            store
                .save_cursor("raw@attempted", last)
                .await
                .expect("horizon");
        }
        let bodies: Vec<(EventId, Vec<u8>)> = batch
            .iter()
            .map(|e| (e.event_id, e.payload.split().expect("payload").1.to_vec()))
            .collect();
        let answers: Vec<(EventId, PostOutcome)> = if bulk {
            stream::iter(bodies.chunks(config.max_bulk))
                .map(|chunk| async move {
                    let items: Vec<BulkItem<'_>> = chunk
                        .iter()
                        .map(|(k, b)| BulkItem { key: *k, body: b })
                        .collect();
                    let answers = ledger.post_bulk(&items).await.expect("bulk post");
                    chunk
                        .iter()
                        .zip(answers)
                        .map(|((k, _), a)| (*k, a.expect("bulk item")))
                        .collect::<Vec<_>>()
                })
                .buffer_unordered(config.parallel_requests)
                .flat_map(stream::iter)
                .collect()
                .await
        } else {
            stream::iter(&bodies)
                .map(|(k, b)| async move { (*k, ledger.post(*k, b).await.expect("post")) })
                .buffer_unordered(config.parallel_requests)
                .collect()
                .await
        };
        if record {
            let records: Vec<DeliveryRecord> = answers.into_iter().map(accepted).collect();
            store.append_deliveries(&records).await.expect("records");
            store.save_cursor("raw", last).await.expect("cursor");
        }
    }
}

/// The delivery record of an accepted post.
fn accepted((event_id, answer): (EventId, PostOutcome)) -> DeliveryRecord {
    let PostOutcome::Accepted { transaction_id } = answer else {
        panic!("{event_id}: the baseline expects every post accepted, got {answer:?}");
    };
    DeliveryRecord {
        event_id,
        attempt: 1,
        outcome: DeliveryOutcome::Accepted,
        ledger_tx_id: Some(transaction_id),
        error_code: None,
        detail: None,
        at: chrono::Utc::now(),
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
