//! Tables whose columns line up, whatever the cells hold, and that fit a width.

use super::Style;

/// One cell: its text and, on a terminal, its colour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    text: String,
    style: Option<Style>,
}

impl Cell {
    pub fn styled(text: impl Into<String>, style: Option<Style>) -> Cell {
        Cell { text: text.into(), style }
    }

    /// A state, coloured by what it means.
    pub fn state(state: &str) -> Cell {
        Cell::styled(state, Style::of_state(state))
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell { text, style: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Cell {
        Cell::from(text.to_owned())
    }
}

/// Columns with a header each; numbers are right-aligned, and flexible columns give way when
/// the table is wider than the terminal.
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    right: Vec<bool>,
    flex: Vec<bool>,
    rows: Vec<Vec<Cell>>,
}

/// A flexible column is never cut below this many characters.
const MIN_FLEX: usize = 8;
const GAP: &str = "  ";

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        let n = headers.len();
        Table {
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            right: vec![false; n],
            flex: vec![false; n],
            rows: Vec::new(),
        }
    }

    /// Right-aligns these columns (numbers, amounts).
    pub fn right(mut self, columns: &[usize]) -> Table {
        for &c in columns {
            if let Some(r) = self.right.get_mut(c) {
                *r = true;
            }
        }
        self
    }

    /// Lets these columns be cut to fit the width (names, messages).
    pub fn flex(mut self, columns: &[usize]) -> Table {
        for &c in columns {
            if let Some(f) = self.flex.get_mut(c) {
                *f = true;
            }
        }
        self
    }

    /// Adds a row; missing cells are blank and extra ones are dropped.
    pub fn row(&mut self, mut cells: Vec<Cell>) {
        cells.resize(self.headers.len(), Cell::from(""));
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table, a line per row under the header, within `width` where flexible columns allow.
    pub fn render(&self, width: Option<usize>, colour: bool) -> String {
        let widths = self.fit(width);
        let mut out = String::new();
        let header: Vec<Cell> = self.headers.iter().map(|h| Cell::from(h.as_str())).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let cells: Vec<String> =
                row.iter().enumerate().map(|(i, c)| self.cell(c, i, widths[i], colour)).collect();
            out.push_str(cells.join(GAP).trim_end());
            out.push('\n');
        }
        out
    }

    fn cell(&self, cell: &Cell, column: usize, width: usize, colour: bool) -> String {
        let text = cut(&cell.text, width);
        let pad = " ".repeat(width.saturating_sub(text.chars().count()));
        let text = match cell.style {
            Some(style) => style.paint(&text, colour),
            None => text,
        };
        if self.right[column] { format!("{pad}{text}") } else { format!("{text}{pad}") }
    }

    /// Each column's width: its widest cell, then flexible columns narrowed, widest first,
    /// until the table fits.
    fn fit(&self, width: Option<usize>) -> Vec<usize> {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.text.chars().count());
            }
        }
        let Some(limit) = width else { return widths };
        let total = |w: &[usize]| w.iter().sum::<usize>() + GAP.len() * w.len().saturating_sub(1);
        while total(&widths) > limit {
            let widest = (0..widths.len())
                .filter(|&i| self.flex[i] && widths[i] > MIN_FLEX.max(self.headers[i].chars().count()))
                .max_by_key(|&i| widths[i]);
            let Some(i) = widest else { break };
            widths[i] -= 1;
        }
        widths
    }
}

/// `text` within `width` characters, cut with `…`.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let kept: String = text.chars().take(width.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new(&["IDX", "STATE", "MESSAGE"]).right(&[0]).flex(&[2]);
        t.row(vec!["7".into(), Cell::state("failed"), "the item's x is not a number".into()]);
        t.row(vec!["12".into(), Cell::state("succeeded"), "".into()]);
        t
    }

    #[test]
    fn columns_line_up_whatever_the_cells_hold() {
        let text = sample().render(None, false);
        assert_eq!(
            text,
            "IDX  STATE      MESSAGE\n  7  failed     the item's x is not a number\n 12  succeeded\n"
        );
    }

    #[test]
    fn flexible_columns_are_cut_to_fit_the_width_and_others_are_not() {
        let text = sample().render(Some(30), false);
        assert!(text.lines().all(|l| l.chars().count() <= 30), "{text}");
        assert!(text.contains("the item's x…"), "{text}");
        let narrow = sample().render(Some(5), false);
        assert!(narrow.contains("succeeded"), "a fixed column is never cut: {narrow}");
    }

    #[test]
    fn colour_does_not_move_the_columns() {
        let plain = sample().render(None, false);
        let coloured = sample().render(None, true);
        assert!(coloured.contains("\x1b[31mfailed\x1b[0m"));
        let stripped = coloured.replace("\x1b[31m", "").replace("\x1b[32m", "").replace("\x1b[0m", "");
        assert_eq!(stripped, plain);
    }
}
