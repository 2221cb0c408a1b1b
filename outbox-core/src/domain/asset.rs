//! `Asset`: a Formance asset code with optional scale, such as `USD/2`.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

static ASSET: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Z][A-Z0-9]{0,16}(_[A-Z]{1,16})?(/\d{1,6})?$").expect("static regex")
});

/// An asset matching `^[A-Z][A-Z0-9]{0,16}(_[A-Z]{1,16})?(\/\d{1,6})?$`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Asset(String);

impl Asset {
    /// Validates `text` (`USD/2`: an upper-case code, an optional `_SUFFIX`, an
    /// optional `/scale`), naming `field` in the error.
    pub fn parse_field(field: &str, text: &str) -> Result<Self> {
        if ASSET.is_match(text) {
            Ok(Self(text.to_owned()))
        } else {
            Err(Error::invalid(
                field,
                format!(
                    "{text:?} is not an asset code (for example USD/2: code, optional _SUFFIX, optional /scale)"
                ),
            ))
        }
    }

    /// Validates `text`, naming the field `asset` in the error.
    pub fn parse(text: &str) -> Result<Self> {
        Self::parse_field("asset", text)
    }

    /// The asset code as the ledger writes it, scale included (`USD/2`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The number of decimal places in UMN (`USD/2` → 2; no scale → 0).
    pub fn scale(&self) -> u32 {
        self.0
            .split_once('/')
            .and_then(|(_, s)| s.parse().ok())
            .unwrap_or(0)
    }
}

impl fmt::Display for Asset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Asset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Asset {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        Self::parse(&s)
    }
}

impl From<Asset> for String {
    fn from(a: Asset) -> Self {
        a.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_assets_and_scale() {
        assert_eq!(Asset::parse("USD/2").unwrap().scale(), 2);
        assert_eq!(Asset::parse("EUR").unwrap().scale(), 0);
        assert_eq!(Asset::parse("USDC_ETH/6").unwrap().scale(), 6);
    }

    #[test]
    fn invalid_assets() {
        for bad in ["usd", "USD/", "USD/1234567", "1USD", "", "USD 2"] {
            let err = Asset::parse(bad).unwrap_err();
            assert_eq!(err.field(), Some("asset"), "{bad}");
        }
    }
}
