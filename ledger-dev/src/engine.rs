//! The engine: ledgers behind one lock, the journal, and event hand-off.
//!
//! Every write follows plan → persist → apply → publish: the controller plans the
//! log entry against the current state, the journal stores it together with its
//! webhook deliveries, the state applies it, and the dispatcher is told that
//! deliveries wait (it reads them back from the journal, so a backlog costs the
//! file, not memory). Nothing is visible, nor published, before it is durable.
//!
//! All methods are synchronous (SQLite); the HTTP layer calls them on the blocking
//! pool.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use outbox_core::Result;
use serde_json::Value;

use crate::bulk::{BulkElement, BulkOp, BulkOptions, ElementResult};
use crate::clock;
use crate::commands::{CreateTransaction, MetadataCommand, RevertTransaction};
use crate::config::DevLedgerStats;
use crate::controller::{self, Plan, WriteContext};
use crate::errors::{ApiError, ErrorCode};
use crate::events;
use crate::faults::FaultInjector;
use crate::features;
use crate::log::Log;
use crate::persistence::{Journal, RecordedOutcome, StoredDelivery};
use crate::state::{LedgerInfo, LedgerState};
use crate::webhooks::{DeliveryJournal, WebhookQueue};

/// One ledger and its transaction-id sequence. The sequence lives outside the
/// state so an atomic bulk that rolls back still consumes its ids, like Postgres.
#[derive(Debug)]
struct Slot {
    state: LedgerState,
    next_tx_id: u64,
}

impl Slot {
    fn new(state: LedgerState) -> Self {
        let next_tx_id = state.last_transaction_id().map_or(1, |id| id + 1);
        Self { state, next_tx_id }
    }
}

#[derive(Debug)]
struct Inner {
    ledgers: BTreeMap<String, Slot>,
    journal: Journal,
}

#[derive(Debug)]
pub(crate) struct Engine {
    inner: Mutex<Inner>,
    webhooks: WebhookQueue,
    idempotency_hits: AtomicU64,
    bulk_max_size: usize,
    /// Read for its idempotency misbehaviours; the HTTP layer applies the rest.
    faults: FaultInjector,
}

