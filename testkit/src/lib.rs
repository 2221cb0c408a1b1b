//! Conformance suites every ledger-outbox adapter must pass.
//!
//! Each behaviour is one `pub async fn` taking a harness; the macros
//! [`store_suite!`], [`reconcile_suite!`], [`inbox_suite!`], [`fanout_store_suite!`],
//! [`transport_suite!`] and [`ledger_suite!`] expand to one `#[tokio::test]` per case
//! for a backend, so a failure names its case and its backend. Each test gets a fresh
//! harness (a fresh database file or schema, a fresh ledger).

pub mod accepting_ledger;
pub mod auditor;
pub mod bench_args;
pub mod cpu_time;
pub mod exception_cases;
pub mod fanout_cases;
pub mod fixtures;
pub mod forwarder;
pub mod harness;
pub mod inbox_cases;
pub mod ledger_cases;
pub mod ledger_harness;
pub mod null_ledger;
pub mod peak_rss;
pub mod ports;
pub mod raw_drain;
pub mod reconcile_cases;
pub mod status_cases;
pub mod store_cases;
pub mod tamper;
pub mod tansu;
pub mod transport_cases;
pub mod transport_harness;
pub mod transport_parts;
pub mod write_lock;

pub use harness::{FanoutStoreHarness, InboxHarness, ReconcileHarness, StoreHarness, ThroughDyn};
pub use ledger_harness::{LedgerFault, LedgerHarness, PreparedRefusal};
pub use tamper::{FanoutTamper, StoreTamper};
pub use transport_harness::{Destination, InjectedFault, ProbeConsumer, TransportHarness};
pub use transport_parts::{SqliteProbe, sqlite_fanout_store};

/// Expands to one test per store case for `$harness` (a type implementing
/// [`StoreHarness`]); the case `works_through_dyn_store` runs the store through
/// `Arc<dyn Store>` ([`StoreHarness::dyn_store`]).
///
/// Callable from any crate: the calling test crate needs `outbox-testkit` and
/// `tokio` (features `macros`, `rt-multi-thread`) as dev-dependencies. How to write
/// the harness: docs/ADAPTERS.md, "Store and relay".
#[macro_export]
macro_rules! store_suite {
    ($harness:ty) => {
        $crate::store_suite!(@cases $harness;
            row_visible_only_after_commit,
            rollback_leaves_no_row_and_no_gap,
            concurrent_writers_get_gapless_unique_sequences,
            outbox_rows_and_deliveries_refuse_update_and_delete,
            payload_bytes_round_trip_exactly,
            cursor_survives_reopening,
            late_commit_is_still_delivered,
            invalid_event_names_field_and_keeps_transaction_usable,
            deliveries_are_recorded_in_order,
            exceptions_are_recorded_once,
            every_exception_field_round_trips,
            an_open_duplicate_is_not_recorded_twice,
            concurrent_raisers_of_one_finding_record_it_once,
            a_finding_back_after_its_resolution_is_recorded_again,
            a_resolution_is_recorded_once_and_never_replaced,
            resolving_an_unknown_exception_or_without_a_note_is_refused,
            exceptions_and_resolutions_refuse_update_and_delete,
            exceptions_filter_by_open_and_kind,
            lag_reports_pending_and_age,
            relay_wakes_up_on_enqueue,
            works_through_dyn_store,
            cursor_never_moves_back,
            cursors_of_every_name_move_forward_only,
            attempted_horizon_is_a_cursor_that_bounds_the_uncertain_window,
            positions_round_trip_through_save_and_load,
            positions_order_as_commits,
            delivery_states_answer_a_batch,
            revert_target_must_be_known_and_of_the_same_account,
        );
    };
    (@cases $harness:ty; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let harness = <$harness as $crate::StoreHarness>::new().await;
                $crate::store_cases::$case(&harness).await;
            }
        )+
    };
}

