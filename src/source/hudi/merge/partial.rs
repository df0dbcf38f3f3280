//! Column-wise merges (see [`Partial`]): a key's records fold in commit order as Hudi's
//! `EventTimePartialRecordMerger` / `CommitTimePartialRecordMerger` (table version 9) or
//! `HoodieAvroRecordMerger` over the payload (before it) fold them. Each step chooses the *high*
//! record by the table's ordering exactly as a whole-row merge does ([`super::index`]), then
//! takes the columns the high record leaves [`Missing`] from the other one; where either side is
//! a delete, the high record stands as it is (`PartialUpdateHandler`). The base row meets the
//! log's result last (`finalMerge`).
//!
//! A merged row is made of several records' values, so it is not one record picked from a block:
//! the slice's log rows are held while it merges (at most `read.memory.budget`, else it stops
//! naming the file group), and each key keeps, per column, which record its value comes from.
//! The base file still streams batch by batch.

use std::collections::HashMap;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::{DataType, SchemaRef};

use super::deletes::text_equals;
use super::index::{soft, LogColumns, LogRecords, MergeColumns, Pos, Step};
use super::{keep_rows, BaseBatches, SliceMerge};
use crate::source::hudi::rule::{Missing, Partial};
use crate::source::SourceError;

/// The Hudi meta columns ([`Partial::meta_from_newer`]).
const META: &[&str] = &[
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
];

/// Where a merged column's value is: a log record, or (while the base streams) the base row.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Src {
    Log(Pos),
    Base(usize),
}

/// A key's merged record so far.
struct State {
    /// The high record (its ordering value is the merged record's); `None` after a delete
    /// without an ordering value.
    cur: Option<Pos>,
    deleted: bool,
    /// The delete is a delete-block entry's.
    block: bool,
    /// Where each column comes from, where not all from `cur`.
    src: Option<Vec<Pos>>,
    /// The base row met it.
    met: bool,
}

/// The log records of a slice folded column-wise, and the rows they fill from.
struct Fold<'a> {
    rule: &'a Partial,
    cols: &'a LogColumns,
    full: &'a [RecordBatch],
    /// Per log batch, per column: which values are missing (`None`: none is).
    missing: Vec<Vec<Option<BooleanArray>>>,
    meta: Vec<usize>,
    states: HashMap<&'a str, State>,
}

