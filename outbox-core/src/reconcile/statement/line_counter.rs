//! Line numbers from byte offsets, counted once over a file however many are asked
//! for (offsets only grow while a file is read).

/// Counts the lines of one text up to ever later byte offsets.
#[derive(Debug)]
pub(super) struct LineCounter<'a> {
    text: &'a str,
    counted: usize,
    line: u64,
}

impl<'a> LineCounter<'a> {
    pub fn new(text: &'a str) -> Self {
        Self {
            text,
            counted: 0,
            line: 1,
        }
    }

    /// The 1-based line of byte `offset`; an offset before an earlier one is
    /// counted from the start again.
    pub fn line_at(&mut self, offset: u64) -> u64 {
        let end = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.text.len());
        if end < self.counted {
            (self.counted, self.line) = (0, 1);
        }
        let newlines = self.text.as_bytes()[self.counted..end]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        self.line += newlines as u64;
        self.counted = end;
        self.line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_growing_and_earlier_offsets() {
        let mut lines = LineCounter::new("a\nbb\r\n\nc");
        assert_eq!(lines.line_at(0), 1);
        assert_eq!(lines.line_at(2), 2);
        assert_eq!(lines.line_at(7), 4);
        assert_eq!(lines.line_at(99), 4);
        assert_eq!(lines.line_at(1), 1, "back to an earlier offset");
    }
}