/// Expands to one test per reconciliation store case for `$harness` (a type
/// implementing [`ReconcileHarness`]).
#[macro_export]
macro_rules! reconcile_suite {
    ($harness:ty) => {
        $crate::reconcile_suite!(@cases $harness;
            markers_page_in_key_order_across_consumers_with_a_repeated_sequence,
            held_gaps_name_every_consumer_with_its_count_and_lowest_held,
            markers_pruned_follows_the_inbox_retention_permits,
            checkpoint_moves_forward_only_on_each_side,
            seen_is_insert_once_and_matches_by_event_id_or_reference,
            events_to_check_pages_in_commit_order_with_states_and_seen,
            events_to_check_never_skips_a_late_commit,
            events_by_ids_leaves_unknown_ids_out,
            last_posted_is_newest_first_within_before_and_limit,
        );
    };
    (@cases $harness:ty; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let harness = <$harness as $crate::StoreHarness>::new().await;
                $crate::reconcile_cases::$case(&harness).await;
            }
        )+
    };
}

/// Expands to one test per inbox case for `$harness` (a type implementing [`InboxHarness`]),
/// each on a current-thread runtime (inbox storage need not be `Send`).
///
/// Callable from any crate: the calling test crate needs `outbox-testkit` and `tokio`
/// (features `macros`, `rt`) as dev-dependencies. How to write the harness:
/// docs/ADAPTERS.md, "Inbox".
#[macro_export]
macro_rules! inbox_suite {
    ($harness:ty) => {
        $crate::inbox_suite!(@cases $harness;
            next_sequence_is_applied,
            duplicate_instruction_has_no_effect,
            stale_sequence_has_no_effect_and_is_recorded,
            skipped_number_is_held_then_released_in_order,
            reversal_before_posting_is_held_then_applied,
            rejected_notice_consumes_sequence_without_impact,
            handler_failure_marks_nothing,
            same_amount_new_instruction_is_applied,
            gap_older_than_alarm_age_raises_one_alarm_and_is_not_skipped,
            young_gap_raises_no_alarm,
            duplicate_of_held_message_is_absorbed,
            conflicting_instruction_for_held_sequence_is_recorded,
            consumers_are_isolated,
            committed_after_rejected_is_a_conflicting_outcome,
            rejected_after_committed_is_a_conflicting_outcome,
            conflicting_outcome_of_a_held_message_is_recorded,
            same_outcome_again_stays_a_plain_duplicate,
        );
    };
    (@cases $harness:ty; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let harness = <$harness as $crate::InboxHarness>::new().await;
                $crate::inbox_cases::$case(&harness).await;
            }
        )+
    };
}

/// Expands to one test per fan-out store case for `$harness` (a type implementing
/// [`FanoutStoreHarness`]), twice: in `native` on the harness's own store type, and in
/// `through_dyn` on the same backend through `Arc<dyn FanoutStore>` ([`ThroughDyn`]).
///
/// Invoke it inside a module of its own: it also defines the type alias
/// `FanoutSuiteHarness` there.
///
/// Callable from any crate: the calling test crate needs `outbox-testkit` and `tokio`
/// (features `macros`, `rt-multi-thread`) as dev-dependencies. How to write the
/// harness: docs/ADAPTERS.md, "Fan-out store (FanoutStore)".
#[macro_export]
macro_rules! fanout_store_suite {
    ($harness:ty) => {
        type FanoutSuiteHarness = $harness;
        mod native {
            $crate::fanout_store_suite!(@all super::FanoutSuiteHarness);
        }
        mod through_dyn {
            $crate::fanout_store_suite!(@all $crate::ThroughDyn<super::FanoutSuiteHarness>);
        }
    };
    (@all $harness:ty) => {
        $crate::fanout_store_suite!(@cases $harness;
            append_then_read_returns_every_field_intact_in_order,
            second_append_of_a_delivery_id_stores_nothing,
            ledger_replay_under_a_new_delivery_id_is_deduplicated,
            duplicates_within_one_append_are_stored_once,
            failed_append_stores_nothing_and_forgets_the_delivery,
            read_after_honours_after_and_limit_ascending,
            cursors_are_per_transport_start_at_zero_and_never_move_back,
            messages_and_deliveries_refuse_update_and_delete,
            concurrent_appends_reach_a_following_reader_exactly_once,
            unreachable_backend_fails_transiently,
            dead_letters_are_recorded_in_order_and_read_back_intact,
            a_failed_dead_letter_append_records_nothing,
            set_aside_messages_are_read_per_destination_and_account,
            a_replay_request_covers_the_latest_refusal,
            dead_letters_and_replay_requests_refuse_update_and_delete,
        );
    };
    (@cases $harness:ty; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let harness = <$harness as $crate::FanoutStoreHarness>::new().await;
                $crate::fanout_cases::$case(&harness).await;
            }
        )+
    };
}

