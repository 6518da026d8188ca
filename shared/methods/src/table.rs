//! CSV parsing into a [`Table`]: a header row of unique names, then rows of
//! the same width. Each column is numeric when every non-missing cell is a
//! finite number, otherwise text. Empty cells and `NA`/`NaN`/`null` (any case)
//! are missing. Quoted fields follow RFC 4180 (`""` is a literal quote, and a
//! quoted field may span lines); blank lines are skipped.

use std::collections::BTreeSet;
use std::iter::Peekable;
use std::str::Chars;

/// A CSV file that cannot be read as a table. Each message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("the file is empty: the first line must be a header")]
    Empty,
    #[error("the file is not UTF-8 (first bad byte on line {line}): save it as UTF-8 text")]
    NotUtf8 { line: usize },
    #[error("line {line} has {fields} fields but the header has {expected}")]
    Ragged { line: usize, fields: usize, expected: usize },
    #[error("column name is empty at position {position}: give every header cell a name")]
    EmptyName { position: usize },
    #[error("duplicate column name `{0}`: column names must be unique")]
    DuplicateName(String),
    #[error("line {line} opens a quoted field that is never closed: add the closing `\"`")]
    UnclosedQuote { line: usize },
}

/// A parsed dataset: column names in file order and, for each numeric
/// column, its values (`None` = missing). Text columns keep only their name.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    names: Vec<String>,
    /// One entry per column; `None` for a text column.
    values: Vec<Option<Vec<Option<f64>>>>,
    rows: usize,
}

impl Table {
    /// Parses CSV bytes. The first non-blank line is the header.
    pub fn from_csv(bytes: &[u8]) -> Result<Table, TableError> {
        let text = std::str::from_utf8(bytes).map_err(|e| TableError::NotUtf8 {
            line: 1 + bytes[..e.valid_up_to()].iter().filter(|b| **b == b'\n').count(),
        })?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut reader = Records { chars: text.chars().peekable(), line: 1 };

        let (_, header) = reader.next_record()?.ok_or(TableError::Empty)?;
        let mut names = Vec::with_capacity(header.len());
        let mut seen = BTreeSet::new();
        for (i, raw) in header.iter().enumerate() {
            let name = raw.trim();
            if name.is_empty() {
                return Err(TableError::EmptyName { position: i + 1 });
            }
            if !seen.insert(name) {
                return Err(TableError::DuplicateName(name.to_string()));
            }
            names.push(name.to_string());
        }

        let mut values: Vec<Option<Vec<Option<f64>>>> = vec![Some(Vec::new()); names.len()];
        let mut rows = 0;
        while let Some((line, fields)) = reader.next_record()? {
            if fields.len() != names.len() {
                return Err(TableError::Ragged { line, fields: fields.len(), expected: names.len() });
            }
            for (column, cell) in values.iter_mut().zip(&fields) {
                if let Some(numbers) = column {
                    match parse_cell(cell) {
                        Cell::Missing => numbers.push(None),
                        Cell::Number(x) => numbers.push(Some(x)),
                        Cell::Text => *column = None,
                    }
                }
            }
            rows += 1;
        }
        Ok(Table { names, values, rows })
    }

    /// Column names in file order.
    pub fn column_names(&self) -> &[String] {
        &self.names
    }

    /// Number of data rows (the header excluded).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The values of a numeric column; `None` if there is no such column or it is text.
    pub fn numeric(&self, name: &str) -> Option<&[Option<f64>]> {
        let index = self.names.iter().position(|n| n == name)?;
        self.values[index].as_deref()
    }

    /// Whether `name` is a numeric column.
    pub fn is_numeric(&self, name: &str) -> bool {
        self.numeric(name).is_some()
    }

    /// Names of the numeric columns, in file order.
    pub fn numeric_columns(&self) -> Vec<&str> {
        self.columns_where(true)
    }

    /// Names of the text columns, in file order.
    pub fn text_columns(&self) -> Vec<&str> {
        self.columns_where(false)
    }

    fn columns_where(&self, numeric: bool) -> Vec<&str> {
        self.names
            .iter()
            .zip(&self.values)
            .filter(|(_, v)| v.is_some() == numeric)
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

enum Cell {
    Missing,
    Number(f64),
    Text,
}

fn parse_cell(cell: &str) -> Cell {
    let cell = cell.trim();
    if cell.is_empty() || ["na", "nan", "null"].iter().any(|m| cell.eq_ignore_ascii_case(m)) {
        return Cell::Missing;
    }
    match cell.parse::<f64>() {
        Ok(x) if x.is_finite() => Cell::Number(x),
        _ => Cell::Text,
    }
}

/// Splits text into records of fields, tracking the 1-based line each starts on.
struct Records<'a> {
    chars: Peekable<Chars<'a>>,
    line: usize,
}

impl Records<'_> {
    /// Consumes a line break whose first character `c` has just been read.
    fn end_line(&mut self, c: char) {
        if c == '\r' && self.chars.peek() == Some(&'\n') {
            self.chars.next();
        }
        self.line += 1;
    }