impl SliceMerge<'_> {
    /// [`SliceMerge::run`] for a table whose records merge column by column.
    pub(super) fn run_partial(
        &mut self,
        rule: &Partial,
        log: &LogRecords,
        cols: &LogColumns,
        target: &SchemaRef,
        merge: &MergeColumns,
        out: &mut dyn FnMut(RecordBatch) -> Result<(), SourceError>,
    ) -> Result<u64, SourceError> {
        let full = log.full.as_deref().ok_or_else(|| SourceError::Unsupported {
            message: format!(
                "{}: file group in `{}`: a column-wise (partial-update) merge holds the slice's log records in \
                 memory, and they exceed read.memory.budget ({} bytes); raise read.memory.budget",
                self.reader.table.path.display(),
                self.partition,
                self.reader.spill.budget
            ),
        })?;
        let mut fold = Fold {
            rule,
            cols,
            full,
            missing: full.iter().map(|b| missing(b, &rule.missing)).collect(),
            meta: META.iter().filter_map(|m| target.index_of(m).ok()).collect(),
            states: HashMap::new(),
        };
        for step in &log.steps {
            match step {
                Step::Data(b) => fold.batch(*b),
                Step::Delete(keys) => {
                    for d in keys {
                        fold.states.insert(
                            d.record_key.as_str(),
                            State {
                                cur: None,
                                deleted: true,
                                block: true,
                                src: None,
                                met: false,
                            },
                        );
                    }
                }
            }
        }
        let mut rows_read = 0;
        if let Some(base) = self.base.take() {
            rows_read += self.partial_base(base, target, merge, &mut fold, out)?;
        }
        let mut rest: Vec<(Pos, Vec<Src>)> = fold
            .states
            .values()
            .filter(|st| !st.met && !st.deleted)
            .filter_map(|st| {
                st.cur
                    .map(|c| (c, fold.sources(st).into_iter().map(Src::Log).collect()))
            })
            .collect();
        rest.sort_unstable_by_key(|r| r.0);
        let rows: Vec<Vec<Src>> = rest.into_iter().map(|r| r.1).collect();
        if !rows.is_empty() {
            out(assemble(target, None, full, &rows)?)?;
        }
        Ok(rows_read)
    }

    /// The base file streamed past the folded log: a row whose key the log has meets the log's
    /// result (`finalMerge`); the rest stay as they are.
    fn partial_base(
        &self,
        base: std::iter::Peekable<BaseBatches>,
        target: &SchemaRef,
        merge: &MergeColumns,
        fold: &mut Fold<'_>,
        out: &mut dyn FnMut(RecordBatch) -> Result<(), SourceError>,
    ) -> Result<u64, SourceError> {
        let mut rows_read = 0;
        for b in base {
            let (b, p, bk, bd) = self.base_batch(b, target, merge)?;
            rows_read += b.num_rows() as u64;
            let bord = fold.cols.ord_conv.as_ref().map(|c| c.rows(&p)).transpose()?;
            let bmissing = missing(&b, &fold.rule.missing);
            let mut merged: Vec<Vec<Src>> = Vec::new();
            let keep: BooleanArray = (0..b.num_rows())
                .map(|r| {
                    if !bk.is_valid(r) {
                        return Some(false);
                    }
                    let Some((cur, deleted, deleted_anyway, src)) = fold.meet(bk.value(r)) else {
                        return Some(!soft(&bd, r));
                    };
                    let Some(cur) = cur else {
                        return Some(false);
                    };
                    // does the log's result outrank the base row (ties to the log)?
                    let log_wins = deleted_anyway
                        || match (&fold.cols.ord_rows, &bord) {
                            (Some(ord), Some(bo)) => ord[cur.0 as usize].row(cur.1 as usize) >= bo.row(r),
                            _ => true,
                        };
                    if deleted {
                        return Some(!log_wins && !soft(&bd, r));
                    }
                    let base_missing = |c: usize| bmissing[c].as_ref().is_some_and(|m| m.value(r));
                    let row: Vec<Src> = if log_wins {
                        src.iter()
                            .enumerate()
                            .map(|(c, &s)| {
                                if fold.is_missing(s, c) {
                                    Src::Base(r)
                                } else {
                                    Src::Log(s)
                                }
                            })
                            .collect()
                    } else {
                        src.iter()
                            .enumerate()
                            .map(|(c, &s)| {
                                if base_missing(c) || fold.rule.meta_from_newer && fold.meta.contains(&c) {
                                    Src::Log(s)
                                } else {
                                    Src::Base(r)
                                }
                            })
                            .collect()
                    };
                    merged.push(row);
                    Some(false)
                })
                .collect();
            if let Some(kept) = keep_rows(b.clone(), Some(keep))? {
                out(kept)?;
            }
            if !merged.is_empty() {
                out(assemble(target, Some(&b), fold.full, &merged)?)?;
            }
        }
        Ok(rows_read)
    }
}

impl<'a> Fold<'a> {
    fn is_missing(&self, at: Pos, c: usize) -> bool {
        self.missing[at.0 as usize][c]
            .as_ref()
            .is_some_and(|m| m.value(at.1 as usize))
    }

    /// Where each column of a key's merged record comes from.
    fn sources(&self, st: &State) -> Vec<Pos> {
        match (&st.src, st.cur) {
            (Some(s), _) => s.clone(),
            (None, Some(c)) => vec![c; self.full[c.0 as usize].num_columns()],
            (None, None) => Vec::new(),
        }
    }

    /// The key's state after the base row met it: `None` where the log has no record of it.
    fn meet(&mut self, key: &str) -> Option<(Option<Pos>, bool, bool, Vec<Pos>)> {
        let st = self.states.get_mut(key)?;
        st.met = true;
        let st = &self.states[key];
        Some((
            st.cur,
            st.deleted,
            self.wins_as_delete(st.deleted, st.block),
            self.sources(st),
        ))
    }

    /// Does a delete (`del`; a delete-block entry's where `block`) win whatever the ordering?
    fn wins_as_delete(&self, del: bool, block: bool) -> bool {
        self.rule.deletes_win && del && (block || self.rule.soft_deletes_win)
    }

