//! Formance's address patterns, which `Ledger::aggregate_balances` takes
//! (docs/LEDGER.md#balances-and-address-patterns): an empty segment matches any one
//! segment, a trailing `...` any number of segments (at least one), anything else
//! itself.

/// Whether `address` matches `pattern`.
pub fn matches(pattern: &str, address: &str) -> bool {
    let address: Vec<&str> = address.split(':').collect();
    let (fixed, any_depth) = match pattern.strip_suffix("...") {
        // `merchants:4471:...`: the segments before the `...`, then one or more.
        Some(prefix) => (prefix.strip_suffix(':').unwrap_or(prefix), true),
        None => (pattern, false),
    };
    let fixed: Vec<&str> = if fixed.is_empty() {
        Vec::new()
    } else {
        fixed.split(':').collect()
    };
    let count_fits = if any_depth {
        address.len() > fixed.len()
    } else {
        address.len() == fixed.len()
    };
    count_fits
        && fixed
            .iter()
            .zip(&address)
            .all(|(want, got)| want.is_empty() || want == got)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn exact_empty_segment_and_any_depth() {
        assert!(matches("merchants:1:available", "merchants:1:available"));
        assert!(!matches("merchants:1:available", "merchants:1:reserve"));
        assert!(matches("merchants:1:", "merchants:1:reserve"));
        assert!(!matches("merchants:1:", "merchants:1:payouts:pending"));
        assert!(matches("merchants::available", "merchants:2:available"));
        assert!(matches("merchants:1:...", "merchants:1:payouts:pending"));
        assert!(!matches("merchants:1:...", "merchants:1"));
        assert!(!matches("merchants:1:...", "merchants:10:available"));
        assert!(matches("world", "world"));
    }
}
