//! Money as unsigned integers in minor units (UMN), never floats.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Asset;
use crate::error::{Error, Result};

/// A non-negative amount in the asset's minor units: `USD/2` 48500000 is $485,000.00.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Amount(u64);

impl Amount {
    /// No money.
    pub const ZERO: Self = Self(0);

    /// An amount of `minor_units` of its asset's smallest unit (cents for `USD/2`).
    pub const fn new(minor_units: u64) -> Self {
        Self(minor_units)
    }

    /// The amount in minor units, as the ledger receives it.
    pub const fn minor_units(self) -> u64 {
        self.0
    }

    /// Adds, failing on overflow instead of wrapping.
    pub fn checked_add(self, other: Self) -> Result<Self> {
        self.0.checked_add(other.0).map(Self).ok_or_else(|| {
            Error::invalid(
                "amount",
                format!("{} + {} overflows u64 minor units", self.0, other.0),
            )
        })
    }

    /// Parses decimal digits only: no sign, no decimal point, no exponent.
    pub fn parse_field(field: &str, text: &str) -> Result<Self> {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid(
                field,
                format!("{text:?} is not an unsigned integer amount in minor units"),
            ));
        }
        text.parse::<u64>()
            .map(Self)
            .map_err(|_| Error::invalid(field, format!("{text} overflows u64 minor units")))
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An asset and an amount, written in UMN as `USD/2 48500000`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Monetary {
    /// The asset, whose scale says how many minor units make one major unit.
    pub asset: Asset,
    /// The amount in that asset's minor units.
    pub amount: Amount,
}

impl Monetary {
    /// Parses `"ASSET AMOUNT"`, the form of a Numscript monetary variable.
    pub fn parse_field(field: &str, text: &str) -> Result<Self> {
        let (asset, amount) = text.trim().split_once(' ').ok_or_else(|| {
            Error::invalid(
                field,
                format!("{text:?} is not UMN \"ASSET AMOUNT\" (for example \"USD/2 48500000\")"),
            )
        })?;
        Ok(Self {
            asset: Asset::parse_field(field, asset)?,
            amount: Amount::parse_field(field, amount.trim())?,
        })
    }

    /// Formats the amount with the asset's scale, for humans: `USD/2 48500000` → `485000.00 USD`.
    pub fn display_major(&self) -> String {
        let scale = self.asset.scale();
        let code = self.asset.as_str().split('/').next().unwrap_or_default();
        if scale == 0 {
            return format!("{} {code}", self.amount);
        }
        let digits = format!("{:0>width$}", self.amount.0, width = scale as usize + 1);
        let (major, minor) = digits.split_at(digits.len() - scale as usize);
        format!("{major}.{minor} {code}")
    }
}

impl fmt::Display for Monetary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.asset, self.amount)
    }
}

impl fmt::Debug for Monetary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{self}]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn umn_reference_amount() {
        let m = Monetary::parse_field("vars.amount", "USD/2 48500000").unwrap();
        assert_eq!(m.amount.minor_units(), 48_500_000);
        assert_eq!(m.display_major(), "485000.00 USD");
        assert_eq!(m.to_string(), "USD/2 48500000");
        let cents = Monetary::parse_field("x", "USD/2 5").unwrap();
        assert_eq!(cents.display_major(), "0.05 USD");
    }

    #[test]
    fn rejects_floats_signs_and_overflow() {
        for bad in ["485000.00", "-1", "1e6", "", "+5"] {
            assert!(Amount::parse_field("amount", bad).is_err(), "{bad}");
        }
        let err = Amount::parse_field("amount", "18446744073709551616").unwrap_err();
        assert!(err.message().contains("overflows"), "{err}");
        let err = Amount::new(u64::MAX)
            .checked_add(Amount::new(1))
            .unwrap_err();
        assert_eq!(err.field(), Some("amount"));
        assert!(Monetary::parse_field("vars.amount", "USD/2").is_err());
    }
}
