//! The exception-queue cases of the store suite ([`crate::store_suite!`]): every field
//! stored exactly, an open finding recorded once (also under concurrent raisers), a
//! finding that comes back after its resolution recorded again, resolutions that are
//! append-only, filters in the store's query.

use std::time::Duration;

use chrono::Utc;
use outbox_core::{
    ErrorKind, Exception, ExceptionKind, ExceptionQuery, NewException, Severity, Store,
};

use crate::fixtures::account;
use crate::harness::StoreHarness;
use crate::tamper::{self, StoreTamper};

/// The balance check's finding on merchant 4471's pending payouts: every optional
/// field set, an amount beyond i64 and a negative one.
fn balance_finding() -> NewException {
    NewException::new(
        "reconcile:balances",
        ExceptionKind::BalanceMismatch,
        account("merchants:4471:payouts:pending"),
        7,
        "statement line off by $485,000.00",
    )
    .with_severity(Severity::Warning)
    .with_event_id("01a23184-38b9-70de-ae6f-a8078bb71421")
    .with_ledger_tx(73)
    .with_asset("USD/2")
    .with_amounts(Some(i128::from(i64::MAX) * 1_000 + 7), Some(-48_500_000))
}

fn gap(account_name: &str, sequence: u64) -> NewException {
    NewException::new(
        "treasury",
        ExceptionKind::Gap,
        account(account_name),
        sequence,
        "held for 301 s",
    )
}

fn ids(exceptions: &[Exception]) -> Vec<i64> {
    exceptions.iter().map(|e| e.id).collect()
}

/// `raised` as the store must give it back: every field of the finding, open.
fn assert_stored(stored: &Exception, raised: &NewException) {
    assert_eq!(
        (
            stored.source.as_str(),
            stored.kind,
            stored.severity,
            &stored.account,
            stored.sequence,
        ),
        (
            raised.source.as_str(),
            raised.kind,
            raised.severity,
            &raised.account,
            raised.sequence,
        ),
        "{stored:?}"
    );
    assert_eq!(stored.event_id, raised.event_id, "{stored:?}");
    assert_eq!(stored.ledger_tx, raised.ledger_tx, "{stored:?}");
    assert_eq!(stored.asset, raised.asset, "{stored:?}");
    assert_eq!(stored.ledger_amount, raised.ledger_amount, "{stored:?}");
    assert_eq!(stored.provider_amount, raised.provider_amount, "{stored:?}");
    assert_eq!(stored.detail, raised.detail, "{stored:?}");
    assert!(stored.is_open(), "{stored:?}");
}

pub async fn every_exception_field_round_trips<H: StoreHarness>(h: &H) {
    let before = Utc::now() - chrono::Duration::seconds(5);
    let full = balance_finding();
    let extremes = NewException::new(
        "reconcile:balances",
        ExceptionKind::BalanceMismatch,
        account("merchants:1"),
        0,
        "",
    )
    .with_asset("EUR/2")
    .with_amounts(Some(i128::MIN), Some(i128::MAX));
    let bare = NewException::new(
        "relay",
        ExceptionKind::Rejected,
        account("merchants:1007"),
        2,
        "INSUFFICIENT_FUND: \"quoted\" and ünïcode",
    );
    let store = h.store();
    for raised in [&full, &extremes, &bare] {
        assert!(
            store.raise_exception(raised).await.expect("raise"),
            "{raised:?}"
        );
    }
    let after = Utc::now() + chrono::Duration::seconds(5);
    // Read back by a new store instance: what was stored, not what was cached.
    let read = h.reopen().await.exceptions().await.expect("list");
    assert_eq!(read.len(), 3, "{read:#?}");
    for (stored, raised) in read.iter().zip([&full, &extremes, &bare]) {
        assert_stored(stored, raised);
        assert!(
            before <= stored.detected_at && stored.detected_at <= after,
            "{stored:?}"
        );
    }
    assert!(
        read[0].id < read[1].id && read[1].id < read[2].id,
        "{read:?}"
    );
    assert_eq!(read[2].severity, Severity::Info, "the kind's default");
    assert_eq!(
        (read[2].event_id.as_deref(), read[2].ledger_amount),
        (None, None)
    );
}

