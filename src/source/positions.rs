//! Reading only some rows of a Parquet file, chosen by their positions in it (row lineage's
//! changed rows, a deletion vector's changed rows): a [`RowSelection`] over the row groups read,
//! so the reader decodes the chosen rows and skips the rest (whole pages where the page index
//! says they hold none).

use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use parquet::file::metadata::ParquetMetaData;

/// The selection of `positions` (ascending file positions) over the rows of `groups` (each row
/// group read: its first position in the file and its rows), read one after the other.
pub fn selection(groups: &[(u64, u64)], positions: &[u64]) -> RowSelection {
    let mut selectors = Vec::new();
    let mut p = positions.iter().peekable();
    for &(start, rows) in groups {
        let mut at = start;
        while let Some(&&q) = p.peek() {
            if q >= start + rows {
                break;
            }
            p.next();
            if q < at {
                continue;
            }
            selectors.push(RowSelector::skip((q - at) as usize));
            selectors.push(RowSelector::select(1));
            at = q + 1;
        }
        selectors.push(RowSelector::skip((start + rows - at) as usize));
    }
    selectors.into()
}

/// Every row group of a file: (first position, rows), in file order.
pub fn row_groups(meta: &ParquetMetaData) -> Vec<(u64, u64)> {
    let mut at = 0u64;
    meta.row_groups()
        .iter()
        .map(|rg| {
            let g = (at, rg.num_rows().max(0) as u64);
            at += g.1;
            g
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_picks_positions_across_row_groups() {
        // row groups of 10 and 5 rows read back to back, positions in both
        let sel = selection(&[(0, 10), (10, 5)], &[2, 3, 9, 12]);
        let picked: Vec<usize> = {
            let (mut at, mut out) = (0, Vec::new());
            for s in sel.iter() {
                if !s.skip {
                    out.extend(at..at + s.row_count);
                }
                at += s.row_count;
            }
            out
        };
        assert_eq!(picked, vec![2, 3, 9, 12]);
        assert_eq!(sel.row_count() + sel.skipped_row_count(), 15);
        // a range that starts at the second row group: positions are the file's
        let sel = selection(&[(10, 5)], &[10, 14]);
        assert_eq!((sel.row_count(), sel.skipped_row_count()), (2, 3));
    }
}
