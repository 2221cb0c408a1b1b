//! The ledger's business rules: turns a command into the log entry it would write,
//! without changing anything (the engine persists the entry, then applies it).
//!
//! Check order follows the real controller: idempotency lookup first, then the
//! script run (funds), metadata override, then the id and the reference insert.

use chrono::{DateTime, Utc};
use outbox_core::{Metadata, Posting};
use std::collections::BTreeMap;

use crate::commands::{CreateBody, CreateTransaction, MetadataCommand, RevertTransaction};
use crate::errors::{ApiError, ErrorCode};
use crate::idempotency;
use crate::log::{Log, LogData};
use crate::model::{REVERTS_METADATA_KEY, Target, Transaction};
use crate::numscript::{Program, Runtime, ScriptError};
use crate::state::LedgerState;

/// What a write resolved to.
#[derive(Debug, Clone)]
pub(crate) enum Plan {
    /// A new log entry, to persist and apply.
    New(Log),
    /// The idempotency key was seen with the same command: the stored result.
    Replay { log_id: u64, data: LogData },
}

impl Plan {
    pub(crate) fn data(&self) -> &LogData {
        match self {
            Self::New(log) => &log.data,
            Self::Replay { data, .. } => data,
        }
    }

    pub(crate) fn log_id(&self) -> u64 {
        match self {
            Self::New(log) => log.id,
            Self::Replay { log_id, .. } => *log_id,
        }
    }

    pub(crate) fn new_log(&self) -> Option<&Log> {
        match self {
            Self::New(log) => Some(log),
            Self::Replay { .. } => None,
        }
    }

    pub(crate) fn is_replay(&self) -> bool {
        matches!(self, Self::Replay { .. })
    }
}

/// Where a write happens: the ledger's state, its id sequence, the clock.
#[derive(Debug)]
pub(crate) struct WriteContext<'a> {
    pub(crate) state: &'a LedgerState,
    /// Next transaction id. Consumed at "insert" time, so a dry run or a
    /// reference conflict leaves a gap, as the Postgres sequence does.
    pub(crate) next_tx_id: &'a mut u64,
    pub(crate) now: DateTime<Utc>,
    pub(crate) idempotency_key: Option<&'a str>,
    /// Whether a stored key's hash is compared (false only under a misbehaviour fault).
    pub(crate) compare_hash: bool,
}

impl WriteContext<'_> {
    /// The stored result when the key was already used with this `hash`.
    fn replay(&self, hash: &str) -> Result<Option<Plan>, ApiError> {
        Ok(
            idempotency::lookup(self.state, self.idempotency_key, hash, self.compare_hash)?.map(
                |log| Plan::Replay {
                    log_id: log.id,
                    data: log.data.to_model(),
                },
            ),
        )
    }

    fn take_tx_id(&mut self) -> u64 {
        let id = *self.next_tx_id;
        *self.next_tx_id += 1;
        id
    }

    fn log(&self, hash: String, data: LogData) -> Log {
        Log {
            id: self.state.last_log_id + 1,
            date: self.now,
            idempotency_key: self.idempotency_key.map(str::to_owned),
            idempotency_hash: self.idempotency_key.map(|_| hash),
            data,
        }
    }

    fn new_transaction(
        &mut self,
        postings: Vec<Posting>,
        metadata: Metadata,
        timestamp: DateTime<Utc>,
        reference: Option<String>,
    ) -> Transaction {
        let id = self.take_tx_id();
        let [pre, pre_effective, post, post_effective] =
            self.state.commit_volumes(&postings, timestamp);
        Transaction {
            postings,
            metadata,
            timestamp,
            reference,
            id,
            inserted_at: self.now,
            updated_at: self.now,
            reverted_at: None,
            post_commit_volumes: post,
            post_commit_effective_volumes: post_effective,
            reverted: false,
            pre_commit_volumes: pre,
            pre_commit_effective_volumes: pre_effective,
        }
    }
}

fn script_error(runtime: Runtime, e: ScriptError) -> ApiError {
    match (runtime, e) {
        (_, ScriptError::InsufficientFund(m)) => ApiError::new(ErrorCode::InsufficientFund, m),
        (Runtime::Machine, ScriptError::Parse(m) | ScriptError::Vars(m)) => {
            ApiError::new(ErrorCode::CompilationFailed, m)
        }
        (Runtime::Interpreter, ScriptError::Parse(m)) => {
            ApiError::new(ErrorCode::InterpreterParse, m)
        }
        (Runtime::Interpreter, ScriptError::Vars(m)) => {
            ApiError::new(ErrorCode::InterpreterRuntime, m)
        }
    }
}

