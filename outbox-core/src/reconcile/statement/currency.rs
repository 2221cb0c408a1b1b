//! ISO 4217 minor-unit exponents: how many decimal places a camt.053 amount of a
//! currency has, and so the scale of its ledger asset (`USD` → `USD/2`).

/// The currencies with a minor-unit exponent other than 2 (ISO 4217 list one).
const NOT_TWO: &[(&str, u32)] = &[
    ("BHD", 3),
    ("BIF", 0),
    ("CLF", 4),
    ("CLP", 0),
    ("DJF", 0),
    ("GNF", 0),
    ("IQD", 3),
    ("ISK", 0),
    ("JOD", 3),
    ("JPY", 0),
    ("KMF", 0),
    ("KRW", 0),
    ("KWD", 3),
    ("LYD", 3),
    ("OMR", 3),
    ("PYG", 0),
    ("RWF", 0),
    ("TND", 3),
    ("UGX", 0),
    ("UYI", 0),
    ("UYW", 4),
    ("VND", 0),
    ("VUV", 0),
    ("XAF", 0),
    ("XOF", 0),
    ("XPF", 0),
];

/// The active currencies with exponent 2. A code in neither list (a withdrawn
/// currency, a precious metal such as `XAU`, a typo) is not guessed at: the mapping
/// file must give its asset.
const TWO: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BGN",
    "BMD", "BND", "BOB", "BOV", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHE",
    "CHF", "CHW", "CNY", "COP", "COU", "CRC", "CUP", "CVE", "CZK", "DKK", "DOP", "DZD", "EGP",
    "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD", "GTQ", "GYD", "HKD",
    "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IRR", "JMD", "KES", "KGS", "KHR", "KPW", "KYD",
    "KZT", "LAK", "LBP", "LKR", "LRD", "LSL", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP",
    "MRU", "MUR", "MVR", "MWK", "MXN", "MXV", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR",
    "NZD", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "QAR", "RON", "RSD", "RUB", "SAR", "SBD",
    "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL",
    "THB", "TJS", "TMT", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "USD", "USN", "UYU", "UZS",
    "VED", "VES", "WST", "XCD", "XCG", "YER", "ZAR", "ZMW", "ZWG",
];

/// The ISO 4217 exponent of `code`, or `None` for a code the table does not know.
pub(super) fn exponent(code: &str) -> Option<u32> {
    if let Some((_, e)) = NOT_TWO.iter().find(|(c, _)| *c == code) {
        return Some(*e);
    }
    TWO.contains(&code).then_some(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_of_common_currencies() {
        assert_eq!(exponent("USD"), Some(2));
        assert_eq!(exponent("EUR"), Some(2));
        assert_eq!(exponent("JPY"), Some(0));
        assert_eq!(exponent("KRW"), Some(0));
        assert_eq!(exponent("BHD"), Some(3));
        assert_eq!(exponent("KWD"), Some(3));
        assert_eq!(exponent("CLF"), Some(4));
        assert_eq!(exponent("XAU"), None, "no exponent: not guessed");
        assert_eq!(exponent("usd"), None, "codes are upper case");
    }

    #[test]
    fn no_code_is_in_both_lists() {
        for (code, _) in NOT_TWO {
            assert!(!TWO.contains(code), "{code}");
        }
    }
}