    fn next_record(&mut self) -> Result<Option<(usize, Vec<String>)>, TableError> {
        while let Some(&c) = self.chars.peek().filter(|c| matches!(c, '\n' | '\r')) {
            self.chars.next();
            self.end_line(c);
        }
        if self.chars.peek().is_none() {
            return Ok(None);
        }
        let start = self.line;
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        loop {
            let Some(c) = self.chars.next() else {
                if quoted {
                    return Err(TableError::UnclosedQuote { line: start });
                }
                fields.push(field);
                return Ok(Some((start, fields)));
            };
            if quoted {
                match c {
                    '"' if self.chars.peek() == Some(&'"') => {
                        self.chars.next();
                        field.push('"');
                    }
                    '"' => quoted = false,
                    '\n' => {
                        self.line += 1;
                        field.push(c);
                    }
                    _ => field.push(c),
                }
                continue;
            }
            match c {
                ',' => fields.push(std::mem::take(&mut field)),
                '"' if field.is_empty() => quoted = true,
                '\n' | '\r' => {
                    self.end_line(c);
                    fields.push(field);
                    return Ok(Some((start, fields)));
                }
                _ => field.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Table, TableError> {
        Table::from_csv(text.as_bytes())
    }

    #[test]
    fn numeric_text_and_missing_cells() {
        let t = parse("a, b ,c,d\n1, 2.5 ,x,\n NA ,-3e2,,nan\n4,Null,y,NULL\n").expect("valid csv");
        assert_eq!(t.column_names(), ["a", "b", "c", "d"]);
        assert_eq!(t.rows(), 3);
        assert_eq!(t.numeric("a"), Some(&[Some(1.0), None, Some(4.0)][..]));
        assert_eq!(t.numeric("b"), Some(&[Some(2.5), Some(-300.0), None][..]));
        assert!(!t.is_numeric("c"));
        assert_eq!(t.numeric("c"), None);
        assert_eq!(t.numeric("nope"), None);
        // An all-missing column has no non-numeric cell, so it counts as numeric.
        assert_eq!(t.numeric("d"), Some(&[None, None, None][..]));
        assert_eq!(t.numeric_columns(), ["a", "b", "d"]);
        assert_eq!(t.text_columns(), ["c"]);
    }

    #[test]
    fn infinite_values_make_a_column_text() {
        let t = parse("a,b\n1,inf\n2,3\n").expect("valid csv");
        assert!(t.is_numeric("a"));
        assert!(!t.is_numeric("b"));
    }

    #[test]
    fn quotes_crlf_bom_and_blank_lines() {
        let text = "\u{feff}\"a\",\"b, with comma\"\r\n\r\n\"1\",\"say \"\"hi\"\"\nthere\"\r\n2,3\r\n";
        let t = parse(text).expect("valid csv");
        assert_eq!(t.column_names(), ["a", "b, with comma"]);
        assert_eq!(t.rows(), 2);
        assert_eq!(t.numeric("a"), Some(&[Some(1.0), Some(2.0)][..]));
        assert!(!t.is_numeric("b, with comma"));
        let no_final_newline = parse("x\n1\n2").expect("valid csv");
        assert_eq!(no_final_newline.numeric("x"), Some(&[Some(1.0), Some(2.0)][..]));
    }

    #[test]
    fn header_only_is_an_empty_table() {
        let t = parse("a,b\n").expect("valid csv");
        assert_eq!((t.rows(), t.numeric("a")), (0, Some(&[][..])));
    }

    #[test]
    fn errors_say_what_to_fix() {
        assert_eq!(parse(""), Err(TableError::Empty));
        assert_eq!(parse("\n\r\n"), Err(TableError::Empty));
        assert_eq!(TableError::Empty.to_string(), "the file is empty: the first line must be a header");
        // Line numbers count physical lines, blank ones and those inside quotes included.
        let ragged = parse("a,b,c,d\n1,2,3,4\n\n\"x\ny\",2,3,4\n1,2,3,4\n1,2,3,4\n1,2,3\n");
        assert_eq!(ragged, Err(TableError::Ragged { line: 8, fields: 3, expected: 4 }));
        assert_eq!(ragged.expect_err("ragged").to_string(), "line 8 has 3 fields but the header has 4");
        let empty_name = parse("a,b, ,d\n1,2,3,4\n");
        assert_eq!(empty_name, Err(TableError::EmptyName { position: 3 }));
        assert!(
            empty_name.expect_err("empty name").to_string().starts_with("column name is empty at position 3")
        );
        let duplicate = parse("x,y,x\n1,2,3\n");
        assert_eq!(duplicate, Err(TableError::DuplicateName("x".into())));
        assert!(duplicate.expect_err("duplicate").to_string().starts_with("duplicate column name `x`"));
        let not_utf8 = Table::from_csv(b"a,b\n1,2\n\xff,3\n");
        assert_eq!(not_utf8, Err(TableError::NotUtf8 { line: 3 }));
        assert!(not_utf8.expect_err("latin-1").to_string().contains("not UTF-8"));
        assert_eq!(parse("a,b\n1,\"2\n"), Err(TableError::UnclosedQuote { line: 2 }));
    }
}