/// Plans `POST /transactions`.
pub(crate) fn create_transaction(
    ctx: &mut WriteContext<'_>,
    cmd: &CreateTransaction,
) -> Result<Plan, ApiError> {
    let hash = idempotency::hash("CREATE_TRANSACTION", cmd);
    if let Some(replay) = ctx.replay(&hash)? {
        return Ok(replay);
    }
    let state = ctx.state;
    let balance = |account: &str, asset: &str| state.balance(account, asset);
    let outcome = match &cmd.body {
        CreateBody::Postings { postings, force } => Program::from_postings(postings, *force)
            .run(&BTreeMap::new(), balance)
            .map_err(|e| script_error(Runtime::Machine, e))?,
        CreateBody::Script { plain, vars } => Program::compile(plain, cmd.runtime)
            .and_then(|program| program.run(vars, balance))
            .map_err(|e| script_error(cmd.runtime, e))?,
    };
    let mut metadata = cmd.metadata.clone().unwrap_or_default();
    for (key, value) in outcome.tx_meta {
        if metadata.contains_key(&key) {
            return Err(ApiError::new(
                ErrorCode::MetadataOverride,
                format!(
                    "metadata {key:?} is set both by the script (set_tx_meta) and in the request's metadata"
                ),
            ));
        }
        metadata.insert(key, value);
    }
    if outcome.postings.is_empty() {
        return Err(ApiError::new(
            ErrorCode::NoPostings,
            "the script produced no postings",
        ));
    }
    let timestamp = cmd.timestamp.unwrap_or(ctx.now);
    let transaction =
        ctx.new_transaction(outcome.postings, metadata, timestamp, cmd.reference.clone());
    if let Some(reference) = &cmd.reference
        && state.references.contains_key(reference)
    {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("failed to insert transaction: duplicate reference {reference:?}"),
        ));
    }
    Ok(Plan::New(ctx.log(
        hash,
        LogData::NewTransaction {
            transaction: Box::new(transaction),
            account_metadata: cmd.account_metadata.clone(),
        },
    )))
}

/// Plans `POST /transactions/{id}/revert`.
pub(crate) fn revert_transaction(
    ctx: &mut WriteContext<'_>,
    cmd: &RevertTransaction,
) -> Result<Plan, ApiError> {
    let hash = idempotency::hash("REVERT_TRANSACTION", cmd);
    if let Some(replay) = ctx.replay(&hash)? {
        return Ok(replay);
    }
    let state = ctx.state;
    let original = state
        .transactions
        .get(&cmd.id)
        .ok_or_else(|| ApiError::not_found(format!("transaction {} not found", cmd.id)))?;
    if original.reverted {
        return Err(ApiError::new(
            ErrorCode::AlreadyRevert,
            format!("transaction {} already reverted", cmd.id),
        ));
    }
    let reversed: Vec<Posting> = original
        .postings
        .iter()
        .rev()
        .map(|p| {
            let p = p.to_model();
            Posting {
                source: p.destination,
                destination: p.source,
                amount: p.amount,
                asset: p.asset,
            }
        })
        .collect();
    let outcome = Program::from_postings(&reversed, cmd.force)
        .run(&BTreeMap::new(), |account, asset| {
            state.balance(account, asset)
        })
        .map_err(|e| script_error(Runtime::Machine, e))?;
    let mut metadata = cmd.metadata.clone();
    metadata.insert(REVERTS_METADATA_KEY.to_owned(), cmd.id.to_string());
    let timestamp = if cmd.at_effective_date {
        original.timestamp
    } else {
        ctx.now
    };
    let mut reverted = original.to_model();
    reverted.reverted = true;
    reverted.reverted_at = Some(ctx.now);
    reverted.updated_at = ctx.now;
    let revert = ctx.new_transaction(outcome.postings, metadata, timestamp, None);
    Ok(Plan::New(ctx.log(
        hash,
        LogData::RevertedTransaction {
            reverted: Box::new(reverted),
            revert: Box::new(revert),
        },
    )))
}

/// Plans a metadata write on an account or a transaction.
pub(crate) fn metadata(
    ctx: &mut WriteContext<'_>,
    cmd: &MetadataCommand,
) -> Result<Plan, ApiError> {
    let operation = match cmd {
        MetadataCommand::Save { .. } => "SAVE_METADATA",
        MetadataCommand::Delete { .. } => "DELETE_METADATA",
    };
    let hash = idempotency::hash(operation, cmd);
    if let Some(replay) = ctx.replay(&hash)? {
        return Ok(replay);
    }
    let target = match cmd {
        MetadataCommand::Save { target, .. } | MetadataCommand::Delete { target, .. } => target,
    };
    if let Target::Transaction(id) = target
        && !ctx.state.transactions.contains_key(id)
    {
        return Err(ApiError::not_found(format!("transaction {id} not found")));
    }
    let data = match cmd.clone() {
        MetadataCommand::Save { target, metadata } => LogData::SetMetadata { target, metadata },
        MetadataCommand::Delete { target, key } => LogData::DeleteMetadata { target, key },
    };
    Ok(Plan::New(ctx.log(hash, data)))
}
