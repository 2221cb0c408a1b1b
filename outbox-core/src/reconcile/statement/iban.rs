//! IBANs: the one spelling they are compared in, and the ISO 13616 check digits.
//!
//! Banks print IBANs in groups of four (`DE89 3704 …`) and people type them in lower
//! case, so both sides of the mapping are brought to the electronic form (no spaces,
//! upper case) before they are compared. The check digits are verified because a
//! mistyped IBAN in the mapping file would otherwise surface only as "no mapping".

use crate::error::{Error, Result};

/// The electronic form of `text`: ASCII whitespace removed, upper case.
pub(super) fn electronic(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_ascii_whitespace())
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

/// Whether `text` has the shape of an IBAN: a two-letter country, two check digits
/// and 11 to 30 letters or digits, 15 to 34 characters in all.
pub(super) fn looks_like_iban(text: &str) -> bool {
    let iban = electronic(text);
    let b = iban.as_bytes();
    (15..=34).contains(&b.len())
        && b[..2].iter().all(u8::is_ascii_uppercase)
        && b[2..4].iter().all(u8::is_ascii_digit)
        && b[4..].iter().all(u8::is_ascii_alphanumeric)
}

/// `text` as an IBAN in electronic form, or an error naming `field` when it does
/// not have the shape of one or its check digits are wrong.
pub(super) fn normalize(field: &str, text: &str) -> Result<String> {
    if !looks_like_iban(text) {
        return Err(Error::invalid(
            field,
            format!(
                "{text:?} is not an IBAN (two letters, two check digits, 11 to 30 letters or digits)"
            ),
        ));
    }
    let iban = electronic(text);
    if !check_digits_hold(&iban) {
        return Err(Error::invalid(
            field,
            format!("IBAN {iban} has wrong check digits (ISO 13616 mod-97): mistyped?"),
        ));
    }
    Ok(iban)
}

/// ISO 13616: the first four characters moved to the end, letters as 10..35, the
/// number modulo 97 is 1. Computed digit by digit so no big integer is needed.
fn check_digits_hold(iban: &str) -> bool {
    let (head, tail) = iban.split_at(4);
    let mut rest = 0u32;
    for c in tail.chars().chain(head.chars()) {
        // Every character is an ASCII letter or digit: looks_like_iban checked it.
        let value = c.to_digit(36).unwrap_or(0);
        rest = if value < 10 {
            (rest * 10 + value) % 97
        } else {
            (rest * 100 + value) % 97
        };
    }
    rest == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_and_lower_case_ibans_are_normalized() {
        assert_eq!(
            normalize("iban", " de89 3704 0044 0532 0130 00 ").unwrap(),
            "DE89370400440532013000"
        );
        assert_eq!(
            normalize("iban", "GB29NWBK60161331926819").unwrap(),
            "GB29NWBK60161331926819"
        );
        assert_eq!(
            normalize("iban", "FR1420041010050500013M02606").unwrap(),
            "FR1420041010050500013M02606"
        );
    }

    #[test]
    fn wrong_check_digits_and_shapes_are_refused() {
        let err = normalize("line 3: iban", "DE89370400440532013001").unwrap_err();
        assert_eq!(err.field(), Some("line 3: iban"));
        assert!(err.message().contains("DE89370400440532013001"), "{err}");
        assert!(err.message().contains("check digits"), "{err}");
        for bad in [
            "",
            "DE89",
            "1234370400440532013000",
            "DE8937040044053201300!",
        ] {
            let err = normalize("iban", bad).unwrap_err();
            assert!(err.message().contains("is not an IBAN"), "{bad:?}: {err}");
        }
        assert!(!looks_like_iban("ACC-0001"));
        assert!(looks_like_iban("nl91 abna 0417 1643 00"));
    }
}
