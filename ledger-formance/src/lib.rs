#![doc = include_str!("../README.md")]

mod auth;
mod balances;
mod bulk;
mod client;
mod config;
mod error;
mod http_answer;
mod ledger_events;
mod ledger_log;
mod listing;
mod log_chain;
mod logs;
mod run;
mod transaction_record;
mod webhook;
mod webhook_decoder;
mod wire;

pub use client::{FormanceLedger, IDEMPOTENCY_HIT_HEADER, IDEMPOTENCY_KEY_HEADER};
pub use config::{
    AuthConfig, DEFAULT_BULK_MAX_SIZE, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_REFRESH_MARGIN_MS,
    DEFAULT_REQUEST_TIMEOUT_MS, DEFAULT_WEBHOOK_TOLERANCE_SECS, FormanceConfig, OAuth2Config,
    Secret, WebhookConfig,
};
pub use ledger_events::{LedgerEvent, TraceContext, messages_from_log, messages_from_webhook};
pub use ledger_log::FormanceLedgerLog;
pub use listing::MAX_TRANSACTION_PAGE;
pub use log_chain::{ChainFault, ChainReport, LogChain, recompute_hash};
pub use logs::{LedgerLog, MAX_LOG_PAGE};
pub use transaction_record::{REVERTS_METADATA_KEY, TransactionRecord};
pub use webhook::{
    DEFAULT_TOLERANCE, VerifiedWebhook, WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TIMESTAMP_HEADER, WebhookHeaders, WebhookVerifier, sign,
};
pub use webhook_decoder::{FormanceWebhookDecoder, WEBHOOK_TEST_HEADER};
pub use wire::{LedgerAccount, Volume};
