//! The benchmarks' options after `--` (`--messages 20000 --batches 1000,5000 --only
//! kafka`): a few lines instead of a CLI parser, since `cargo bench` passes its own
//! flags (`--bench`) through as well and unknown ones must be ignored.

/// The process arguments, looked up by flag name.
#[derive(Debug, Clone)]
pub struct Args(pub Vec<String>);

impl Args {
    pub fn from_env() -> Self {
        Self(std::env::args().collect())
    }

    /// The value after `name`, if any.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1))
            .map(String::as_str)
    }

    /// Whether the flag `name` was given (a switch without a value).
    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }

    /// A whole number (`20_000` allowed), or `default`.
    pub fn num(&self, name: &str, default: usize) -> usize {
        self.value(name)
            .and_then(|v| v.replace('_', "").parse().ok())
            .unwrap_or(default)
    }

    /// A comma-separated list of whole numbers, or `default`.
    pub fn list(&self, name: &str, default: &[usize]) -> Vec<usize> {
        self.value(name)
            .map(|v| {
                v.split(',')
                    .filter_map(|n| n.trim().replace('_', "").parse().ok())
                    .collect::<Vec<usize>>()
            })
            .filter(|l| !l.is_empty())
            .unwrap_or_else(|| default.to_vec())
    }

    /// The sizes a growth benchmark runs: `name`'s value (or `default`) as the largest,
    /// with a tenth and a third of it before, so a flat figure shows across 10×.
    pub fn growth(&self, name: &str, default: usize) -> Vec<usize> {
        let largest = self.num(name, default);
        [largest / 10, largest / 3, largest]
            .into_iter()
            .filter(|n| *n > 0)
            .collect()
    }
}
