//! `mapi runs compare A B …`: the comparison of [`mapi_api::compare`] as
//! a table, a column per run.

pub use mapi_api::compare::{Comparison, compare};

use crate::output::{Cell, Table};

/// The comparison as a table: a column per run, `≠` before a field whose values differ.
pub fn table(c: &Comparison) -> Table {
    let mut headers = vec!["", "field"];
    headers.extend(c.runs.iter().map(String::as_str));
    let mut table = Table::new(&headers).flex(&[1]);
    for r in &c.rows {
        let mut cells: Vec<Cell> = vec![if r.differs { "≠" } else { "" }.into(), r.field.as_str().into()];
        cells.extend(r.values.iter().map(|v| Cell::from(v.as_deref().unwrap_or("—"))));
        table.row(cells);
    }
    table
}
