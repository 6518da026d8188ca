//! CSV parsing into a [`Table`]: a header row of unique names, then rows of
//! the same width. Each column is numeric when every non-missing cell is a
//! finite number, otherwise text. Empty cells and `NA`/`NaN`/`null` (any case)
//! are missing. Quoted fields follow RFC 4180 (`""` is a literal quote, and a
//! quoted field may span lines); blank lines are skipped.
//!
//! An upload is read under [`Limits`] (columns, rows, bytes per cell and
//! per column name), checked while it is read, so a file past one is
//! refused at the first record past it without reading further, and
//! [`Shape::scan`] keeps only the names, which columns are numeric and the
//! row count: what an upload records costs the same whatever its rows.

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
    #[error("line {line} has more than {max} columns: keep at most {max} columns in one dataset")]
    TooManyColumns { line: usize, max: usize },
    #[error("the file has more than {max} rows: split it into datasets of at most {max} rows")]
    TooManyRows { max: usize },
    #[error("line {line} has a cell over {max} bytes: keep each cell under {max} bytes")]
    CellTooLarge { line: usize, max: usize },
    #[error("column name {position} is over {max} bytes: use shorter column names")]
    NameTooLong { position: usize, max: usize },
    #[error("line {line} holds a NUL byte: a CSV file is text, save it without one")]
    NulByte { line: usize },
    #[error("column name {position} holds a control character: use printable names")]
    ControlInName { position: usize },
}

/// What a file may hold, checked while it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_columns: usize,
    pub max_rows: usize,
    pub max_cell_bytes: usize,
    pub max_name_bytes: usize,
}

impl Limits {
    /// No bound: for a dataset that was admitted when it was uploaded.
    pub const NONE: Limits = Limits {
        max_columns: usize::MAX,
        max_rows: usize::MAX,
        max_cell_bytes: usize::MAX,
        max_name_bytes: usize::MAX,
    };
}

/// What an upload records of a file: its column names in file order, which
/// are numeric, and its number of data rows; none of its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub names: Vec<String>,
    pub numeric: Vec<bool>,
    pub rows: usize,
}

impl Shape {
    /// Reads CSV bytes under `limits`, keeping no value.
    pub fn scan(bytes: &[u8], limits: Limits) -> Result<Shape, TableError> {
        if let Some(at) = bytes.iter().position(|b| *b == 0) {
            return Err(TableError::NulByte {
                line: 1 + bytes[..at].iter().filter(|b| **b == b'\n').count(),
            });
        }
        let mut csv = Csv::open(bytes, limits)?;
        if let Some(i) = csv.names.iter().position(|n| n.chars().any(char::is_control)) {
            return Err(TableError::ControlInName { position: i + 1 });
        }
        let mut numeric = vec![true; csv.names.len()];
        while let Some(fields) = csv.next_row()? {
            for (flag, cell) in numeric.iter_mut().zip(&fields) {
                *flag = *flag && !matches!(parse_cell(cell), Cell::Text);
            }
        }
        Ok(Shape { names: csv.names, numeric, rows: csv.rows })
    }

    /// Names of the numeric columns, in file order.
    pub fn numeric_columns(&self) -> Vec<&str> {
        self.names.iter().zip(&self.numeric).filter(|(_, n)| **n).map(|(c, _)| c.as_str()).collect()
    }
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
        let mut csv = Csv::open(bytes, Limits::NONE)?;
        let mut values: Vec<Option<Vec<Option<f64>>>> = vec![Some(Vec::new()); csv.names.len()];
        while let Some(fields) = csv.next_row()? {
            for (column, cell) in values.iter_mut().zip(&fields) {
                if let Some(numbers) = column {
                    match parse_cell(cell) {
                        Cell::Missing => numbers.push(None),
                        Cell::Number(x) => numbers.push(Some(x)),
                        Cell::Text => *column = None,
                    }
                }
            }
        }
        Ok(Table { names: csv.names, values, rows: csv.rows })
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

/// A file being read: its header read and checked, its rows one at a time.
struct Csv<'a> {
    records: Records<'a>,
    names: Vec<String>,
    rows: usize,
    max_rows: usize,
}