/// Expands to one test per transport case for `$harness` (a type implementing
/// [`TransportHarness`]). Publishers and subscribers are used as `Arc<dyn …>`.
///
/// Callable from any crate: the expansion names only this crate (`$crate`) and
/// `tokio`, so the calling test crate needs `outbox-testkit` and `tokio` (features
/// `macros`, `rt-multi-thread`) as dev-dependencies. Each case is also a `pub async fn`
/// of [`transport_cases`], for a crate that prefers to write its tests by hand. How
/// to write the harness: docs/ADAPTERS.md, "Transports".
#[macro_export]
macro_rules! transport_suite {
    ($harness:ty) => {
        $crate::transport_suite!(@cases $harness;
            delivered_with_payload_and_headers_intact,
            per_account_order_holds_with_accounts_interleaved,
            redelivered_duplicates_are_absorbed_by_the_inbox,
            broker_restart_mid_stream_loses_nothing,
            injected_faults_map_to_error_kind_and_retry_class,
        );
    };
    (@cases $harness:ty; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let harness = <$harness as $crate::TransportHarness>::new().await;
                $crate::transport_cases::$case(&harness).await;
            }
        )+
    };
}

/// Expands to one test per ledger case for `$harness` (a type implementing
/// [`LedgerHarness`]): the ledger conformance suite of docs/ADAPTERS.md#ledger.
///
/// From an adapter's own crate, with `outbox-testkit` as a dev-dependency:
///
/// ```ignore
/// struct MyHarness { /* a fresh ledger per case */ }
/// #[async_trait::async_trait]
/// impl outbox_testkit::LedgerHarness for MyHarness { /* ... */ }
/// outbox_testkit::ledger_suite!(MyHarness);
/// ```
///
/// A case the adapter's capabilities or the harness cannot exercise (no ordered runs,
/// no fault injection) passes after printing `skipped <case>: <why>`.
#[macro_export]
macro_rules! ledger_suite {
    ($harness:ty) => {
        $crate::ledger_suite!(@cases $harness;
            a_repeated_post_creates_one_transaction,
            a_replay_answers_the_original_transaction_id,
            the_same_key_with_another_body_is_a_permanent_mismatch,
            insufficient_funds_is_rejected_and_keeps_no_key,
            every_refusal_the_ledger_names_is_rejected_and_keeps_no_key,
            bulk_items_are_independent,
            a_bulk_replay_answers_the_original_id_and_a_bulk_mismatch_is_permanent,
            a_run_commits_every_element_in_order,
            a_refusal_inside_a_run_rolls_it_back_and_keeps_no_key,
            a_run_replays_an_element_already_posted,
            a_failed_run_call_leaves_all_or_nothing,
            revert_is_accepted_replayed_then_already_reverted,
            reverting_an_unknown_transaction_is_a_permanent_not_found,
            a_transaction_is_found_by_its_event_id_and_an_unknown_one_is_none,
            aggregate_balances_are_signed_per_asset_and_empty_when_nothing_matches,
            unavailable_and_throttled_are_transient_with_retry_after,
            an_answer_lost_after_commit_is_transient_and_replays_on_retry,
            rejection_notices_are_idempotent_and_found_per_event,
        );
    };
    (@cases $harness:ty; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let harness = <$harness as $crate::LedgerHarness>::new().await;
                $crate::ledger_cases::$case(&harness).await;
            }
        )+
    };
}
