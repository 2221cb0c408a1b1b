//! Amounts as exact integers of minor units, read from text without a float.
//!
//! A statement that said $485,000.00 must compare as exactly 48,500,000 cents: an
//! `f64` cannot hold most decimal fractions, and a rounding here would be a drift
//! nobody booked. Both readers work on the digits as text.

use crate::error::{Error, Result};

/// The most decimal digits an `i128` always holds (its maximum has 39).
const MAX_DIGITS: usize = 38;

/// Reads a CSV balance: an integer already in minor units, with an optional leading
/// `-` (`48500000`, `-1250`). A decimal point, an exponent, a `+` or a thousands
/// separator is refused: the file must say the minor units itself, so a balance
/// written in major units cannot pass as one a hundred times smaller.
pub(super) fn parse_integer(field: &str, text: &str, asset: &str) -> Result<i128> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if digits.is_empty() {
        return Err(Error::invalid(
            field,
            "is empty: expected an integer in minor units",
        ));
    }
    if let Some(bad) = digits.chars().find(|c| !c.is_ascii_digit()) {
        let why = match bad {
            '.' | ',' => format!(
                "{text:?} has a decimal point: write the balance as an integer in minor units of {asset} (no decimal point)"
            ),
            'e' | 'E' => format!(
                "{text:?} has an exponent: write the balance as an integer in minor units of {asset}"
            ),
            _ => format!(
                "{text:?} is not an integer in minor units of {asset} (digits with an optional leading '-'; found {bad:?})"
            ),
        };
        return Err(Error::invalid(field, why));
    }
    let magnitude = digits_to_i128(field, text, digits)?;
    Ok(if negative { -magnitude } else { magnitude })
}

/// Reads an ISO 20022 amount (`485000.00`: digits, optionally a point and fraction
/// digits, no sign) as minor units of an asset with `scale` decimal places. Fewer
/// fraction digits than the scale are padded (`12.5` at scale 2 is 1250); more are
/// refused, even zeros, since the currency cannot have them and rounding would hide
/// a wrong file.
pub(super) fn parse_decimal(field: &str, text: &str, scale: u32) -> Result<i128> {
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (text, None),
    };
    let well_formed = !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && fraction.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()));
    if !well_formed {
        return Err(Error::invalid(
            field,
            format!(
                "{text:?} is not an amount: expected digits with an optional '.' and fraction digits (485000.00), no sign, no ',' or spaces"
            ),
        ));
    }
    let fraction = fraction.unwrap_or("");
    let scale = usize::try_from(scale).unwrap_or(usize::MAX);
    if fraction.len() > scale {
        return Err(Error::invalid(
            field,
            format!(
                "{text:?} has {} fraction digits but the asset has {scale}: refused rather than rounded",
                fraction.len()
            ),
        ));
    }
    let whole = whole.trim_start_matches('0');
    // Checked before padding, so an absurd scale cannot make a huge string.
    if whole.len().saturating_add(scale) > MAX_DIGITS {
        return Err(too_large(field, text));
    }
    let mut digits = String::with_capacity(whole.len() + scale);
    digits.push_str(whole);
    digits.push_str(fraction);
    digits.extend(std::iter::repeat_n('0', scale - fraction.len()));
    digits_to_i128(field, text, &digits)
}

/// `digits` (ASCII digits only) as an integer, or an error naming `field`.
fn digits_to_i128(field: &str, text: &str, digits: &str) -> Result<i128> {
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Ok(0);
    }
    if significant.len() > MAX_DIGITS {
        return Err(too_large(field, text));
    }
    significant.parse().map_err(|_| too_large(field, text))
}

fn too_large(field: &str, text: &str) -> Error {
    Error::invalid(
        field,
        format!("{text:?} is too large: at most {MAX_DIGITS} digits of minor units"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_in_minor_units() {
        assert_eq!(parse_integer("b", "48500000", "USD/2").unwrap(), 48_500_000);
        assert_eq!(parse_integer("b", "-1250", "USD/2").unwrap(), -1250);
        assert_eq!(parse_integer("b", "-0", "USD/2").unwrap(), 0);
        assert_eq!(parse_integer("b", "000042", "USD/2").unwrap(), 42);
        let max = "9".repeat(38);
        assert_eq!(
            parse_integer("b", &max, "USD/2").unwrap().to_string(),
            max,
            "38 digits are exact"
        );
    }

    #[test]
    fn integers_refuse_anything_else() {
        for (text, says) in [
            ("485000.00", "decimal point"),
            ("4,85", "decimal point"),
            ("4.85e5", "decimal point"),
            ("485e5", "exponent"),
            ("+12", "not an integer"),
            ("12 000", "not an integer"),
            ("--1", "not an integer"),
            ("", "empty"),
            ("-", "empty"),
        ] {
            let err = parse_integer("line 2: balance", text, "USD/2").unwrap_err();
            assert_eq!(err.field(), Some("line 2: balance"), "{text:?}");
            assert!(err.message().contains(says), "{text:?}: {err}");
        }
        let err = parse_integer("b", &"9".repeat(39), "USD/2").unwrap_err();
        assert!(err.message().contains("too large"), "{err}");
    }

    #[test]
    fn decimals_become_minor_units_exactly() {
        assert_eq!(parse_decimal("a", "485000.00", 2).unwrap(), 48_500_000);
        assert_eq!(parse_decimal("a", "12.5", 2).unwrap(), 1250);
        assert_eq!(parse_decimal("a", "12", 2).unwrap(), 1200);
        assert_eq!(parse_decimal("a", "0.01", 2).unwrap(), 1);
        assert_eq!(parse_decimal("a", "1500000", 0).unwrap(), 1_500_000);
        assert_eq!(parse_decimal("a", "1.234", 3).unwrap(), 1234);
        assert_eq!(parse_decimal("a", "0.000", 3).unwrap(), 0);
        // 0.1 + 0.2 style values that a float would not hold exactly.
        assert_eq!(
            parse_decimal("a", "9007199254740993.07", 2).unwrap(),
            900_719_925_474_099_307
        );
    }

    #[test]
    fn decimals_refuse_excess_fraction_digits_and_bad_text() {
        let err = parse_decimal("Stmt[1]/Bal[2]/Amt", "1.005", 2).unwrap_err();
        assert_eq!(err.field(), Some("Stmt[1]/Bal[2]/Amt"));
        assert!(err.message().contains("3 fraction digits"), "{err}");
        let err = parse_decimal("a", "100.00", 0).unwrap_err();
        assert!(
            err.message().contains("refused rather than rounded"),
            "{err}"
        );
        for bad in [
            "12,50", "-1.00", "+1", "1.", ".5", "", "1 000.00", "1e3", "1.2.3",
        ] {
            let err = parse_decimal("a", bad, 2).unwrap_err();
            assert!(err.message().contains("is not an amount"), "{bad:?}: {err}");
        }
        let err = parse_decimal("a", "1", 999_999).unwrap_err();
        assert!(err.message().contains("too large"), "{err}");
    }
}
