//! A plain terminal table: a header, rows of cells, columns padded to their widest cell, text
//! columns left-aligned and figure columns right-aligned, and an optional blank line between groups.
//!
//! Pure code; unit tests below.
use std::fmt::Write as _;

/// How a column's cells are aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table under construction.
#[derive(Debug)]
pub struct Table {
    columns: Vec<(String, Align)>,
    rows: Vec<Option<Vec<String>>>,
}

impl Table {
    pub fn new(columns: &[(&str, Align)]) -> Table {
        let columns = columns
            .iter()
            .map(|(name, align)| (name.to_string(), *align))
            .collect();
        Table {
            columns,
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are blank, extra cells are dropped.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(Some(cells));
    }

    /// Adds a blank separator line.
    pub fn gap(&mut self) {
        self.rows.push(None);
    }

    /// Renders the table, two spaces between columns, no trailing spaces.
    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| {
                let cells = self.rows.iter().flatten().filter_map(|row| row.get(i));
                cells
                    .map(|c| c.chars().count())
                    .chain([self.columns[i].0.chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let header: Vec<String> = self.columns.iter().map(|(name, _)| name.clone()).collect();
        let mut out = self.line(&header, &widths);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&self.line(&rule, &widths));
        for row in &self.rows {
            match row {
                Some(cells) => out.push_str(&self.line(cells, &widths)),
                None => out.push('\n'),
            }
        }
        out
    }

    fn line(&self, cells: &[String], widths: &[usize]) -> String {
        let mut line = String::new();
        for (i, ((_, align), width)) in self.columns.iter().zip(widths).enumerate() {
            let cell = cells.get(i).map(String::as_str).unwrap_or("");
            let sep = if i == 0 { "" } else { "  " };
            let _ = match align {
                Align::Left => write!(line, "{sep}{cell:<width$}"),
                Align::Right => write!(line, "{sep}{cell:>width$}"),
            };
        }
        let mut line = line.trim_end().to_string();
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_and_aligned() {
        let mut table = Table::new(&[("row", Align::Left), ("median", Align::Right)]);
        table.row(vec!["pier".into(), "1.5 ms".into()]);
        table.gap();
        table.row(vec!["runc".into(), "17.9 ms".into()]);
        let expected = "\
row    median
----  -------
pier   1.5 ms

runc  17.9 ms
";
        assert_eq!(table.render(), expected);
    }

    #[test]
    fn missing_cells_are_blank_without_trailing_spaces() {
        let mut table = Table::new(&[("a", Align::Left), ("b", Align::Left)]);
        table.row(vec!["x".into()]);
        assert_eq!(table.render(), "a  b\n-  -\nx\n");
    }
}
