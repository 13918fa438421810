//! Aligned text tables for the command line's human-readable output.

use std::fmt;

/// Rows under a header, each column as wide as its widest cell.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells print empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(widths.len()) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let empty = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let last = widths.len().saturating_sub(1);
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).unwrap_or(&empty);
                if i == last {
                    writeln!(f, "{cell}")?;
                } else {
                    write!(f, "{cell:<width$}  ")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut table = Table::new(&["NAME", "TOKEN"]);
        table.row(vec!["team-a/db/migrate".into(), "7".into()]);
        table.row(vec!["x".into()]);
        assert_eq!(
            table.to_string(),
            "NAME               TOKEN\nteam-a/db/migrate  7\nx                  \n"
        );
    }
}
