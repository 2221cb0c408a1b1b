//! The provider's statement: closing balances per account and asset, in minor units.
//!
//! Two formats, read into the same [`Statement`]:
//!
//! - **CSV** ([`Statement::from_csv`]): a header row naming the columns
//!   `account,asset,balance,as_of` in any order (an unknown, missing or repeated
//!   column is refused by name), then one balance per row:
//!
//!   ```csv
//!   account,asset,balance,as_of
//!   merchants:4471:payouts:pending,USD/2,48500000,2026-11-30T23:59:59Z
//!   "treasury:eu:operating",EUR/2,-1250,2026-11-30T23:59:59+01:00
//!   ```
//!
//!   `balance` is an integer in minor units of `asset`, optionally negative; a
//!   decimal point or an exponent is refused, so a balance in major units cannot
//!   pass for one a hundred times smaller. `as_of` is RFC 3339 with an offset.
//! - **ISO 20022 camt.053** ([`Statement::from_camt053`]): the closing booked balance
//!   (`CLBD`) of every `Stmt`, its bank account mapped to a ledger account by an
//!   [`AccountMapping`]. `CdtDbtInd` `DBIT` makes the balance negative. The amount
//!   (`485000.00`) becomes minor units by moving the decimal point in the text,
//!   never through a float: the currency's ISO 4217 exponent is the scale (`USD` →
//!   `USD/2`, `JPY` → `JPY/0`, `KWD` → `KWD/3`) unless the mapping gives the asset;
//!   more fraction digits than the scale are refused, not rounded. A `Dt/DtTm`
//!   needs an offset; a `Dt/Dt` (a date only) is the end of that day in UTC,
//!   `23:59:59.999999Z`, so the balance includes every booking of the date.
//!
//! Every error is an [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
//! naming where it is: `line 4: balance` in a CSV file, `Stmt[2]/Bal[3]/Amt` (plus a
//! `line` context entry) in a camt.053 file. A statement with no balance is an error,
//! never an empty comparison, and so is one that gives the same account and asset
//! twice at the same time.

mod as_of;
mod camt053;
mod csv_statement;
mod csv_table;
mod currency;
mod iban;
mod line_counter;
mod mapping;
mod minor_units;

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::domain::Asset;
use crate::error::{Error, Result};

pub use mapping::{AccountMapping, MappedAccount};

/// One closing balance of the provider's statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementLine {
    /// The ledger account the balance is for (mapped from an IBAN for camt.053); a
    /// valid ledger address when read by this module.
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

impl Statement {
    /// Reads a CSV statement (`account,asset,balance,as_of`; see the
    /// [module docs](self)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the line
    /// and column (`line 4: balance`) of the first value that is not valid, or the
    /// header for a column that is unknown, missing or repeated.
    pub fn from_csv(text: &str) -> Result<Self> {
        Self::from_lines(csv_statement::parse(text)?)
    }

    /// Reads an ISO 20022 camt.053 statement (any `camt.053.001.NN` namespace): the
    /// closing booked balance of each `Stmt`, its account found in `mapping`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the
    /// element: malformed XML (with its line and column), a root that is not a
    /// camt.053 `Document`, a `Stmt` without a closing booked balance (`Stmt[2]`),
    /// an IBAN the mapping does not know, a missing or bad amount
    /// (`Stmt[1]/Bal[2]/Amt`), a currency outside the ISO 4217 table that the
    /// mapping gives no asset for, a time without an offset.
    pub fn from_camt053(xml: &str, mapping: &AccountMapping) -> Result<Self> {
        Self::from_lines(camt053::parse(xml, mapping)?)
    }

    /// A statement of `lines`, refused when it has none (a reconciliation never
    /// reads "nothing" as "zero") or gives one account and asset twice at the same
    /// time (which of the two would be compared?).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming
    /// `statement`, or the origin of the repeated line.
    pub fn from_lines(lines: Vec<StatementLine>) -> Result<Self> {
        if lines.is_empty() {
            return Err(Error::invalid(
                "statement",
                "holds no balance: nothing to reconcile",
            ));
        }
        let mut seen: HashMap<(&str, &Asset, DateTime<Utc>), &str> = HashMap::new();
        for line in &lines {
            let key = (line.account.as_str(), &line.asset, line.as_of);
            if let Some(earlier) = seen.insert(key, &line.origin) {
                return Err(Error::invalid(
                    &line.origin,
                    format!(
                        "repeats {earlier}: {} {} as of {} appears twice",
                        line.account,
                        line.asset,
                        line.as_of.to_rfc3339()
                    ),
                ));
            }
        }
        Ok(Self { lines })
    }
}