pub async fn an_open_duplicate_is_not_recorded_twice<H: StoreHarness>(h: &H) {
    let store = h.store();
    let finding = balance_finding();
    assert!(store.raise_exception(&finding).await.expect("raise"));
    // A re-run words and measures it differently: still the same open finding.
    let rerun = NewException {
        detail: "statement line off by $485,000.01".into(),
        severity: Severity::Critical,
        ..finding.clone()
    }
    .with_amounts(Some(1), Some(2))
    .with_ledger_tx(74);
    assert!(!store.raise_exception(&rerun).await.expect("rerun"));
    // Another event, asset, sequence or source is another finding.
    let others = [
        finding.clone().with_asset("EUR/2"),
        finding
            .clone()
            .with_event_id("01a23184-38b9-70de-ae6f-a80937e9190f"),
        NewException {
            sequence: 8,
            ..finding.clone()
        },
        NewException {
            source: "reconcile:ledger".into(),
            ..finding.clone()
        },
    ];
    for other in &others {
        assert!(
            store.raise_exception(other).await.expect("other"),
            "{other:?}"
        );
    }
    let all = store.exceptions().await.expect("list");
    assert_eq!(all.len(), 5, "{all:#?}");
    assert_stored(&all[0], &finding);
}

pub async fn concurrent_raisers_of_one_finding_record_it_once<H: StoreHarness>(h: &H) {
    let finding = balance_finding();
    // Store instances of their own (a pool or a connection each), as several
    // processes running the same check would.
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(h.reopen().await);
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(stores.len()));
    let raisers: Vec<_> = stores
        .into_iter()
        .map(|store| {
            let (finding, barrier) = (finding.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.raise_exception(&finding).await
            })
        })
        .collect();
    let mut recorded = 0;
    for raiser in raisers {
        if raiser.await.expect("raiser").expect("raise") {
            recorded += 1;
        }
    }
    assert_eq!(recorded, 1, "every raiser but one must record nothing");
    let all = h.store().exceptions().await.expect("list");
    assert_eq!(all.len(), 1, "{all:#?}");
}

pub async fn a_finding_back_after_its_resolution_is_recorded_again<H: StoreHarness>(h: &H) {
    let store = h.store();
    let finding = gap("merchants:4471", 3);
    assert!(store.raise_exception(&finding).await.expect("raise"));
    let first = store.exceptions().await.expect("list")[0].id;
    let resolution = store
        .resolve_exception(first, "alice", "sequence 3 redelivered by the fan-out")
        .await
        .expect("resolve");
    assert!(
        store.raise_exception(&finding).await.expect("again"),
        "the gap came back after its resolution: a new exception"
    );
    assert!(
        !store.raise_exception(&finding).await.expect("rerun"),
        "and that one is open: not recorded twice"
    );
    let all = store.exceptions().await.expect("list");
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[0].resolution.as_ref(), Some(&resolution));
    assert!(all[1].id > first && all[1].is_open(), "{all:#?}");
    assert_stored(&all[1], &finding);
    store
        .resolve_exception(all[1].id, "bob", "fixed again")
        .await
        .expect("resolve the second");
    assert!(store.raise_exception(&finding).await.expect("third time"));
    let open = store
        .exceptions_matching(&ExceptionQuery {
            open_only: true,
            ..ExceptionQuery::default()
        })
        .await
        .expect("open");
    assert_eq!(open.len(), 1, "{open:#?}");
    assert!(open[0].id > all[1].id);
}

pub async fn a_resolution_is_recorded_once_and_never_replaced<H: StoreHarness>(h: &H) {
    // Through `Arc<dyn Store>`, as the `outbox exceptions` command holds it.
    let store = h.dyn_store();
    assert!(
        store
            .raise_exception(&balance_finding())
            .await
            .expect("raise")
    );
    let id = store.exceptions().await.expect("list")[0].id;
    let before = Utc::now() - chrono::Duration::seconds(5);
    let resolution = store
        .resolve_exception(id, "alice", "provider statement corrected; line re-issued")
        .await
        .expect("resolve");
    assert_eq!(
        (resolution.resolved_by.as_str(), resolution.note.as_str()),
        ("alice", "provider statement corrected; line re-issued")
    );
    assert!(
        resolution.resolved_at >= before
            && resolution.resolved_at <= Utc::now() + Duration::from_secs(5),
        "{resolution:?}"
    );
    let err = store
        .resolve_exception(id, "mallory", "nothing to see")
        .await
        .expect_err("a second resolution");
    assert_eq!(err.field(), Some("id"), "{err}");
    assert!(err.message().contains("already resolved"), "{err}");
    let read = h.reopen().await.exceptions().await.expect("list");
    assert_eq!(read[0].resolution, Some(resolution), "{read:#?}");
}

