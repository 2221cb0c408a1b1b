//! The CSV statement: one closing balance per row, `account,asset,balance,as_of`.

use super::{StatementLine, as_of, csv_table, minor_units};
use crate::domain::{Account, Asset};
use crate::error::Result;

/// The columns, all required.
const COLUMNS: &[&str] = &["account", "asset", "balance", "as_of"];

/// Every row of `text` as a statement line, in file order.
pub(super) fn parse(text: &str) -> Result<Vec<StatementLine>> {
    let rows = csv_table::read("CSV statement", text, COLUMNS, &[])?;
    let mut lines = Vec::with_capacity(rows.len());
    for row in rows {
        // Every column is required, so every get succeeds.
        let value = |column: &str| row.get(column).unwrap_or_default();
        let account = Account::parse_field(&row.field("account"), value("account"))?;
        let asset = Asset::parse_field(&row.field("asset"), value("asset"))?;
        let balance =
            minor_units::parse_integer(&row.field("balance"), value("balance"), asset.as_str())?;
        let as_of = as_of::parse_instant(&row.field("as_of"), value("as_of"))?;
        lines.push(StatementLine {
            account: account.as_str().to_owned(),
            asset,
            balance,
            as_of,
            origin: format!("line {}", row.line),
        });
    }
    Ok(lines)
}