impl<'a> Csv<'a> {
    fn open(bytes: &'a [u8], limits: Limits) -> Result<Csv<'a>, TableError> {
        let text = std::str::from_utf8(bytes).map_err(|e| TableError::NotUtf8 {
            line: 1 + bytes[..e.valid_up_to()].iter().filter(|b| **b == b'\n').count(),
        })?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut records = Records { chars: text.chars().peekable(), line: 1, limits };
        let (_, header) = records.next_record()?.ok_or(TableError::Empty)?;
        let mut names = Vec::with_capacity(header.len());
        let mut seen = BTreeSet::new();
        for (i, raw) in header.iter().enumerate() {
            let name = raw.trim();
            if name.is_empty() {
                return Err(TableError::EmptyName { position: i + 1 });
            }
            if name.len() > limits.max_name_bytes {
                return Err(TableError::NameTooLong { position: i + 1, max: limits.max_name_bytes });
            }
            if !seen.insert(name) {
                return Err(TableError::DuplicateName(name.to_string()));
            }
            names.push(name.to_string());
        }
        Ok(Csv { records, names, rows: 0, max_rows: limits.max_rows })
    }

    /// The next data row, as wide as the header.
    fn next_row(&mut self) -> Result<Option<Vec<String>>, TableError> {
        let Some((line, fields)) = self.records.next_record()? else { return Ok(None) };
        if fields.len() != self.names.len() {
            return Err(TableError::Ragged { line, fields: fields.len(), expected: self.names.len() });
        }
        if self.rows == self.max_rows {
            return Err(TableError::TooManyRows { max: self.max_rows });
        }
        self.rows += 1;
        Ok(Some(fields))
    }
}

/// Splits text into records of fields, tracking the 1-based line each
/// starts on; a record past the column limit or a cell past the cell limit
/// ends the reading there.
struct Records<'a> {
    chars: Peekable<Chars<'a>>,
    line: usize,
    limits: Limits,
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
            if field.len() > self.limits.max_cell_bytes {
                return Err(TableError::CellTooLarge { line: start, max: self.limits.max_cell_bytes });
            }
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
                ',' if fields.len() + 1 >= self.limits.max_columns => {
                    return Err(TableError::TooManyColumns { line: start, max: self.limits.max_columns });
                }
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

    const SMALL: Limits = Limits { max_columns: 3, max_rows: 2, max_cell_bytes: 4, max_name_bytes: 2 };

    #[test]
    fn a_scan_keeps_the_shape_and_no_value() {
        let shape = Shape::scan(b"a,b,c\n1,x,\n2,3,NA\n", SMALL).expect("within the limits");
        assert_eq!(shape.names, ["a", "b", "c"]);
        assert_eq!(shape.numeric, [true, false, true]);
        assert_eq!(shape.numeric_columns(), ["a", "c"]);
        assert_eq!(shape.rows, 2);
        let table = Table::from_csv(b"a,b,c\n1,x,\n2,3,NA\n").expect("valid csv");
        assert_eq!(shape.numeric_columns(), table.numeric_columns(), "a scan and a parse agree");
    }

    #[test]
    fn each_limit_is_refused_at_the_first_record_past_it() {
        let scan = |text: &str| Shape::scan(text.as_bytes(), SMALL);
        assert_eq!(scan("a,b,c,d\n"), Err(TableError::TooManyColumns { line: 1, max: 3 }));
        // A row past the header's width is ragged before it is wide.
        assert_eq!(scan("a,b\n1,2,3\n"), Err(TableError::Ragged { line: 2, fields: 3, expected: 2 }));
        assert_eq!(scan("a\n1\n2\n3\n"), Err(TableError::TooManyRows { max: 2 }));
        assert_eq!(scan("a\n12345\n"), Err(TableError::CellTooLarge { line: 2, max: 4 }));
        assert_eq!(scan("a\n\"12\n345\"\n"), Err(TableError::CellTooLarge { line: 2, max: 4 }));
        assert_eq!(scan("abc\n1\n"), Err(TableError::NameTooLong { position: 1, max: 2 }));
        assert!(scan("a,b,c\n1234,1,1\n1,1,1\n").is_ok(), "exactly at every limit");
        assert_eq!(scan("a,b\n1,\0\n"), Err(TableError::NulByte { line: 2 }));
        assert_eq!(scan("a,\u{1}c\n1,2\n"), Err(TableError::ControlInName { position: 2 }));
        let wide = format!("{}\n", vec!["c"; 1_000_000].join(","));
        assert_eq!(scan(&wide), Err(TableError::TooManyColumns { line: 1, max: 3 }));
        let message = TableError::TooManyColumns { line: 1, max: 3 }.to_string();
        assert!(message.contains("at most 3 columns"), "{message}");
    }
}
