//! The provider's statement: closing balances per account and asset, in minor units.

use chrono::{DateTime, Utc};

use crate::domain::Asset;

/// One closing balance of the provider's statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementLine {
    /// The ledger account the balance is for (mapped from an IBAN for camt.053).
    pub account: String,
    /// The asset, with its scale (`USD/2`).
    pub asset: Asset,
    /// The balance in minor units of `asset`; negative for a debit balance.
    pub balance: i128,
    /// The time the balance is as of.
    pub as_of: DateTime<Utc>,
    /// Where in the file it came from (`line 4`, `Stmt[2]`), for messages.
    pub origin: String,
}

/// A parsed statement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Statement {
    /// Its closing balances, in file order.
    pub lines: Vec<StatementLine>,
}