    /// Batch `b`'s records folded into their keys' states.
    fn batch(&mut self, b: usize) {
        let cols = self.cols;
        let keys = &cols.keys[b];
        for r in 0..keys.len() {
            if !keys.is_valid(r) {
                continue;
            }
            let at = (b as u32, r as u32);
            let (del, block) = (soft(&cols.deleted[b], r), cols.from_delete_block[b]);
            let Some(st) = self.states.get(keys.value(r)) else {
                self.states.insert(
                    keys.value(r),
                    State {
                        cur: Some(at),
                        deleted: del,
                        block,
                        src: None,
                        met: false,
                    },
                );
                continue;
            };
            let new_wins = match st.cur {
                // after a delete without an ordering value: a record wins, a delete-block entry
                // with one keeps the earlier delete (both delete)
                None => !block,
                Some(_) if self.wins_as_delete(del, block) || self.wins_as_delete(st.deleted, st.block) => true,
                Some(cur) => cols.ord_ge(at, cur),
            };
            let (old_cur, old_deleted, old_block) = (st.cur, st.deleted, st.block);
            let next = if del || old_deleted || old_cur.is_none() {
                // a delete on either side: the high record stands as it is
                new_wins.then_some((Some(at), None))
            } else {
                let src = self.sources(st);
                if new_wins {
                    let filled = src
                        .iter()
                        .enumerate()
                        .map(|(c, &s)| if self.is_missing(at, c) { s } else { at })
                        .collect();
                    Some((Some(at), Some(filled)))
                } else {
                    let filled = src
                        .iter()
                        .enumerate()
                        .map(|(c, &s)| {
                            if self.is_missing(s, c) || self.rule.meta_from_newer && self.meta.contains(&c) {
                                at
                            } else {
                                s
                            }
                        })
                        .collect();
                    Some((old_cur, Some(filled)))
                }
            };
            if let Some((cur, src)) = next {
                let (deleted, block) = if cur == Some(at) {
                    (del, block)
                } else {
                    (old_deleted, old_block)
                };
                self.states.insert(
                    keys.value(r),
                    State {
                        cur,
                        deleted,
                        block,
                        src,
                        met: false,
                    },
                );
            }
        }
    }
}

/// Which of a batch's values each column leaves to another record.
fn missing(b: &RecordBatch, m: &Missing) -> Vec<Option<BooleanArray>> {
    b.columns()
        .iter()
        .map(|c| match m {
            Missing::Nothing => None,
            Missing::Null => (c.null_count() > 0).then(|| arrow::compute::is_null(c).ok()).flatten(),
            // string columns only (Hudi's Spark row reader never matches a bytes value)
            Missing::Unavailable(text) => matches!(c.data_type(), DataType::Utf8 | DataType::LargeUtf8)
                .then(|| text_equals(c, text).ok())
                .flatten()
                .filter(|eq| eq.true_count() > 0),
        })
        .collect()
}

/// Rows of `target` made column by column from the base batch and the log rows.
fn assemble(
    target: &SchemaRef,
    base: Option<&RecordBatch>,
    full: &[RecordBatch],
    rows: &[Vec<Src>],
) -> Result<RecordBatch, SourceError> {
    let mut columns = Vec::with_capacity(target.fields().len());
    for c in 0..target.fields().len() {
        let mut arrays: Vec<&dyn Array> = Vec::with_capacity(full.len() + 1);
        let empty = arrow_array::new_empty_array(target.field(c).data_type());
        arrays.push(base.map_or(empty.as_ref(), |b| b.column(c).as_ref()));
        arrays.extend(full.iter().map(|f| {
            if f.num_columns() > c {
                f.column(c).as_ref()
            } else {
                empty.as_ref()
            }
        }));
        let idx: Vec<(usize, usize)> = rows
            .iter()
            .map(|row| match row[c] {
                Src::Base(r) => (0, r),
                Src::Log((b, r)) => (b as usize + 1, r as usize),
            })
            .collect();
        columns.push(arrow::compute::interleave(&arrays, &idx).map_err(SourceError::arrow("merging columns"))?);
    }
    RecordBatch::try_new(target.clone(), columns).map_err(SourceError::arrow("merging columns"))
}
