//! Reading a CSV file whose columns are named by a header row: the one reader the
//! CSV statement and the account mapping share, so both refuse the same mistakes
//! with the same words.

use super::line_counter::LineCounter;
use crate::error::{Error, Result};

/// One data row: its line in the file and its values by column name.
#[derive(Debug)]
pub(super) struct Row {
    /// The line the row starts on (1 is the header).
    pub line: u64,
    values: Vec<(&'static str, String)>,
}

impl Row {
    /// The value of `column`, trimmed; `None` when the file has no such column.
    pub fn get(&self, column: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(c, _)| *c == column)
            .map(|(_, v)| v.as_str())
    }

    /// The field name of `column` on this row, for errors (`line 4: balance`).
    pub fn field(&self, column: &str) -> String {
        format!("line {}: {column}", self.line)
    }
}

/// Reads `text`: a header row naming every column of `required` and any of
/// `optional`, in any order, then the data rows. An unknown column is refused by
/// name (a typo such as `balanse` must not leave a column silently unread), so is a
/// missing or repeated one and a row with another number of fields than the header.
/// Blank lines are skipped and a UTF-8 byte order mark (spreadsheet exports) is
/// ignored; quoted fields follow RFC 4180.
pub(super) fn read(
    what: &str,
    text: &str,
    required: &[&'static str],
    optional: &[&'static str],
) -> Result<Vec<Row>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(::csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut records = reader.records();
    let mut lines = LineCounter::new(text);
    // The csv crate reports a record's start from before the blank lines it
    // skipped, so the line is counted from the first byte after them.
    let mut line_of = |record: &::csv::StringRecord| {
        let mut start = record.position().map_or(0, |p| p.byte());
        let bytes = text.as_bytes();
        while let Some(b'\r' | b'\n') = usize::try_from(start).ok().and_then(|i| bytes.get(i)) {
            start += 1;
        }
        lines.line_at(start)
    };
    let expected = || {
        let mut all = required.join(",");
        for column in optional {
            all.push_str(&format!("[,{column}]"));
        }
        all
    };

    let header = loop {
        match records.next() {
            None => {
                return Err(Error::invalid(
                    "line 1",
                    format!(
                        "the {what} is empty: a header row ({}) is required",
                        expected()
                    ),
                ));
            }
            Some(record) => {
                let record = record.map_err(|e| csv_error(e, "header"))?;
                if !is_blank(&record) {
                    break record;
                }
            }
        }
    };
    let header_line = line_of(&header);
    let header_field = format!("line {header_line}: header");
    let mut columns: Vec<&'static str> = Vec::with_capacity(header.len());
    for name in &header {
        let Some(known) = required
            .iter()
            .chain(optional)
            .find(|c| **c == name)
            .copied()
        else {
            return Err(Error::invalid(
                &header_field,
                format!(
                    "unknown column {name:?}: the {what}'s columns are {}",
                    expected()
                ),
            ));
        };
        if columns.contains(&known) {
            return Err(Error::invalid(
                &header_field,
                format!("column {name:?} appears twice"),
            ));
        }
        columns.push(known);
    }
    if let Some(missing) = required.iter().find(|c| !columns.contains(c)) {
        return Err(Error::invalid(
            &header_field,
            format!(
                "missing column {missing:?}: the {what}'s columns are {}",
                expected()
            ),
        ));
    }

    let mut rows = Vec::new();
    for record in records {
        let record = record.map_err(|e| csv_error(e, "row"))?;
        if is_blank(&record) {
            continue;
        }
        let line = line_of(&record);
        if record.len() != columns.len() {
            return Err(Error::invalid(
                format!("line {line}"),
                format!(
                    "has {} fields but the header has {} ({})",
                    record.len(),
                    columns.len(),
                    columns.join(",")
                ),
            ));
        }
        let values = columns
            .iter()
            .zip(&record)
            .map(|(c, v)| (*c, v.to_owned()))
            .collect();
        rows.push(Row { line, values });
    }
    if rows.is_empty() {
        return Err(Error::invalid(
            &header_field,
            format!("the {what} has a header but no rows"),
        ));
    }
    Ok(rows)
}

/// A line holding only spaces reads as one empty field.
fn is_blank(record: &::csv::StringRecord) -> bool {
    record.len() == 1 && record[0].is_empty()
}

/// Unreachable from a `&str` with flexible rows (only bad UTF-8 is left), kept so a
/// future reader option cannot turn into a panic.
fn csv_error(e: ::csv::Error, what: &str) -> Error {
    let line = e.position().map_or(0, |p| p.line());
    Error::invalid(
        format!("near line {line}"),
        format!("unreadable CSV {what}: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_in_any_order_with_quotes_and_blank_lines() {
        let rows = read(
            "file",
            "\u{feff}b , a\n\n\"x, y\",\"say \"\"hi\"\"\"\n   \n2,1\n",
            &["a", "b"],
            &[],
        )
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].line, rows[0].get("a"), rows[0].get("b")),
            (3, Some("say \"hi\""), Some("x, y"))
        );
        assert_eq!(
            (rows[1].line, rows[1].get("a"), rows[1].get("b")),
            (5, Some("1"), Some("2"))
        );
        assert_eq!(rows[1].field("a"), "line 5: a");
    }

    #[test]
    fn lines_are_counted_past_blank_lines_and_crlf() {
        let rows = read(
            "file",
            "\r\na\r\n\r\n\r\n1\r\n\"x\ny\"\r\n3\r\n",
            &["a"],
            &[],
        )
        .unwrap();
        let lines: Vec<u64> = rows.iter().map(|r| r.line).collect();
        assert_eq!(lines, [5, 6, 8]);
        assert_eq!(rows[1].get("a"), Some("x\ny"));
        let err = read("file", "\n\nb\n", &["a"], &[]).unwrap_err();
        assert_eq!(err.field(), Some("line 3: header"));
    }

    #[test]
    fn header_mistakes_are_named() {
        let err = read("file", "a,bb\n1,2\n", &["a", "b"], &["c"]).unwrap_err();
        assert_eq!(err.field(), Some("line 1: header"));
        assert!(err.message().contains("unknown column \"bb\""), "{err}");
        assert!(err.message().contains("a,b[,c]"), "{err}");
        let err = read("file", "a\n1\n", &["a", "b"], &[]).unwrap_err();
        assert!(err.message().contains("missing column \"b\""), "{err}");
        let err = read("file", "a,b,a\n1,2,3\n", &["a", "b"], &[]).unwrap_err();
        assert!(err.message().contains("\"a\" appears twice"), "{err}");
        let err = read("file", "\n\n", &["a"], &[]).unwrap_err();
        assert!(err.message().contains("empty"), "{err}");
        let err = read("file", "a\n", &["a"], &[]).unwrap_err();
        assert!(err.message().contains("no rows"), "{err}");
    }

    #[test]
    fn a_row_with_another_number_of_fields_is_refused() {
        let err = read("file", "a,b\n1,2\n1\n", &["a", "b"], &[]).unwrap_err();
        assert_eq!(err.field(), Some("line 3"));
        assert!(
            err.message().contains("has 1 fields but the header has 2"),
            "{err}"
        );
    }
}