pub async fn resolving_an_unknown_exception_or_without_a_note_is_refused<H: StoreHarness>(h: &H) {
    let store = h.store();
    let err = store
        .resolve_exception(4242, "alice", "a note")
        .await
        .expect_err("no such exception");
    assert_eq!(err.field(), Some("id"), "{err}");
    assert!(err.message().contains("4242"), "{err}");
    assert!(store.raise_exception(&gap("merchants:1", 2)).await.unwrap());
    let id = store.exceptions().await.expect("list")[0].id;
    for note in ["", "   \n"] {
        let err = store
            .resolve_exception(id, "alice", note)
            .await
            .expect_err("an empty note");
        assert_eq!(err.field(), Some("note"), "{note:?}: {err}");
    }
    let err = store
        .resolve_exception(id, " ", "a note")
        .await
        .expect_err("nobody");
    assert_eq!(err.field(), Some("resolved_by"), "{err}");
    assert!(
        store.exceptions().await.expect("list")[0].is_open(),
        "a refused resolution records nothing"
    );
}

pub async fn exceptions_and_resolutions_refuse_update_and_delete<H: StoreHarness>(h: &H) {
    let store = h.store();
    assert!(store.raise_exception(&balance_finding()).await.unwrap());
    assert!(store.raise_exception(&gap("merchants:1", 2)).await.unwrap());
    let all = store.exceptions().await.expect("list");
    store
        .resolve_exception(all[0].id, "alice", "explained")
        .await
        .expect("resolve");
    for (i, tamper) in StoreTamper::EXCEPTIONS.into_iter().enumerate() {
        let answer = h.tamper(tamper).await;
        // Only the first may be unsupported: a harness tries every tamper or none.
        if i == 0
            && tamper::skipped(
                "exceptions_and_resolutions_refuse_update_and_delete",
                &answer,
            )
        {
            return;
        }
        let Err(err) = answer else {
            panic!("{tamper:?} was not refused: {answer:?}");
        };
        assert_eq!(err.kind(), &ErrorKind::Immutable, "{tamper:?}: {err}");
    }
    let after = store.exceptions().await.expect("list");
    assert_eq!(after.len(), 2, "{after:#?}");
    let kept = after[0].resolution.as_ref().expect("the resolution stays");
    assert_eq!(
        (kept.resolved_by.as_str(), kept.note.as_str()),
        ("alice", "explained")
    );
    let unresolved = Exception {
        resolution: None,
        ..after[0].clone()
    };
    assert_eq!(
        (&unresolved, &after[1]),
        (&all[0], &all[1]),
        "nothing changed"
    );
}

pub async fn exceptions_filter_by_open_and_kind<H: StoreHarness>(h: &H) {
    let store = h.store();
    let raised = [
        gap("merchants:1", 2),
        balance_finding(),
        gap("merchants:2", 5),
        NewException::new(
            "relay",
            ExceptionKind::Rejected,
            account("merchants:1007"),
            2,
            "INSUFFICIENT_FUND",
        ),
    ];
    for exception in &raised {
        assert!(store.raise_exception(exception).await.unwrap());
    }
    let all = store.exceptions().await.expect("list");
    store
        .resolve_exception(all[0].id, "alice", "filled")
        .await
        .expect("resolve");
    let query = |open_only: bool, kinds: &[ExceptionKind]| ExceptionQuery {
        open_only,
        kinds: kinds.to_vec(),
    };
    let cases = [
        (query(false, &[]), vec![0, 1, 2, 3]),
        (query(true, &[]), vec![1, 2, 3]),
        (query(false, &[ExceptionKind::Gap]), vec![0, 2]),
        (query(true, &[ExceptionKind::Gap]), vec![2]),
        (
            query(
                false,
                &[ExceptionKind::BalanceMismatch, ExceptionKind::Rejected],
            ),
            vec![1, 3],
        ),
        (query(true, &[ExceptionKind::OrphanTransaction]), vec![]),
    ];
    let everything = store.exceptions().await.expect("list");
    for (query, expected) in cases {
        let found = store.exceptions_matching(&query).await.expect("matching");
        let expected: Vec<i64> = expected.into_iter().map(|i| all[i].id).collect();
        assert_eq!(ids(&found), expected, "{query:?}");
        // The store's query and the core's rule agree.
        let by_rule: Vec<Exception> = everything
            .iter()
            .filter(|e| query.matches(e))
            .cloned()
            .collect();
        assert_eq!(found, by_rule, "{query:?}");
    }
}
