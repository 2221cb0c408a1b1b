//! `Account`: a Formance account address such as `merchants:4471:available`.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

static ADDRESS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z0-9_-]+(:[a-zA-Z0-9_-]+)*$").expect("static regex"));

/// An address matching Formance's `^[a-zA-Z0-9_-]+(:[a-zA-Z0-9_-]+)*$`, without `@`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Account(String);

impl Account {
    /// Validates `text`, naming `field` in the error.
    pub fn parse_field(field: &str, text: &str) -> Result<Self> {
        if ADDRESS.is_match(text) {
            Ok(Self(text.to_owned()))
        } else {
            Err(Error::invalid(
                field,
                format!(
                    "{text:?} is not a ledger account address (segments of [a-zA-Z0-9_-] separated by ':')"
                ),
            ))
        }
    }

    /// Validates `text`, naming the field `account` in the error.
    pub fn parse(text: &str) -> Result<Self> {
        Self::parse_field("account", text)
    }

    /// The address as the ledger writes it, without `@` (`merchants:4471:available`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The implicit unbounded source of every Formance ledger.
    pub fn is_world(&self) -> bool {
        self.0 == "world"
    }
}

impl fmt::Display for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "@{}", self.0)
    }
}

impl TryFrom<String> for Account {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        Self::parse(&s)
    }
}

impl From<Account> for String {
    fn from(a: Account) -> Self {
        a.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_addresses() {
        for ok in ["world", "merchants:4471:available", "a_b-c:1"] {
            assert_eq!(Account::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn invalid_addresses_name_the_field() {
        for bad in ["", "@world", "a::b", "a:", "a b", "merchants:44.71"] {
            let err = Account::parse_field("postings[0].source", bad).unwrap_err();
            assert_eq!(err.field(), Some("postings[0].source"), "{bad}");
        }
    }
}
