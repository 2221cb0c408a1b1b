//! The account mapping: which ledger account a bank account of a camt.053
//! statement is, and optionally under which asset it is kept.

use std::collections::HashMap;

use super::{csv_table, iban};
use crate::domain::{Account, Asset};
use crate::error::{Error, Result};

/// Where one bank account's balances go in the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedAccount {
    /// The ledger account.
    pub account: Account,
    /// The asset to compare under instead of `CCY/exponent` (`USD/2`): for a
    /// currency the ISO 4217 table does not know, or a ledger that keeps it under
    /// another name or scale. Its scale is the one the amount is converted to.
    pub asset: Option<Asset>,
    /// The mapping file's line, for messages.
    pub line: u64,
}

/// The mapping from bank account identifiers to ledger accounts, read from a CSV
/// file with the columns `iban,account[,asset]`:
///
/// ```csv
/// iban,account,asset
/// DE89 3704 0044 0532 0130 00,merchants:4471:payouts:pending,
/// ACME-JP-0001,treasury:jp:operating,JPY
/// ```
///
/// The `iban` column holds an IBAN (compared in electronic form: spaces removed,
/// upper case, and its ISO 13616 check digits verified, so a mistyped one is refused
/// by name) or, for an account a statement identifies by `Acct/Id/Othr/Id`, that
/// identifier as written (only trimmed). An identifier listed twice is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountMapping {
    accounts: HashMap<String, MappedAccount>,
}

impl AccountMapping {
    /// Reads a mapping file; every error names its line and column
    /// (`line 3: iban`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an unknown,
    /// missing or repeated column, an IBAN with wrong check digits, an invalid
    /// account address or asset, an identifier listed twice, or a file without rows.
    pub fn from_csv(text: &str) -> Result<Self> {
        let rows = csv_table::read("account mapping", text, &["iban", "account"], &["asset"])?;
        let mut mapping = Self::default();
        for row in rows {
            let id = row.get("iban").unwrap_or_default();
            if id.is_empty() {
                return Err(Error::invalid(
                    row.field("iban"),
                    "is empty: give the IBAN or other account identifier",
                ));
            }
            let key = if iban::looks_like_iban(id) {
                iban::normalize(&row.field("iban"), id)?
            } else {
                id.to_owned()
            };
            let account = Account::parse_field(
                &row.field("account"),
                row.get("account").unwrap_or_default(),
            )?;
            let asset = match row.get("asset") {
                None | Some("") => None,
                Some(text) => Some(Asset::parse_field(&row.field("asset"), text)?),
            };
            if let Some(earlier) = mapping.accounts.get(&key) {
                return Err(Error::invalid(
                    row.field("iban"),
                    format!("{key} is already mapped on line {}", earlier.line),
                ));
            }
            mapping.accounts.insert(
                key,
                MappedAccount {
                    account,
                    asset,
                    line: row.line,
                },
            );
        }
        Ok(mapping)
    }

    /// The ledger account of the bank account `id` (an IBAN in any spacing and
    /// case, or another identifier exactly as mapped).
    pub fn get(&self, id: &str) -> Option<&MappedAccount> {
        let id = id.trim();
        if iban::looks_like_iban(id) {
            self.accounts.get(&iban::electronic(id))
        } else {
            self.accounts.get(id)
        }
    }

    /// How many bank accounts are mapped.
    pub fn len(&self) -> usize {
        self.accounts.len()
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ibans_in_any_spacing_and_other_ids_map() {
        let mapping = AccountMapping::from_csv(
            "account,iban,asset\n\
             merchants:4471:payouts:pending,de89 3704 0044 0532 0130 00,\n\
             treasury:jp:operating,ACME-jp-0001,JPY\n",
        )
        .unwrap();
        assert_eq!(mapping.len(), 2);
        let pending = mapping.get("DE89370400440532013000").unwrap();
        assert_eq!(pending.account.as_str(), "merchants:4471:payouts:pending");
        assert_eq!((pending.asset.as_ref(), pending.line), (None, 2));
        let jp = mapping.get("ACME-jp-0001").unwrap();
        assert_eq!(jp.asset.as_ref().map(Asset::as_str), Some("JPY"));
        assert!(mapping.get("ACME-JP-0001").is_none(), "other ids are exact");
    }

    #[test]
    fn the_asset_column_is_optional() {
        let mapping =
            AccountMapping::from_csv("iban,account\nGB29NWBK60161331926819,treasury:gb\n").unwrap();
        assert!(mapping.get("GB29 NWBK 6016 1331 9268 19").is_some());
    }

    #[test]
    fn mistakes_name_line_and_column() {
        let err = AccountMapping::from_csv(
            "iban,account\nDE89370400440532013000,a\nDE89370400440532013001,b\n",
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("line 3: iban"));
        assert!(err.message().contains("DE89370400440532013001"), "{err}");
        let err = AccountMapping::from_csv(
            "iban,account\nDE89370400440532013000,a\nde89 3704 0044 0532 0130 00,b\n",
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("line 3: iban"));
        assert!(err.message().contains("already mapped on line 2"), "{err}");
        let err = AccountMapping::from_csv("iban,account\nX-1,not an account\n").unwrap_err();
        assert_eq!(err.field(), Some("line 2: account"));
        let err = AccountMapping::from_csv("iban,account,asset\nX-1,a,usd\n").unwrap_err();
        assert_eq!(err.field(), Some("line 2: asset"));
        let err = AccountMapping::from_csv("iban,account,currency\nX-1,a,USD\n").unwrap_err();
        assert!(
            err.message().contains("unknown column \"currency\""),
            "{err}"
        );
        let err = AccountMapping::from_csv("iban,account\n,a\n").unwrap_err();
        assert_eq!(err.field(), Some("line 2: iban"));
    }
}
