//! Aligned tables for the commands' text output (`history`, `report`, `status`, `import`):
//! each column is as wide as its widest cell (counted in characters, so `Δ` or `é` take one),
//! numbers right-aligned, columns two spaces apart, no trailing spaces.

/// How a column's cells are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// A table being filled: a header row, then rows of cells.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    columns: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
    indent: usize,
}

impl Table {
    /// A table with these column headers and alignments.
    pub(crate) fn new(columns: &[(&str, Align)]) -> Table {
        Table {
            columns: columns.iter().map(|(h, a)| ((*h).to_owned(), *a)).collect(),
            rows: Vec::new(),
            indent: 0,
        }
    }

    /// Every line starts with `n` spaces.
    pub(crate) fn indent(mut self, n: usize) -> Table {
        self.indent = n;
        self
    }

    /// Adds a row (missing cells are empty; extra cells are kept in a last, unnamed column).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as lines, each ending with `\n`.
    pub(crate) fn render(&self, with_header: bool) -> String {
        let n = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.columns.len()])
            .max()
            .unwrap_or(0);
        let header: Vec<String> = (0..n)
            .map(|i| self.columns.get(i).map(|c| c.0.clone()).unwrap_or_default())
            .collect();
        let lines: Vec<&Vec<String>> = if with_header {
            std::iter::once(&header).chain(&self.rows).collect()
        } else {
            self.rows.iter().collect()
        };
        let mut widths = vec![0usize; n];
        for line in &lines {
            for (i, cell) in line.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for line in lines {
            let mut text = " ".repeat(self.indent);
            for (i, w) in widths.iter().enumerate() {
                let cell = line.get(i).map(String::as_str).unwrap_or("");
                let pad = w.saturating_sub(cell.chars().count());
                if i > 0 {
                    text.push_str("  ");
                }
                match self.columns.get(i).map_or(Align::Left, |c| c.1) {
                    Align::Left => {
                        text.push_str(cell);
                        text.push_str(&" ".repeat(pad));
                    }
                    Align::Right => {
                        text.push_str(&" ".repeat(pad));
                        text.push_str(cell);
                    }
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }

    /// Prints the table with its header.
    pub(crate) fn print(&self) {
        print!("{}", self.render(true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut t = Table::new(&[("API", Align::Left), ("CALLS Δ%", Align::Right)]);
        t.row(vec!["a.very.long.api.name".into(), "7".into()]);
        t.row(vec!["b".into(), "-12.5".into()]);
        let text = t.render(true);
        assert_eq!(
            text,
            "API                   CALLS Δ%\n\
             a.very.long.api.name         7\n\
             b                        -12.5\n"
        );
        // Every line is as long as the others (in characters), up to the trailing cell.
        let lens: Vec<usize> = text.lines().map(|l| l.chars().count()).collect();
        assert!(lens.iter().all(|l| *l == lens[0]), "{lens:?}");
    }

    #[test]
    fn indent_and_no_trailing_spaces() {
        let mut t = Table::new(&[("A", Align::Left), ("B", Align::Left)]).indent(2);
        t.row(vec!["xyz".into(), String::new()]);
        assert_eq!(t.render(false), "  xyz\n");
        assert_eq!(t.render(true), "  A    B\n  xyz\n");
    }
}