/// `^[0-9a-zA-Z_-]{1,63}$` (`internal/ledger.go`).
pub(crate) fn valid_ledger_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Engine {
    /// Rebuilds the state from `journal`; returns the engine and how many
    /// deliveries were pending when the file was last closed.
    pub(crate) fn open(
        journal: Journal,
        webhooks: WebhookQueue,
        bulk_max_size: usize,
        faults: FaultInjector,
    ) -> Result<(Self, u64)> {
        let mut ledgers: BTreeMap<String, LedgerState> = journal
            .ledgers()?
            .into_iter()
            .map(|info| (info.name.clone(), LedgerState::new(info)))
            .collect();
        journal.replay(|ledger, log| {
            let state = ledgers.get_mut(ledger).ok_or_else(|| {
                outbox_core::Error::new(
                    outbox_core::ErrorKind::Storage,
                    format!(
                        "log {} names ledger {ledger:?}, which the file does not define",
                        log.id
                    ),
                )
            })?;
            state.apply(&log);
            Ok(())
        })?;
        let pending = journal.count_pending_deliveries()?;
        let ledgers = ledgers
            .into_iter()
            .map(|(name, state)| (name, Slot::new(state)))
            .collect();
        let engine = Self {
            inner: Mutex::new(Inner { ledgers, journal }),
            webhooks,
            idempotency_hits: AtomicU64::new(0),
            bulk_max_size,
            faults,
        };
        Ok((engine, pending))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Writes persist before they apply, so a panic mid-write leaves the state
        // at the last applied log: safe to keep serving.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn bulk_max_size(&self) -> usize {
        self.bulk_max_size
    }

    pub(crate) fn webhooks(&self) -> &WebhookQueue {
        &self.webhooks
    }

    pub(crate) fn stats(&self) -> DevLedgerStats {
        let transactions = self
            .lock()
            .ledgers
            .values()
            .map(|slot| slot.state.transactions.len() as u64)
            .sum();
        let counters = &self.webhooks.counters;
        DevLedgerStats {
            transactions,
            idempotency_hits: self.idempotency_hits.load(Ordering::Relaxed),
            webhooks_delivered: counters.delivered.load(Ordering::Relaxed),
            webhooks_pending: counters.pending(),
            webhooks_failed: counters.failed.load(Ordering::Relaxed),
            webhook_attempts: counters.attempts.load(Ordering::Relaxed),
            faults_injected: 0,
        }
    }

    // -- ledgers ------------------------------------------------------------

    /// `POST /v2/{ledger}`: 204, or 400 `LEDGER_ALREADY_EXISTS` / `VALIDATION`.
    /// `features` are the requested ones, applied over the defaults.
    pub(crate) fn create_ledger(
        &self,
        name: &str,
        metadata: outbox_core::Metadata,
        features: &BTreeMap<String, String>,
    ) -> Result<(), ApiError> {
        if !valid_ledger_name(name) {
            return Err(ApiError::validation(format!(
                "invalid ledger name {name:?}: it must match ^[0-9a-zA-Z_-]{{1,63}}$"
            )));
        }
        let features = features::with_requested(features)?;
        let mut inner = self.lock();
        if inner.ledgers.contains_key(name) {
            return Err(ApiError::new(
                ErrorCode::LedgerAlreadyExists,
                format!("ledger {name:?} already exists"),
            ));
        }
        let info = LedgerInfo {
            name: name.to_owned(),
            added_at: clock::now(),
            bucket: "_default".to_owned(),
            metadata,
            features,
            id: inner.ledgers.len() as u64 + 1,
        };
        inner
            .journal
            .insert_ledger(&info)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        tracing::info!(ledger = name, "ledger created");
        inner
            .ledgers
            .insert(name.to_owned(), Slot::new(LedgerState::new(info)));
        Ok(())
    }

    /// Creates `name` unless it exists (the `create_ledgers` start option).
    pub(crate) fn ensure_ledger(&self, name: &str) -> Result<(), ApiError> {
        match self.create_ledger(name, outbox_core::Metadata::new(), &BTreeMap::new()) {
            Err(e) if e.code == ErrorCode::LedgerAlreadyExists => Ok(()),
            other => other,
        }
    }

    /// Runs `f` on a ledger's state; 404 `LEDGER_NOT_FOUND` if unknown.
    pub(crate) fn read<R>(
        &self,
        ledger: &str,
        f: impl FnOnce(&LedgerState) -> R,
    ) -> Result<R, ApiError> {
        let inner = self.lock();
        let slot = inner
            .ledgers
            .get(ledger)
            .ok_or_else(|| ApiError::ledger_not_found(ledger))?;
        Ok(f(&slot.state))
    }

    /// Fails with `LEDGER_NOT_FOUND` before a body is even parsed, as the real
    /// ledger's resolver middleware does.
    pub(crate) fn require_ledger(&self, ledger: &str) -> Result<(), ApiError> {
        self.read(ledger, |_| ())
    }

    // -- writes -------------------------------------------------------------

    pub(crate) fn create_transaction(
        &self,
        ledger: &str,
        cmd: &CreateTransaction,
        key: Option<&str>,
        dry_run: bool,
    ) -> Result<Plan, ApiError> {
        self.write(ledger, key, dry_run, |ctx| {
            controller::create_transaction(ctx, cmd)
        })
    }

    pub(crate) fn revert_transaction(
        &self,
        ledger: &str,
        cmd: &RevertTransaction,
        key: Option<&str>,
        dry_run: bool,
    ) -> Result<Plan, ApiError> {
        self.write(ledger, key, dry_run, |ctx| {
            controller::revert_transaction(ctx, cmd)
        })
    }

    pub(crate) fn metadata(
        &self,
        ledger: &str,
        cmd: &MetadataCommand,
        key: Option<&str>,
        dry_run: bool,
    ) -> Result<Plan, ApiError> {
        self.write(ledger, key, dry_run, |ctx| controller::metadata(ctx, cmd))
    }

    fn write(
        &self,
        ledger: &str,
        key: Option<&str>,
        dry_run: bool,
        plan: impl FnOnce(&mut WriteContext<'_>) -> Result<Plan, ApiError>,
    ) -> Result<Plan, ApiError> {
        let mut inner = self.lock();
        let Inner { ledgers, journal } = &mut *inner;
        let slot = ledgers
            .get_mut(ledger)
            .ok_or_else(|| ApiError::ledger_not_found(ledger))?;
        let now = clock::now();
        let honour = self.faults.idempotency();
        let plan = plan(&mut WriteContext {
            state: &slot.state,
            next_tx_id: &mut slot.next_tx_id,
            now,
            idempotency_key: key.filter(|k| honour.key && !k.is_empty()),
            compare_hash: honour.hash,
        })?;
        if dry_run {
            // Run, then roll back: no log, no key, no event; the id stays consumed.
            return Ok(plan);
        }
        let deliveries = self.deliveries(ledger, &plan, now);
        self.commit(journal, ledger, &[&plan], &deliveries)?;
        if let Some(log) = plan.new_log() {
            slot.state.apply(log);
        }
        drop(inner);
        self.publish(&[&plan], deliveries.len());
        Ok(plan)
    }

    /// The webhook deliveries of a write. A replay publishes again, as the real
    /// ledger does (`ControllerWithEvents` ignores the hit flag).
    fn deliveries(&self, ledger: &str, plan: &Plan, now: DateTime<Utc>) -> Vec<StoredDelivery> {
        self.webhooks
            .deliveries_for(&events::for_log(ledger, plan.data()), now)
    }

    fn commit(
        &self,
        journal: &mut Journal,
        ledger: &str,
        plans: &[&Plan],
        deliveries: &[StoredDelivery],
    ) -> Result<(), ApiError> {
        let logs: Vec<&Log> = plans.iter().filter_map(|p| p.new_log()).collect();
        journal.commit(ledger, &logs, deliveries).map_err(|e| {
            tracing::error!(error = %e, ledger, "cannot persist a write");
            ApiError::internal(format!("cannot persist the write: {e}"))
        })
    }

    /// Counts the replays and tells the dispatcher that `deliveries` committed
    /// deliveries wait in the journal.
    fn publish(&self, plans: &[&Plan], deliveries: usize) {
        let hits = plans.iter().filter(|p| p.is_replay()).count() as u64;
        self.idempotency_hits.fetch_add(hits, Ordering::Relaxed);
        self.webhooks.announce(deliveries);
    }

    /// `POST /v2/{ledger}/_bulk`: elements in order, each with its own key.
    ///
    /// Without `atomic`, each element commits on its own. With it, everything
    /// commits at the end, or nothing if any element failed — the response still
    /// lists what each element did before the rollback, as the real ledger's does.
    /// An atomic bulk of creates (the relay's ordered runs) applies to the live
    /// state and is undone on failure (`undo`); one with reverts or metadata writes
    /// runs on a copy of the state.
    pub(crate) fn bulk(
        &self,
        ledger: &str,
        elements: &[BulkElement],
        options: BulkOptions,
    ) -> Result<Vec<ElementResult>, ApiError> {
        let mut inner = self.lock();
        let Inner { ledgers, journal } = &mut *inner;
        let slot = ledgers
            .get_mut(ledger)
            .ok_or_else(|| ApiError::ledger_not_found(ledger))?;
        let mut results = Vec::with_capacity(elements.len());
        let mut failed = false;

        let honour = self.faults.idempotency();
        let creates_only = elements
            .iter()
            .all(|e| matches!(&e.op, Ok(BulkOp::Create(_)) | Err(_)));
        let mut checkpoint = (options.atomic && creates_only).then(|| slot.state.checkpoint());
        let mut scratch = (options.atomic && !creates_only).then(|| slot.state.clone());
        let mut staged: Vec<(Plan, DateTime<Utc>)> = Vec::new();
        let mut published: Vec<Plan> = Vec::new();
        // What the dispatcher is told of; the deliveries themselves are in the journal.
        let mut announced = 0;

        for element in elements {
            if failed && !options.continue_on_failure {
                results.push(ElementResult::Canceled);
                continue;
            }
            let op = match &element.op {
                Ok(op) => op,
                Err(e) => {
                    failed = true;
                    results.push(ElementResult::Failed(e.clone()));
                    continue;
                }
            };
            let now = clock::now();
            let state = scratch.as_ref().unwrap_or(&slot.state);
            let mut ctx = WriteContext {
                state,
                next_tx_id: &mut slot.next_tx_id,
                now,
                idempotency_key: element
                    .ik
                    .as_deref()
                    .filter(|k| honour.key && !k.is_empty()),
                compare_hash: honour.hash,
            };
            let planned = match op {
                BulkOp::Create(cmd) => controller::create_transaction(&mut ctx, cmd),
                BulkOp::Revert(cmd) => controller::revert_transaction(&mut ctx, cmd),
                BulkOp::Metadata(cmd) => controller::metadata(&mut ctx, cmd),
            };
            let plan = match planned {
                Ok(plan) => plan,
                Err(e) => {
                    failed = true;
                    results.push(ElementResult::Failed(e));
                    continue;
                }
            };
            results.push(ElementResult::Done {
                log_id: plan.log_id(),
                data: plan.data().clone(),
            });
            match (scratch.as_mut(), checkpoint.as_mut()) {
                (Some(scratch), _) => {
                    if let Some(log) = plan.new_log() {
                        scratch.apply(log);
                    }
                    staged.push((plan, now));
                }
                (None, Some(checkpoint)) => {
                    if let Some(log) = plan.new_log() {
                        slot.state.apply_undoable(log, checkpoint);
                    }
                    staged.push((plan, now));
                }
                (None, None) => {
                    let deliveries = self.deliveries(ledger, &plan, now);
                    if let Err(e) = self.commit(journal, ledger, &[&plan], &deliveries) {
                        failed = true;
                        results.pop();
                        results.push(ElementResult::Failed(e));
                        continue;
                    }
                    if let Some(log) = plan.new_log() {
                        slot.state.apply(log);
                    }
                    announced += deliveries.len();
                    published.push(plan);
                }
            }
        }

        if options.atomic && !failed {
            let plans: Vec<&Plan> = staged.iter().map(|(p, _)| p).collect();
            let deliveries: Vec<StoredDelivery> = staged
                .iter()
                .flat_map(|(plan, at)| self.deliveries(ledger, plan, *at))
                .collect();
            if let Err(e) = self.commit(journal, ledger, &plans, &deliveries) {
                if let Some(checkpoint) = checkpoint {
                    slot.state.undo(checkpoint);
                }
                return Err(e);
            }
            if let Some(scratch) = scratch {
                slot.state = scratch;
            }
            announced += deliveries.len();
            published.extend(staged.into_iter().map(|(p, _)| p));
        } else if let Some(checkpoint) = checkpoint {
            slot.state.undo(checkpoint);
        }
        drop(inner);
        let refs: Vec<&Plan> = published.iter().collect();
        self.publish(&refs, announced);
        Ok(results)
    }

    // -- reads --------------------------------------------------------------

    /// The body of `GET /v2/{ledger}`.
    pub(crate) fn ledger_info(&self, ledger: &str) -> Result<Value, ApiError> {
        self.read(ledger, |state| {
            serde_json::to_value(&state.info).unwrap_or(Value::Null)
        })
    }
}

impl DeliveryJournal for Engine {
    fn record(&self, outcomes: &[RecordedOutcome]) {
        if let Err(e) = self.lock().journal.record_outcomes(outcomes) {
            // The deliveries stay pending and are re-sent after a restart:
            // duplicates, which at-least-once allows.
            tracing::error!(error = %e, deliveries = outcomes.len(), "cannot record webhook outcomes");
        }
    }

    fn pending_after(&self, after: i64, limit: usize) -> Result<Vec<(i64, StoredDelivery)>> {
        self.lock().journal.pending_deliveries_after(after, limit)
    }
}
