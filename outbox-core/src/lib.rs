#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod dispatch;
pub mod domain;
mod error;
pub mod exception;
pub mod fanout;
pub mod fleet;
pub mod http_answer;
pub mod inbox;
pub mod ledger;
pub mod metrics;
pub mod reconcile;
pub mod relay;
pub mod retention;
pub mod retry;
pub mod status;
pub mod store;
#[cfg(test)]
mod testing;
pub mod trace;

pub use dispatch::{Backoff, DispatchConfig, Dispatcher, RunMode, Summary};
pub use domain::*;
pub use error::{Error, ErrorKind, Result, Retry};
pub use exception::{Exception, ExceptionKind, ExceptionQuery, NewException, Resolution, Severity};
pub use fanout::{
    AppendOutcome, CatchUp, CatchUpReport, DeadLetter, DeadLetterAccount, DeadLetterQuery,
    DeadLetterReason, DeadLetterState, FanoutConfig, FanoutLoop, FanoutMessage, FanoutStore,
    FanoutSummary, LedgerLogEntry, LedgerLogSource, MessageSink, NewDeadLetter, Publisher,
    PublisherCapabilities, ReplayRequest, StoredMessage, Subscriber,
};
pub use inbox::{
    Accepted, Claim, GapAlarm, Handler, HeldGap, HeldMessage, HoldResult, Inbox, InboxEngine,
    InboxMessage, MessageKind,
};
pub use ledger::{
    BalanceDate, Balances, BulkItem, Ledger, LedgerCapabilities, LedgerTransaction, PostOutcome,
    RunOutcome,
};
pub use relay::{PollingRelay, Relay, Wakeup};
pub use retention::{
    Keep, KeptBecause, PeriodOutcome, PeriodVerdict, RetentionFamily, RetentionPolicy,
    RetentionReport, StoredRetentionPolicy,
};
pub use retry::{Retries, RetryPolicy};
pub use store::{DeliveryOutcome, DeliveryRecord, DeliveryState, Lag, Store, StoreCapabilities};
pub use trace::TraceContext;
